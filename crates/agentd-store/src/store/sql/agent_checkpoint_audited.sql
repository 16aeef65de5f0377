-- A tool's result: its audit row ($1-$13, `store::audit::audit_arguments`), the run's
-- checkpoint ($14 run, $15 seq, $16 kind, $17 call id, $18 payload, $19 time) and the run's
-- counters (+$20 rounds, +$21 tool calls, +$22 input and +$23 output tokens), in one
-- statement (`store::agent_loop::checkpoint_audited`). Returns the run's token total.
WITH audit AS (
  INSERT INTO audit_events (org_id, run_id, call_id, actor, tool, category, decision, args,
                            outcome, is_error, duration_ms, tokens, created_at)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)),
step AS (
  INSERT INTO agent_steps (run_id, seq, kind, call_id, payload, created_at)
  VALUES ($14, $15, $16, $17, $18, $19))
UPDATE agent_runs
   SET rounds = rounds + $20, tool_calls = tool_calls + $21,
       input_tokens = input_tokens + $22, output_tokens = output_tokens + $23
 WHERE id = $14
RETURNING input_tokens + output_tokens

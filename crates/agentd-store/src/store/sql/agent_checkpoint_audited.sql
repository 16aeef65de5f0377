-- A tool's result: its audit row ($1-$13, `store::audit::audit_arguments`), the run's
-- checkpoint ($14 run, $15 seq, $16 kind, $17 call id, $18 payload, $19 time) and the run's
-- counters (+$20 rounds, +$21 tool calls, +$22 input and +$23 output tokens), in one
-- statement (`store::agent_loop::checkpoint_audited`), with the call's `run.step` event (tool
-- name, decision, duration; never its arguments or result: migration 0104). Returns the run's
-- token total.
WITH audit AS (
  INSERT INTO audit_events (org_id, run_id, call_id, actor, tool, category, decision, args,
                            outcome, is_error, duration_ms, tokens, created_at)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)),
step AS (
  INSERT INTO agent_steps (run_id, seq, kind, call_id, payload, created_at)
  VALUES ($14, $15, $16, $17, $18, $19)),
event AS (
  INSERT INTO agentd_events (org_id, type, subject_id, occurred_at, payload, dedupe_key)
  SELECT r.org_id, 'run.step', $14, $19,
         jsonb_build_object('run_id', $14::uuid, 'seq', $15::integer, 'step', 'tool',
                            'kind', r.kind,
                            'document_id', CASE WHEN r.kind = 'auto_create'
                                                THEN agentd_uuid_or_null(r.subject) END,
                            -- a name the model made up is not repeated (it could be any text)
                            'tool', CASE WHEN $5::text ~ '^[a-z][a-z0-9_]{0,63}$' THEN $5::text END,
                            'decision', $7::text,
                            'duration_ms', $11::integer, 'is_error', $10::boolean),
         'run.step:' || $14::text || ':' || $15::text
    FROM agent_runs r WHERE r.id = $14
  ON CONFLICT (dedupe_key) DO NOTHING)
UPDATE agent_runs
   SET rounds = rounds + $20, tool_calls = tool_calls + $21,
       input_tokens = input_tokens + $22, output_tokens = output_tokens + $23
 WHERE id = $14
RETURNING input_tokens + output_tokens

-- A model turn's checkpoint ($1 run, $2 seq, $3 kind, $4 call id, $5 payload, $6 time), the
-- run's counters (+$7 rounds, +$8 tool calls, +$9 input and +$10 output tokens, +$16 cache
-- reads and +$17 cache writes of that input, +$18 nano-dollars of cost, +$19 tokens of a model
-- without a price; a run's NULL cost, from before costs were recorded, stays NULL), the turn's
-- budget reservation $11 (if any) released and its $13 tokens charged to org $12's budget of the period
-- starting $14, in one statement (`store::agent_loop::checkpoint_settled`); with $15 the commit
-- does not wait for the WAL flush. Returns the run's token total and the org's budget after
-- the charge (NULLs: no budget). The round's `run.step` event (its tokens in and out, never
-- its text) is written in the same statement, so it exists exactly when the checkpoint does
-- (migration 0104).
WITH unflushed AS (
  SELECT set_config('synchronous_commit', 'off', true) WHERE $15),
step AS (
  INSERT INTO agent_steps (run_id, seq, kind, call_id, payload, created_at)
  VALUES ($1, $2, $3, $4, $5, $6)),
event AS (
  INSERT INTO agentd_events (org_id, type, subject_id, occurred_at, payload, dedupe_key)
  SELECT r.org_id, 'run.step', $1, $6,
         jsonb_build_object('run_id', $1::uuid, 'seq', $2::integer, 'step', 'model',
                            'kind', r.kind,
                            -- a round of the loop, or a tool's own model call (run_extraction)
                            'model_call', CASE WHEN $3 = 'tool_model' THEN 'tool' ELSE 'round' END,
                            'document_id', CASE WHEN r.kind = 'auto_create'
                                                THEN agentd_uuid_or_null(r.subject) END,
                            'input_tokens', $9::bigint, 'output_tokens', $10::bigint),
         'run.step:' || $1::text || ':' || $2::text
    FROM agent_runs r WHERE r.id = $1
  ON CONFLICT (dedupe_key) DO NOTHING),
released AS (DELETE FROM budget_reservations WHERE id = $11),
charged AS (
  UPDATE org_budgets
     SET tokens_used = CASE WHEN period_start >= $14 THEN tokens_used + $13 ELSE $13 END,
         period_start = GREATEST(period_start, $14)
   WHERE org_id = $12
  RETURNING tokens_used, monthly_limit),
run AS (
  UPDATE agent_runs
     SET rounds = rounds + $7, tool_calls = tool_calls + $8,
         input_tokens = input_tokens + $9, output_tokens = output_tokens + $10,
         cache_read_tokens = cache_read_tokens + $16, cache_write_tokens = cache_write_tokens + $17,
         cost_nano_usd = cost_nano_usd + $18, unpriced_tokens = unpriced_tokens + $19
   WHERE id = $1
  RETURNING input_tokens + output_tokens AS tokens)
SELECT run.tokens, charged.tokens_used, charged.monthly_limit
  FROM run LEFT JOIN charged ON true LEFT JOIN unflushed ON true

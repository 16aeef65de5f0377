-- `enqueue_one.sql` with the insert trigger's NOTIFY left to the caller, which sends it after
-- the commit (`agentd.jobs_notify = after_commit` for this transaction, migration 0060).
WITH defer AS (SELECT set_config('agentd.jobs_notify', 'after_commit', true))
INSERT INTO agentd_jobs (kind, payload, priority, run_at, max_attempts, unique_key, traceparent)
SELECT $1, $2, $3, COALESCE($4, now()), $5, $6, $8
  FROM defer
 WHERE NOT ($7 AND EXISTS (SELECT 1 FROM agentd_jobs WHERE unique_key = $6))
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state IN ('available', 'running')
DO NOTHING
RETURNING id

-- One job: kind $1, payload $2, priority $3, run at $4 (NULL: now), at most $5 attempts,
-- unique key $6 (NULL: none), traceparent $8. Skipped (no row returned) when a job with the
-- key is waiting or running (the partial unique index), or with $7 (`unique_until_purged`)
-- when any job with the key is still stored. The insert trigger sends the NOTIFY.
INSERT INTO agentd_jobs (kind, payload, priority, run_at, max_attempts, unique_key, traceparent)
SELECT $1, $2, $3, COALESCE($4, now()), $5, $6, $8
 WHERE NOT ($7 AND EXISTS (SELECT 1 FROM agentd_jobs WHERE unique_key = $6))
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state IN ('available', 'running')
DO NOTHING
RETURNING id

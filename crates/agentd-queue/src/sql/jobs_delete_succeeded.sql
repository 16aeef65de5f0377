-- Deletes the running jobs $1 that succeeded (kinds with `delete_on_success`), where their
-- attempt is still $2 (one attempt for them all; `jobs_delete_succeeded_mixed.sql` takes one
-- per job). Returns the ids whose attempt held; a stale attempt's job keeps its row.
DELETE FROM agentd_jobs j
 WHERE j.id = ANY($1::int8[]) AND j.state = 'running' AND j.attempt = $2::int4
RETURNING j.id

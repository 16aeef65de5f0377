-- Marks the running jobs $1 succeeded at $3, where their attempt is still $2 (one attempt for
-- them all; `jobs_complete_mixed.sql` takes one per job). Returns the ids whose attempt held
-- (a stale attempt cannot complete a job). A primary-key lookup per id.
UPDATE agentd_jobs j
   SET state = 'succeeded', finished_at = $3, lease_expires_at = NULL, locked_by = NULL,
       last_error = NULL
 WHERE j.id = ANY($1::int8[]) AND j.state = 'running' AND j.attempt = $2::int4
RETURNING j.id

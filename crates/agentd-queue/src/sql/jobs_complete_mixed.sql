-- `jobs_complete.sql` with an attempt per job: $2[i] for job $1[i].
UPDATE agentd_jobs j
   SET state = 'succeeded', finished_at = $3, lease_expires_at = NULL, locked_by = NULL,
       last_error = NULL
 WHERE j.id = ANY($1::int8[]) AND j.state = 'running'
   AND j.attempt = ($2::int4[])[array_position($1::int8[], j.id)]
RETURNING j.id

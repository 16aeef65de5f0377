-- `jobs_delete_succeeded.sql` with an attempt per job: $2[i] for job $1[i].
DELETE FROM agentd_jobs j
 WHERE j.id = ANY($1::int8[]) AND j.state = 'running'
   AND j.attempt = ($2::int4[])[array_position($1::int8[], j.id)]
RETURNING j.id

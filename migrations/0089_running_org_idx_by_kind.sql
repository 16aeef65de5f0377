-- Acks, heartbeats and failures name their jobs by id (`id = ANY($1) AND state = 'running'`).
-- After an ANALYZE that saw no running rows (any queue that was idle, every `agentd bench
-- drain` repetition), the planner took the running-by-org index of 0076 for them: it matches
-- `state = 'running'` and looked empty, so each ack read every running job's entry (~11 index
-- entries per job in a 20k drain, 36 ms for an ack of 270 with 9,600 running). Its predicate
-- now also says `kind IS NOT NULL`: the counts of running jobs by org (`kind = $1`) still
-- imply it; statements that do not name a kind cannot use the index, and take the
-- primary key or the running-by-id index (0050) with their ids as the index condition.
DROP INDEX agentd_jobs_running_org_idx;
CREATE INDEX agentd_jobs_running_org_idx ON agentd_jobs
    (kind, (coalesce(payload->>'org_id', '')))
    WHERE state = 'running' AND kind IS NOT NULL;

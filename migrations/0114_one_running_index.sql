-- Issue 51: one index of the running jobs, not two. A claim wrote an entry for each claimed job
-- in `agentd_jobs_running_idx (id) WHERE state = 'running'` (0050, for the rescuer) and in
-- `agentd_jobs_running_org_idx (kind, org) WHERE state = 'running' AND kind IS NOT NULL` (0089,
-- for the per-org caps): one WAL record and one index descent a job more than needed (a claim
-- of 500 on a 200k backlog: 9.2 → 7.7 ms, docs/queue-profile.md). The rescuer and the list of
-- running jobs now say `kind IS NOT NULL` (always true: the column is NOT NULL) so the running-
-- by-org index serves them; acks, heartbeats and failures name their jobs by id and take the
-- primary key (0089 says why they must not take the running-by-org index).
DROP INDEX agentd_jobs_running_idx;

-- Issue 18: fewer index writes per job.
--
-- The rescuer's index on lease_expires_at made every heartbeat a non-HOT update: a new index
-- entry in every index of agentd_jobs for each renewal of each running job. Running rows are few
-- (at most the workers' total concurrency), so the rescuer reads them through a partial index
-- on a column nothing updates, and a heartbeat (which changes only lease_expires_at) is a HOT
-- update within the page (fillfactor 80 leaves the room).
DROP INDEX agentd_jobs_lease_idx;
CREATE INDEX agentd_jobs_running_idx ON agentd_jobs (id) WHERE state = 'running';

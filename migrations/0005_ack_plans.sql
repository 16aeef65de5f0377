-- The partial index on running rows made the planner believe "one running row" from stale
-- statistics and drive acks with a nested loop over it (see queue/store.rs complete_many).
-- The rescuer's `lease_expires_at < $now` still implies this predicate and uses the index.
DROP INDEX agentd_jobs_lease_idx;
CREATE INDEX agentd_jobs_lease_idx ON agentd_jobs (lease_expires_at) WHERE lease_expires_at IS NOT NULL;

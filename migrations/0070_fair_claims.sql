-- Fair claims between organisations (issue 30, item 1).
--
-- A claim shares its slots among the orgs that have ready jobs of the kind (src/queue/fair.rs):
-- it finds the orgs at the highest ready priority by skipping through this index (one descent
-- per org), then walks each org's own ready jobs in `run_at, id` order under SKIP LOCKED. The
-- org is `coalesce(payload->>'org_id', '')`: jobs without an org (cron ticks, approval sweeps)
-- are the group ''. Every claim query spells that expression exactly (queue::fair::ORG_KEY) so
-- the planner matches it to this index.
--
-- It replaces the claim index of 0001 (same leading columns and predicate), so an enqueue
-- writes as many index entries as before. Claims and acks stay what they were for HOT: the
-- expression reads only `payload`, which nothing updates, and `state` was already in the
-- predicate (a claim or an ack changes it, so neither was a HOT update before either; a
-- heartbeat changes only lease_expires_at and stays HOT, migration 0050). Entries are written
-- only for `available` row versions (enqueue, retry, release, rescue), never by a claim or ack.
DROP INDEX agentd_jobs_claim_idx;
CREATE INDEX agentd_jobs_claim_idx ON agentd_jobs
    (kind, priority DESC, (coalesce(payload->>'org_id', '')), run_at, id)
    WHERE state = 'available';

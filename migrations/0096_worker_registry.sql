-- Issue 47, item 2: one row per live worker process, written every heartbeat
-- (`store::workers`), so another process — `agentd status` — can show what lives only in a
-- worker's memory: each provider entry's circuit breaker (`llm::chain::breaker::Snapshot`s, the
-- fleet's breakers, not an org key's). `id` is the worker's `agentd_jobs.locked_by` prefix. A
-- worker deletes its row when it stops; one that died leaves it past `expires_at` (a lease
-- after its last beat), when status no longer counts it, and the next beat of any worker
-- removes rows expired for a day.
CREATE TABLE agentd_workers (
    id         text PRIMARY KEY,
    host       text NOT NULL,
    pid        integer NOT NULL,
    kinds      text[] NOT NULL,
    started_at timestamptz NOT NULL,
    seen_at    timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    breakers   jsonb NOT NULL DEFAULT '[]'
);

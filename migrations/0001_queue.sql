-- The job queue. One row per job; state machine:
--   available -> running -> succeeded | available (retry, run_at in the future) | dead
--   available | running -> cancelled (by operator)
CREATE TABLE agentd_jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind             text        NOT NULL,
    payload          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    state            text        NOT NULL DEFAULT 'available'
                     CHECK (state IN ('available', 'running', 'succeeded', 'dead', 'cancelled')),
    -- higher runs first
    priority         smallint    NOT NULL DEFAULT 0,
    run_at           timestamptz NOT NULL DEFAULT now(),
    -- incremented by every claim; also the fencing token of the current attempt
    attempt          integer     NOT NULL DEFAULT 0,
    -- claims given back by a graceful shutdown; they do not count against max_attempts
    released         integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    lease_expires_at timestamptz,
    locked_by        text,
    -- ON CONFLICT (unique_key) DO NOTHING: duplicates are skipped
    unique_key       text UNIQUE,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz
) WITH (fillfactor = 80);

-- The claim index: only ready rows, in claim order.
CREATE INDEX agentd_jobs_claim_idx ON agentd_jobs (kind, priority DESC, run_at, id) WHERE state = 'available';
-- Rescue of expired leases.
CREATE INDEX agentd_jobs_lease_idx ON agentd_jobs (lease_expires_at) WHERE state = 'running';
-- Retention of finished jobs.
CREATE INDEX agentd_jobs_finished_idx ON agentd_jobs (finished_at) WHERE state IN ('succeeded', 'dead', 'cancelled');

-- One NOTIFY per statement, not per row: a batch insert of 10,000 jobs wakes workers once.
CREATE FUNCTION agentd_jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('agentd_jobs', '');
    RETURN NULL;
END $$;

CREATE TRIGGER agentd_jobs_notify_insert AFTER INSERT ON agentd_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION agentd_jobs_notify();

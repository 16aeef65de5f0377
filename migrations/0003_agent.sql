CREATE TABLE agent_runs (
    id            uuid PRIMARY KEY,
    org_id        uuid NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    kind          text NOT NULL,
    -- what the run works on: a document id, a night, an approval chain
    subject       text NOT NULL,
    -- the queue job that drives this run; a retried job resumes the same run
    job_id        bigint UNIQUE,
    provider      text NOT NULL,
    model         text NOT NULL,
    status        text NOT NULL CHECK (status IN ('running', 'succeeded', 'capped', 'failed', 'cancelled')),
    stop_reason   text,
    rounds        integer NOT NULL DEFAULT 0,
    tool_calls    integer NOT NULL DEFAULT 0,
    input_tokens  bigint  NOT NULL DEFAULT 0,
    output_tokens bigint  NOT NULL DEFAULT 0,
    final_text    text,
    error         text,
    started_at    timestamptz NOT NULL,
    finished_at   timestamptz
);
CREATE INDEX agent_runs_org_idx ON agent_runs (org_id, started_at DESC);

-- Checkpoints: the transcript. One row per provider response and per tool result.
CREATE TABLE agent_steps (
    run_id     uuid    NOT NULL REFERENCES agent_runs(id) ON DELETE CASCADE,
    seq        integer NOT NULL,
    kind       text    NOT NULL CHECK (kind IN ('llm_response', 'tool_result')),
    -- for tool_result: the model's tool call id; makes tool execution idempotent per run
    call_id    text,
    payload    jsonb   NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, seq),
    UNIQUE (run_id, call_id)
);

CREATE TABLE audit_events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    org_id      uuid NOT NULL,
    run_id      uuid,
    call_id     text,
    actor       text NOT NULL,
    tool        text NOT NULL,
    category    text NOT NULL,
    decision    text NOT NULL CHECK (decision IN ('auto_approved', 'proposed', 'denied', 'human_approved',
                'human_rejected', 'expired', 'stale', 'error', 'capped')),
    args        jsonb,
    outcome     jsonb,
    is_error    boolean NOT NULL DEFAULT false,
    duration_ms integer NOT NULL DEFAULT 0,
    tokens      integer NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_events_run_idx ON audit_events (run_id, id);
CREATE INDEX audit_events_org_idx ON audit_events (org_id, created_at);

-- Append-only: UPDATE and DELETE are refused, whoever asks.
CREATE FUNCTION audit_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_events is append-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER audit_events_no_update BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION audit_events_append_only();
CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION audit_events_append_only();

CREATE TABLE pending_approvals (
    id            uuid PRIMARY KEY,
    org_id        uuid NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    run_id        uuid,
    suggestion_id uuid,
    call_id       text,
    tool          text NOT NULL,
    args          jsonb NOT NULL,
    snapshot      jsonb NOT NULL,
    snapshot_hash text  NOT NULL,
    created_at    timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL,
    status        text NOT NULL DEFAULT 'pending'
                  CHECK (status IN ('pending', 'executed', 'rejected', 'expired', 'stale', 'failed')),
    decided_by    text,
    decided_at    timestamptz,
    result        jsonb,
    -- ask the expiry sweep to re-propose this action if it goes stale
    repropose     boolean NOT NULL DEFAULT false,
    -- re-proposals of one original approval share a chain; depth bounds them
    chain_id      uuid NOT NULL,
    chain_depth   integer NOT NULL DEFAULT 0,
    UNIQUE (run_id, call_id)
);
CREATE INDEX pending_approvals_pending_idx ON pending_approvals (expires_at) WHERE status = 'pending';
CREATE INDEX pending_approvals_decided_idx ON pending_approvals (decided_at) WHERE status <> 'pending';
CREATE INDEX pending_approvals_org_idx ON pending_approvals (org_id, created_at DESC);

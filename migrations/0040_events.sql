-- The events outbox (issue 15): one row per thing the product should hear about, written in the
-- transaction of its cause, so an event exists exactly when what it reports committed.
--
-- Readers follow a cursor. Ids come from a sequence, and transactions commit out of id order, so
-- reading `id > after` could skip an event whose transaction commits after a later id was read.
-- Each row therefore records its writing transaction (`tx`); a reader only returns rows whose
-- transaction is older than every transaction still running (`tx < pg_snapshot_xmin(...)`), in
-- `(tx, id)` order. No transaction that can still commit has such an xid, so the stream behind a
-- cursor never grows a gap. The public cursor is an event id; the reader resolves its `(tx, id)`.
CREATE TABLE agentd_events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    org_id      uuid NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    type        text NOT NULL CHECK (type ~ '^[a-z_]+\.[a-z_]+$'),
    -- The approval, run, document or suggestion the event is about (none for org-wide ones).
    subject_id  uuid,
    occurred_at timestamptz NOT NULL,
    payload     jsonb NOT NULL DEFAULT '{}',
    -- "Emitted once": a cause retried by a reclaimed attempt writes the same key and is ignored.
    dedupe_key  text UNIQUE,
    tx          xid8 NOT NULL DEFAULT pg_current_xact_id()
);

CREATE INDEX agentd_events_org_position ON agentd_events (org_id, tx, id);

-- Paused kinds (issue 33, item 4): an org's admin pauses a job kind for that org
-- (`POST /v1/queue/{kind}/pause`); every worker's claim then leaves that org's ready jobs of
-- the kind where they are (running ones finish) until `…/resume` deletes the row.
--
-- The fair claim (src/queue/fair.rs) looks a ring org up here by primary key, once per org it
-- visits: no scan, and with nothing paused a lookup in an empty table. `org_key` is the org as
-- the claim index holds it (queue::fair::ORG_KEY, the payload's `org_id` text).
CREATE TABLE agentd_paused_kinds (
    kind      text        NOT NULL,
    org_id    uuid        NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    org_key   text        GENERATED ALWAYS AS (org_id::text) STORED,
    paused_at timestamptz NOT NULL,
    -- The API key that paused it (keys are revoked, never deleted).
    paused_by uuid,
    PRIMARY KEY (kind, org_key)
);

-- Issue 15, the life cycle: per-org settings, approvals that carry their reason, suggestions
-- with a life.

-- Per-org settings (`agentd orgs set`, `PATCH /v1/settings`). NULL: the job file's or the
-- config's value.
ALTER TABLE orgs
    ADD COLUMN timezone          text     NOT NULL DEFAULT 'UTC',
    ADD COLUMN nightly_hour      smallint NOT NULL DEFAULT 2 CHECK (nightly_hour BETWEEN 0 AND 23),
    ADD COLUMN approval_ttl_secs integer  CHECK (approval_ttl_secs > 0),
    ADD COLUMN repropose_expired boolean  NOT NULL DEFAULT false,
    ADD COLUMN model             text,
    ADD COLUMN auto_create       boolean  NOT NULL DEFAULT true,
    -- What the org asked for; `org_budgets.monthly_limit` is the limit enforced, the smaller of
    -- this and the tokens the cost cap buys at the model's price.
    ADD COLUMN token_budget      bigint   CHECK (token_budget >= 0),
    ADD COLUMN cost_cap_cents    bigint   CHECK (cost_cap_cents >= 0);

UPDATE orgs o SET token_budget = b.monthly_limit FROM org_budgets b WHERE b.org_id = o.id;

ALTER TABLE pending_approvals
    -- Why the agent proposed it (the model's text of that turn, or the suggestion's message).
    ADD COLUMN rationale           text,
    -- One line in words: "Create tag 'urgent' on document 'invoice.txt'".
    ADD COLUMN summary             text,
    -- A rejection's reason.
    ADD COLUMN decision_reason     text,
    -- Approved with arguments a person changed (re-validated and re-hashed).
    ADD COLUMN edited              boolean NOT NULL DEFAULT false,
    -- `approval.expiring` was written (once per approval).
    ADD COLUMN expiring_notified_at timestamptz,
    -- An expired approval re-proposed unchanged (the new approval's id).
    ADD COLUMN reproposed_as       uuid;

CREATE INDEX pending_approvals_expired_idx ON pending_approvals (decided_at)
    WHERE status = 'expired' AND reproposed_as IS NULL;

ALTER TABLE suggestions
    ADD COLUMN status_reason     text,
    ADD COLUMN status_changed_at timestamptz,
    ADD COLUMN status_by         text;

-- The nightly run skips subjects dismissed recently.
CREATE INDEX suggestions_dismissed_idx ON suggestions (org_id, kind, subject, status_changed_at)
    WHERE status = 'dismissed';

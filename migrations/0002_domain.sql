CREATE TABLE orgs (
    id         uuid PRIMARY KEY,
    name       text NOT NULL UNIQUE,
    active     boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Monthly token budget per org; counters are updated atomically in SQL.
CREATE TABLE org_budgets (
    org_id         uuid PRIMARY KEY REFERENCES orgs(id) ON DELETE CASCADE,
    monthly_limit  bigint NOT NULL CHECK (monthly_limit >= 0),
    period_start   date   NOT NULL,
    tokens_used    bigint NOT NULL DEFAULT 0,
    -- set when the 80% warning was emitted for period_start (once per period)
    warned_period  date
);

CREATE TABLE tags (
    id          uuid PRIMARY KEY,
    org_id      uuid NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    name        text NOT NULL,
    color       text NOT NULL,
    run_id      uuid,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (org_id, name)
);

CREATE TABLE schemas (
    schema_id       uuid    NOT NULL,
    version         integer NOT NULL,
    org_id          uuid    NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    name            text    NOT NULL,
    response_format jsonb   NOT NULL,
    status          text    NOT NULL CHECK (status IN ('proposed', 'active')),
    run_id          uuid,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schema_id, version)
);
CREATE INDEX schemas_org_idx ON schemas (org_id);

CREATE TABLE prompts (
    prompt_id      uuid    NOT NULL,
    version        integer NOT NULL,
    org_id         uuid    NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    name           text    NOT NULL,
    content        text    NOT NULL,
    schema_id      uuid    NOT NULL,
    schema_version integer NOT NULL,
    model          text,
    tag_ids        uuid[]  NOT NULL DEFAULT '{}',
    status         text    NOT NULL CHECK (status IN ('proposed', 'active')),
    run_id         uuid,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (prompt_id, version),
    FOREIGN KEY (schema_id, schema_version) REFERENCES schemas(schema_id, version) ON DELETE CASCADE
);
CREATE INDEX prompts_org_idx ON prompts (org_id);

CREATE TABLE documents (
    id                      uuid PRIMARY KEY,
    org_id                  uuid NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    name                    text NOT NULL,
    text                    text,
    metadata                jsonb  NOT NULL DEFAULT '{}'::jsonb,
    tag_ids                 uuid[] NOT NULL DEFAULT '{}',
    auto_create_status      text NOT NULL DEFAULT 'none' CHECK (auto_create_status IN
                            ('none', 'queued', 'running', 'proposed', 'accepted', 'rejected', 'failed', 'skipped')),
    proposed_schema_id      uuid,
    proposed_schema_version integer,
    proposed_prompt_id      uuid,
    proposed_prompt_version integer,
    proposed_extraction_id  uuid,
    auto_create_run_id      uuid,
    auto_create_error       text,
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX documents_org_idx ON documents (org_id, created_at);

CREATE TABLE extractions (
    id             uuid PRIMARY KEY,
    org_id         uuid NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    document_id    uuid NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    prompt_id      uuid NOT NULL,
    prompt_version integer NOT NULL,
    schema_id      uuid NOT NULL,
    schema_version integer NOT NULL,
    result         jsonb NOT NULL,
    status         text NOT NULL CHECK (status IN ('proposed', 'accepted')),
    run_id         uuid,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX extractions_doc_idx ON extractions (org_id, document_id, created_at);

CREATE TABLE suggestions (
    id              uuid PRIMARY KEY,
    org_id          uuid NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    kind            text NOT NULL,
    -- what the suggestion is about: a document id, or '' for the org as a whole
    subject         text NOT NULL DEFAULT '',
    night           date NOT NULL,
    title           text NOT NULL,
    message         text NOT NULL,
    document_id     uuid,
    proposed_action jsonb,
    status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'shown', 'acted', 'dismissed', 'expired')),
    run_id          uuid,
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (org_id, kind, subject, night)
);

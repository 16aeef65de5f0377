-- Issue 32: several providers and the keys orgs bring.

-- An org's own provider key, encrypted with AES-256-GCM under llm.org_key_encryption_key (the
-- org's id is the associated data). The raw key is in no column: `last4` is what the API shows.
CREATE TABLE org_provider_keys (
    org_id     uuid PRIMARY KEY REFERENCES orgs(id) ON DELETE CASCADE,
    -- the provider entry the key is for (llm.providers[].name); NULL: the first that takes a key
    provider   text,
    nonce      bytea NOT NULL CHECK (length(nonce) = 12),
    ciphertext bytea NOT NULL,
    last4      text  NOT NULL,
    set_at     timestamptz NOT NULL
);

-- Every provider call of a run or an approval, one row per attempt of a chain: which entry
-- answered (or failed) with which model, and what it was charged. Append-only like the audit.
CREATE TABLE provider_calls (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    org_id        uuid NOT NULL,
    run_id        uuid,
    provider      text NOT NULL,
    model         text NOT NULL,
    outcome       text NOT NULL CHECK (outcome IN ('answered', 'failed')),
    -- made with the org's own key
    org_key       boolean NOT NULL DEFAULT false,
    input_tokens  bigint  NOT NULL DEFAULT 0,
    output_tokens bigint  NOT NULL DEFAULT 0,
    duration_ms   integer NOT NULL DEFAULT 0,
    error         text,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX provider_calls_run_idx ON provider_calls (run_id, id);
CREATE INDEX provider_calls_org_idx ON provider_calls (org_id, created_at);
CREATE TRIGGER provider_calls_no_update BEFORE UPDATE OR DELETE ON provider_calls
    FOR EACH ROW EXECUTE FUNCTION audit_events_append_only();

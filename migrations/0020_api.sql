-- HTTP API: keys (only a SHA-256 of the secret is stored) and Idempotency-Key replays.
CREATE TABLE api_keys (
    id          uuid PRIMARY KEY,
    org_id      uuid NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    role        text NOT NULL CHECK (role IN ('reader', 'uploader', 'reviewer', 'admin')),
    -- hex SHA-256 of the whole key; the key itself is shown once and never stored
    key_hash    text NOT NULL UNIQUE,
    -- the first characters of the key, so a person can tell keys apart in `keys list`
    key_prefix  text NOT NULL,
    created_at  timestamptz NOT NULL,
    revoked_at  timestamptz
);
CREATE INDEX api_keys_org_idx ON api_keys (org_id);

-- One row per (org, Idempotency-Key): the request's hash and the answer given, written in the
-- same transaction as the document, so a replay returns exactly what the first call returned.
CREATE TABLE api_idempotency (
    org_id        uuid NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    key           text NOT NULL,
    route         text NOT NULL,
    request_hash  text NOT NULL,
    status        smallint NOT NULL,
    response      jsonb NOT NULL,
    created_at    timestamptz NOT NULL,
    PRIMARY KEY (org_id, key)
);

-- The API pages suggestions newest first, per org.
CREATE INDEX suggestions_org_created_idx ON suggestions (org_id, created_at DESC, id DESC);

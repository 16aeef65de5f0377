-- Review D9: webhook signing secrets encrypted at rest under the org-key master key
-- (`llm.org_key_encryption_key`, AES-256-GCM; the org, the subscription and the key id are the
-- associated data, see `llm::org_keys`). A subscription's secret is either in `secret` (a
-- server without a master key, or a row made before this migration) or sealed in the three
-- `secret_*` columns, never both.
--
-- The existing rows keep their secret in clear: SQL cannot encrypt without the key, which is
-- not in the database. `agentd orgs rekey` seals them under the current key (and `agentd worker`
-- and `agentd serve` warn at start while any remain on a server that has one).
ALTER TABLE agentd_webhooks
    ALTER COLUMN secret DROP NOT NULL,
    ADD COLUMN secret_key_id text CHECK (secret_key_id ~ '^[0-9a-f]{16}$'),
    ADD COLUMN secret_nonce bytea CHECK (length(secret_nonce) = 12),
    ADD COLUMN secret_ciphertext bytea,
    ADD CONSTRAINT agentd_webhooks_secret_clear_or_sealed CHECK (
        (secret IS NOT NULL AND secret_key_id IS NULL AND secret_nonce IS NULL
             AND secret_ciphertext IS NULL)
        OR (secret IS NULL AND secret_key_id IS NOT NULL AND secret_nonce IS NOT NULL
             AND secret_ciphertext IS NOT NULL));

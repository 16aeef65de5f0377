-- Review D9: which master key encrypted each org provider key. `key_id` names the
-- `llm.org_key_encryption_key` (current or one of `llm.org_key_previous_encryption_keys`) the
-- row is sealed with: the first 8 bytes of a SHA-256 of the key, in hex (`llm::org_keys`), so
-- a row is read with that key and `agentd orgs rekey` finds the rows of the older keys. A row
-- sealed under a key id also binds the org, the provider entry and the key id as associated
-- data (a ciphertext copied to another org or entry does not decrypt).
--
-- Rows written before this migration have no key id: they were sealed with the org id alone as
-- associated data, and are read with any configured key until `agentd orgs rekey` seals them
-- again under the current key (no SQL can: the key is not in the database).
ALTER TABLE org_provider_keys
    ADD COLUMN key_id text CHECK (key_id ~ '^[0-9a-f]{16}$');

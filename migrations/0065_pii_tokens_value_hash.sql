-- A run's redaction table is unique per value through the value's MD5, not the value itself: a
-- btree entry holds at most ~2.7 kB, so a long personal value (a 4 kB e-mail address in a
-- document or its metadata) could not be stored and every provider call of the run failed
-- (review N11). MD5 is an index key here, not a secret: the value is in the row beside it.
ALTER TABLE pii_tokens DROP CONSTRAINT pii_tokens_run_id_value_key;
CREATE UNIQUE INDEX pii_tokens_run_value_md5_key ON pii_tokens (run_id, md5(value));

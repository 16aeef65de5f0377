-- Insertion order for rows the tools must rank "latest first". `created_at` comes from the
-- Clock, which tests freeze: two prompts (or extractions) made in one run can share a
-- timestamp, so "the latest prompt created in this run" and "the latest extraction of a
-- document" break ties by this sequence.
ALTER TABLE prompts ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY;
ALTER TABLE extractions ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY;

-- run_extraction's default prompt: the run's latest prompt.
CREATE INDEX prompts_run_idx ON prompts (run_id, seq) WHERE run_id IS NOT NULL;
-- The nightly overview's per-status counts and filters.
CREATE INDEX documents_org_status_idx ON documents (org_id, auto_create_status);

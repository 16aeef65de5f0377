-- Issue 28, item 4: reuse before creating. An auto_create run whose `create_schema` matches a
-- schema the org already has (by field overlap) reuses it instead of adding one more schema: a
-- new version when fields are missing (that version is the run's, `schemas.run_id`), or, when
-- the existing version already holds every field, this record of which version the run reused.
-- The run's proposal reads it after its own prompt and schema (`store::auto_create::artifacts`).
-- Deleting the version forgets the reuse (only these two columns are set to NULL).
ALTER TABLE agent_runs
    ADD COLUMN reused_schema_id uuid,
    ADD COLUMN reused_schema_version integer,
    ADD CONSTRAINT agent_runs_reused_schema_fk
        FOREIGN KEY (org_id, reused_schema_id, reused_schema_version)
        REFERENCES schemas (org_id, schema_id, version)
        ON DELETE SET NULL (reused_schema_id, reused_schema_version);

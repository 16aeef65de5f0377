-- Defence in depth (issue 12): foreign keys that include org_id, so no row can reference another
-- organisation's row whatever a query forgets, and a helper that grants the application role
-- what agentd needs and nothing that could rewrite the audit trail.
--
-- The new keys are added NOT VALID: enforced for every new or changed row at once, without
-- failing the migration on rows written before (run `ALTER TABLE … VALIDATE CONSTRAINT …` to
-- check those).

ALTER TABLE schemas ADD CONSTRAINT schemas_org_key UNIQUE (org_id, schema_id, version);
ALTER TABLE prompts ADD CONSTRAINT prompts_org_key UNIQUE (org_id, prompt_id, version);
ALTER TABLE documents ADD CONSTRAINT documents_org_key UNIQUE (org_id, id);
ALTER TABLE suggestions ADD CONSTRAINT suggestions_org_key UNIQUE (org_id, id);

-- A prompt's schema is in the prompt's org.
ALTER TABLE prompts DROP CONSTRAINT prompts_schema_id_schema_version_fkey;
ALTER TABLE prompts ADD CONSTRAINT prompts_schema_same_org_fkey
    FOREIGN KEY (org_id, schema_id, schema_version) REFERENCES schemas (org_id, schema_id, version)
    ON DELETE CASCADE NOT VALID;

-- An extraction's document is in the extraction's org.
ALTER TABLE extractions DROP CONSTRAINT extractions_document_id_fkey;
ALTER TABLE extractions ADD CONSTRAINT extractions_document_same_org_fkey
    FOREIGN KEY (org_id, document_id) REFERENCES documents (org_id, id)
    ON DELETE CASCADE NOT VALID;

-- A suggestion's document is in the suggestion's org (deleting the document keeps the
-- suggestion, without its document).
ALTER TABLE suggestions ADD CONSTRAINT suggestions_document_same_org_fkey
    FOREIGN KEY (org_id, document_id) REFERENCES documents (org_id, id)
    ON DELETE SET NULL (document_id) NOT VALID;

-- An approval's suggestion is in the approval's org.
ALTER TABLE pending_approvals ADD CONSTRAINT pending_approvals_suggestion_same_org_fkey
    FOREIGN KEY (org_id, suggestion_id) REFERENCES suggestions (org_id, id)
    ON DELETE SET NULL (suggestion_id) NOT VALID;

-- Grants the role agentd runs as (e.g. `agentd_app`, not the owner, not a superuser) what it
-- needs: read and write every table, but on audit_events only SELECT and INSERT. Not being
-- the owner, it cannot ALTER the table (DISABLE TRIGGER) or drop the append-only trigger; not
-- holding UPDATE, DELETE or TRUNCATE, it cannot rewrite audit rows even with the trigger gone.
-- Run by the owner after every `agentd migrate`: SELECT agentd_grant_app('agentd_app');
CREATE FUNCTION agentd_grant_app(app_role name) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    t record;
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', current_schema(), app_role);
    FOR t IN SELECT c.relname FROM pg_class c
              WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
    LOOP
        IF t.relname = 'audit_events' THEN
            EXECUTE format('REVOKE ALL ON %I FROM %I', t.relname, app_role);
            EXECUTE format('GRANT SELECT, INSERT ON %I TO %I', t.relname, app_role);
        ELSIF t.relname = '_sqlx_migrations' THEN
            EXECUTE format('GRANT SELECT ON %I TO %I', t.relname, app_role);
        ELSE
            EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I TO %I', t.relname, app_role);
        END IF;
    END LOOP;
    EXECUTE format('GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA %I TO %I', current_schema(), app_role);
END $$;

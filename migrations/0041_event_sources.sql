-- Events of state changes that several writers make (issue 15): a document's auto-create ends
-- `proposed` (`proposal.ready`) or `failed` (`auto_create.failed`: the handler, the reconciler,
-- a cancelled job), a run ends `failed` (`run.failed`: the handler, the engine, the reconciler).
-- Rust and plain-SQL paths both write these rows, so the event is written by a trigger in the
-- same statement, hence the same transaction, as the change: a rolled-back cause leaves no event.
-- Only a transition writes one (a repeated write of the same state by a reclaimed attempt does
-- not). Dedupe keys: `proposal.ready` names the run (one proposal per run), `run.failed` the run,
-- `auto_create.failed` the document and the writing transaction (a document can fail again
-- after a re-enqueue, even with the same run id kept on the row).
-- Payloads carry ids and states only (no document text, no error text: fetch the row by id).

CREATE FUNCTION agentd_documents_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.auto_create_status = 'proposed' THEN
        INSERT INTO agentd_events (org_id, type, subject_id, occurred_at, payload, dedupe_key)
        VALUES (NEW.org_id, 'proposal.ready', NEW.id, NEW.updated_at,
                jsonb_build_object('document_id', NEW.id, 'run_id', NEW.auto_create_run_id,
                                   'schema_id', NEW.proposed_schema_id,
                                   'schema_version', NEW.proposed_schema_version,
                                   'prompt_id', NEW.proposed_prompt_id,
                                   'prompt_version', NEW.proposed_prompt_version,
                                   'extraction_id', NEW.proposed_extraction_id),
                'proposal.ready:' || NEW.id || ':' || COALESCE(NEW.auto_create_run_id::text, pg_current_xact_id()::text))
        ON CONFLICT (dedupe_key) DO NOTHING;
    ELSIF NEW.auto_create_status = 'failed' THEN
        INSERT INTO agentd_events (org_id, type, subject_id, occurred_at, payload, dedupe_key)
        VALUES (NEW.org_id, 'auto_create.failed', NEW.id, NEW.updated_at,
                jsonb_build_object('document_id', NEW.id, 'run_id', NEW.auto_create_run_id),
                'auto_create.failed:' || NEW.id || ':' || pg_current_xact_id())
        ON CONFLICT (dedupe_key) DO NOTHING;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER agentd_documents_events AFTER UPDATE OF auto_create_status ON documents
    FOR EACH ROW
    WHEN (NEW.auto_create_status IN ('proposed', 'failed')
          AND OLD.auto_create_status IS DISTINCT FROM NEW.auto_create_status)
    EXECUTE FUNCTION agentd_documents_events();

CREATE FUNCTION agentd_runs_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO agentd_events (org_id, type, subject_id, occurred_at, payload, dedupe_key)
    VALUES (NEW.org_id, 'run.failed', NEW.id, COALESCE(NEW.finished_at, now()),
            jsonb_build_object('run_id', NEW.id, 'kind', NEW.kind, 'job_id', NEW.job_id,
                               'stop_reason', NEW.stop_reason),
            'run.failed:' || NEW.id)
    ON CONFLICT (dedupe_key) DO NOTHING;
    RETURN NULL;
END $$;

CREATE TRIGGER agentd_runs_events AFTER UPDATE OF status ON agent_runs
    FOR EACH ROW
    WHEN (NEW.status = 'failed' AND OLD.status IS DISTINCT FROM 'failed')
    EXECUTE FUNCTION agentd_runs_events();

-- `budget.threshold` at 100 %: the month it was reported (80 % uses `warned_period`).
ALTER TABLE org_budgets ADD COLUMN warned_full_period date;

-- Run events a product can stream (issue 49, item 1): `run.started`, `run.finished`,
-- `extraction.flagged`, `job.dead` and `suggestion.dismissed` are written by triggers in the
-- statement (so the transaction) of the change they report, as 0041's are, because several
-- writers make those changes (Rust and plain SQL: the reconciler, the queue's acks, cancels).
-- `run.step` is written by the checkpoint statements themselves
-- (`store/sql/agent_checkpoint_settled.sql`, `agent_checkpoint_audited.sql`): the event and the
-- checkpoint commit together, so a resumed run, which starts after its last checkpoint, never
-- writes a step's event twice. Dedupe keys name the cause; payloads carry ids, states, names
-- and counts only (no document text, tool arguments, error or reason text).

-- A run's or a job's document: its subject or payload text when that is a document id.
CREATE FUNCTION agentd_uuid_or_null(t text) RETURNS uuid LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN t ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                THEN t::uuid END
$$;

-- `run.started` once per run (a resume reopens the row, it inserts none); `run.finished` once
-- per run, when it first leaves `running` (beside `run.failed` for a failed one).
CREATE FUNCTION agentd_run_life_events() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    doc uuid := CASE WHEN NEW.kind = 'auto_create' THEN agentd_uuid_or_null(NEW.subject) END;
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO agentd_events (org_id, type, subject_id, occurred_at, payload, dedupe_key)
        VALUES (NEW.org_id, 'run.started', NEW.id, NEW.started_at,
                jsonb_build_object('run_id', NEW.id, 'kind', NEW.kind, 'job_id', NEW.job_id,
                                   'document_id', doc, 'model', NEW.model),
                'run.started:' || NEW.id)
        ON CONFLICT (dedupe_key) DO NOTHING;
    ELSE
        INSERT INTO agentd_events (org_id, type, subject_id, occurred_at, payload, dedupe_key)
        VALUES (NEW.org_id, 'run.finished', NEW.id, COALESCE(NEW.finished_at, now()),
                jsonb_build_object('run_id', NEW.id, 'kind', NEW.kind, 'job_id', NEW.job_id,
                                   'document_id', doc, 'status', NEW.status,
                                   'stop_reason', NEW.stop_reason, 'rounds', NEW.rounds,
                                   'tool_calls', NEW.tool_calls,
                                   'input_tokens', NEW.input_tokens,
                                   'output_tokens', NEW.output_tokens,
                                   -- null when not known (a model without a price, a run
                                   -- from before costs were recorded), as the API shows it
                                   'cost_usd', CASE WHEN NEW.unpriced_tokens = 0
                                                    THEN round(NEW.cost_nano_usd / 1e9, 6) END),
                'run.finished:' || NEW.id)
        ON CONFLICT (dedupe_key) DO NOTHING;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER agentd_runs_started AFTER INSERT ON agent_runs
    FOR EACH ROW EXECUTE FUNCTION agentd_run_life_events();
CREATE TRIGGER agentd_runs_finished AFTER UPDATE OF status ON agent_runs
    FOR EACH ROW
    WHEN (NEW.status <> 'running' AND OLD.status = 'running')
    EXECUTE FUNCTION agentd_run_life_events();

-- `extraction.flagged`: an extraction stored with values its document lacks, or a value newly
-- flagged by a change (a correction that only clears flags writes none). The pointers name
-- schema fields, never values.
CREATE FUNCTION agentd_extraction_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO agentd_events (org_id, type, subject_id, occurred_at, payload, dedupe_key)
    VALUES (NEW.org_id, 'extraction.flagged', NEW.id, now(),
            jsonb_build_object('extraction_id', NEW.id, 'document_id', NEW.document_id,
                               'run_id', NEW.run_id, 'schema_id', NEW.schema_id,
                               'schema_version', NEW.schema_version,
                               'flagged', cardinality(NEW.ungrounded),
                               'fields', to_jsonb(NEW.ungrounded)),
            'extraction.flagged:' || NEW.id || ':' || pg_current_xact_id())
    ON CONFLICT (dedupe_key) DO NOTHING;
    RETURN NULL;
END $$;

CREATE TRIGGER agentd_extractions_flagged AFTER INSERT ON extractions
    FOR EACH ROW WHEN (cardinality(NEW.ungrounded) > 0)
    EXECUTE FUNCTION agentd_extraction_events();
CREATE TRIGGER agentd_extractions_reflagged AFTER UPDATE OF ungrounded ON extractions
    FOR EACH ROW WHEN (NOT (NEW.ungrounded <@ OLD.ungrounded))
    EXECUTE FUNCTION agentd_extraction_events();

-- `job.dead`: a job of an org (its payload's `org_id`) becomes `dead`. Not for
-- `webhook_delivery` jobs: their event would be delivered by another such job, which a dead
-- receiver kills too, and so on (a dead delivery shows on its subscription's breaker and in
-- `GET /v1/status`). No error text (it may quote the document).
CREATE FUNCTION agentd_job_dead_events() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    org uuid := agentd_uuid_or_null(NEW.payload->>'org_id');
BEGIN
    IF org IS NULL OR NOT EXISTS (SELECT 1 FROM orgs WHERE id = org) THEN
        RETURN NULL;
    END IF;
    INSERT INTO agentd_events (org_id, type, subject_id, occurred_at, payload, dedupe_key)
    VALUES (org, 'job.dead', NULL, COALESCE(NEW.finished_at, now()),
            jsonb_build_object('job_id', NEW.id, 'kind', NEW.kind, 'attempt', NEW.attempt,
                               'max_attempts', NEW.max_attempts,
                               'document_id', agentd_uuid_or_null(NEW.payload->>'document_id')),
            'job.dead:' || NEW.id || ':' || pg_current_xact_id())
    ON CONFLICT (dedupe_key) DO NOTHING;
    RETURN NULL;
END $$;

CREATE TRIGGER agentd_jobs_dead AFTER UPDATE OF state ON agentd_jobs
    FOR EACH ROW
    WHEN (NEW.state = 'dead' AND OLD.state IS DISTINCT FROM 'dead'
          AND NEW.kind <> 'webhook_delivery')
    EXECUTE FUNCTION agentd_job_dead_events();

-- `suggestion.dismissed`: once per suggestion (dismissed is final). `by` as the row records it
-- (`key <id>`, `cli:WHO`); the reason a person gave is not in the event.
CREATE FUNCTION agentd_suggestion_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO agentd_events (org_id, type, subject_id, occurred_at, payload, dedupe_key)
    VALUES (NEW.org_id, 'suggestion.dismissed', NEW.id, COALESCE(NEW.status_changed_at, now()),
            jsonb_build_object('suggestion_id', NEW.id, 'kind', NEW.kind,
                               'document_id', NEW.document_id, 'run_id', NEW.run_id,
                               'by', NEW.status_by),
            'suggestion.dismissed:' || NEW.id)
    ON CONFLICT (dedupe_key) DO NOTHING;
    RETURN NULL;
END $$;

CREATE TRIGGER agentd_suggestions_dismissed AFTER UPDATE OF status ON suggestions
    FOR EACH ROW
    WHEN (NEW.status = 'dismissed' AND OLD.status IS DISTINCT FROM 'dismissed')
    EXECUTE FUNCTION agentd_suggestion_events();

-- The subject filter (`GET /v1/events?subject=ID`, `store::events::list_after_about`): an event
-- is about ID when ID is its subject, or the document or run its payload names.
CREATE INDEX agentd_events_org_subject ON agentd_events (org_id, subject_id, tx, id);
CREATE INDEX agentd_events_org_document ON agentd_events (org_id, (payload->>'document_id'), tx, id);
CREATE INDEX agentd_events_org_run ON agentd_events (org_id, (payload->>'run_id'), tx, id);

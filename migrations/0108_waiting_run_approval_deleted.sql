-- A waiting run (migration 0107) is resumed also when its last pending approval is deleted rather
-- than decided (its org's or document's erasure, an operator's DELETE): the resume finds nothing
-- left to tell and the run ends as it would have without the wait. The function of 0107, reading
-- the run from the row the statement changed or deleted.
CREATE OR REPLACE FUNCTION agentd_resume_waiting_run() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    run uuid := CASE WHEN TG_OP = 'DELETE' THEN OLD.run_id ELSE NEW.run_id END;
    w agent_run_waits%ROWTYPE;
    job bigint;
BEGIN
    PERFORM 1 FROM agent_runs WHERE id = run AND status = 'waiting' FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF EXISTS (SELECT 1 FROM pending_approvals WHERE run_id = run AND status = 'pending') THEN
        RETURN NULL;
    END IF;
    SELECT * INTO w FROM agent_run_waits WHERE run_id = run AND job_id IS NULL;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    INSERT INTO agentd_jobs (kind, payload, priority, max_attempts, unique_key)
    SELECT w.kind, w.payload, w.priority, w.max_attempts, w.unique_key
     WHERE NOT EXISTS (SELECT 1 FROM agentd_jobs WHERE unique_key = w.unique_key)
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state IN ('available', 'running')
    DO NOTHING
    RETURNING id INTO job;
    IF job IS NULL THEN
        RETURN NULL;
    END IF;
    UPDATE agent_run_waits SET job_id = job WHERE run_id = run;
    UPDATE agent_runs SET job_id = job WHERE id = run;
    RETURN NULL;
END $$;

CREATE TRIGGER agentd_approvals_deleted_resume_run AFTER DELETE ON pending_approvals
    FOR EACH ROW
    WHEN (OLD.status = 'pending' AND OLD.run_id IS NOT NULL)
    EXECUTE FUNCTION agentd_resume_waiting_run();

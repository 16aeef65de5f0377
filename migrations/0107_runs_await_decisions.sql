-- Runs that wait for the decisions on their proposals and go on (issue 50, item 1). A kind whose
-- job file says `agent.await_decisions = true` ends a run whose approvals are still pending as
-- `waiting` instead of `succeeded`: its loop mark `waiting` names them, the job is acked, and
-- nothing holds a slot, a lease or a transaction while people decide. When the last of them is
-- decided or expires, the trigger below enqueues the job that resumes it (built by its kind in
-- Rust when the run began to wait, kept in `agent_run_waits`), in the transaction of that
-- decision — a person's (`approvals::decide`) or the set-based expiry sweep's alike. The resumed
-- run checkpoints `decided` (the outcomes as a message to the model) and goes on; a wait that
-- ended by an expiry ends the run `capped` (stop reason `approval_ttl`).

ALTER TABLE agent_runs DROP CONSTRAINT agent_runs_status_check;
ALTER TABLE agent_runs ADD CONSTRAINT agent_runs_status_check
    CHECK (status IN ('running', 'waiting', 'succeeded', 'capped', 'failed', 'cancelled'));

ALTER TABLE agent_loop_marks DROP CONSTRAINT agent_loop_marks_kind_check;
ALTER TABLE agent_loop_marks ADD CONSTRAINT agent_loop_marks_kind_check
    CHECK (kind IN ('nudge', 'cap', 'resume', 'waiting', 'decided'));

-- A run's current (or last) wait: the job that resumes it, as its kind built it. One row per
-- run (a second wait of the run replaces it). `waited_job` drove the run when it began to wait;
-- `job_id` is the resume job once enqueued (no foreign key: nothing of the domain references
-- the queue's table, see migration 0106).
CREATE TABLE agent_run_waits (
    run_id       uuid PRIMARY KEY,
    org_id       uuid NOT NULL,
    -- the `waiting` mark of the run
    seq          integer NOT NULL,
    since        timestamptz NOT NULL,
    waited_job   bigint,
    kind         text NOT NULL,
    payload      jsonb NOT NULL,
    priority     smallint NOT NULL,
    max_attempts integer NOT NULL CHECK (max_attempts >= 1),
    unique_key   text NOT NULL,
    job_id       bigint,
    FOREIGN KEY (org_id, run_id) REFERENCES agent_runs (org_id, id) ON DELETE CASCADE
);
CREATE INDEX agent_run_waits_job_idx ON agent_run_waits (job_id) WHERE job_id IS NOT NULL;
CREATE INDEX agent_run_waits_waited_job_idx ON agent_run_waits (waited_job) WHERE waited_job IS NOT NULL;
-- The run's pending approvals, read when it begins to wait and by the trigger below.
CREATE INDEX pending_approvals_run_pending_idx ON pending_approvals (run_id)
    WHERE status = 'pending' AND run_id IS NOT NULL;

-- The resume: when an approval of a waiting run leaves `pending` and none of the run's is
-- pending any more, the run's resume job is inserted (once: its unique key, and `job_id` set
-- here) and becomes the run's job, so a retry, the reconciler and a cancel of that job reach the
-- run as for any job. The run row is locked only while it waits (a running run is not): two
-- decisions on one waiting run's approvals take turns here, so the later one sees the earlier
-- one's. The run, beginning to wait, reads its pending approvals `FOR SHARE`
-- (`store::run_waits::pending_of_run`), so a decision committing meanwhile is either seen there
-- (the run does not wait) or waits for the run's commit and finds it waiting here.
CREATE FUNCTION agentd_resume_waiting_run() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    w agent_run_waits%ROWTYPE;
    job bigint;
BEGIN
    PERFORM 1 FROM agent_runs WHERE id = NEW.run_id AND status = 'waiting' FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF EXISTS (SELECT 1 FROM pending_approvals
                WHERE run_id = NEW.run_id AND status = 'pending') THEN
        RETURN NULL;
    END IF;
    SELECT * INTO w FROM agent_run_waits WHERE run_id = NEW.run_id AND job_id IS NULL;
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
    UPDATE agent_run_waits SET job_id = job WHERE run_id = NEW.run_id;
    UPDATE agent_runs SET job_id = job WHERE id = NEW.run_id;
    RETURN NULL;
END $$;

CREATE TRIGGER agentd_approvals_resume_run AFTER UPDATE OF status ON pending_approvals
    FOR EACH ROW
    WHEN (OLD.status = 'pending' AND NEW.status <> 'pending' AND NEW.run_id IS NOT NULL)
    EXECUTE FUNCTION agentd_resume_waiting_run();

-- `run.finished` once per run, when it really ends: not when it begins to wait (migration
-- 0104's trigger fired on any status other than `running`), and also when a waiting run ends
-- (capped at the TTL, cancelled).
DROP TRIGGER agentd_runs_finished ON agent_runs;
CREATE TRIGGER agentd_runs_finished AFTER UPDATE OF status ON agent_runs
    FOR EACH ROW
    WHEN (NEW.status NOT IN ('running', 'waiting') AND OLD.status IN ('running', 'waiting'))
    EXECUTE FUNCTION agentd_run_life_events();

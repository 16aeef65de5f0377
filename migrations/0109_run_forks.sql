-- Issue 50, item 2: a run forked from a stored run. The fork is a new run of the parent's kind
-- and subject whose first `parent_step` checkpoints (and loop marks) are copies of the parent's
-- (no provider call and no side effect repeated for them); its live part is driven by a
-- `run_fork` job. The parent is never changed. No key to the parent: a parent deleted by
-- retention leaves the fork readable, naming a run that is gone.
ALTER TABLE agent_runs
    ADD COLUMN parent_run_id uuid,
    ADD COLUMN parent_step   integer,
    ADD CONSTRAINT agent_runs_parent_step_check
        CHECK ((parent_run_id IS NULL) = (parent_step IS NULL) AND (parent_step IS NULL OR parent_step >= 1));
CREATE INDEX agent_runs_parent_idx ON agent_runs (parent_run_id) WHERE parent_run_id IS NOT NULL;

-- What the reviewer asked of the fork: the model (NULL: the parent's kind's) and instructions
-- (a person's words, which may name people: not in the job's payload, security review D13; they
-- go with the run), who asked, and when the fork's proposal replaced its document's (`adopted_at`,
-- auto_create forks only: a fork never touches its document until a reviewer adopts it).
CREATE TABLE run_forks (
    run_id       uuid        PRIMARY KEY REFERENCES agent_runs (id) ON DELETE CASCADE,
    org_id       uuid        NOT NULL,
    model        text,
    instructions text,
    requested_by text        NOT NULL,
    created_at   timestamptz NOT NULL,
    adopted_at   timestamptz,
    FOREIGN KEY (org_id, run_id) REFERENCES agent_runs (org_id, id) ON DELETE CASCADE
);

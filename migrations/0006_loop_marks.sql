-- Issue 11: estimated token counts on runs, the loop's own checkpoints and audit decisions.
-- Runs whose token counts include estimates (a provider that sent no usage, or a call that
-- failed after the model generated): counted with a tokenizer rather than reported.
ALTER TABLE agent_runs ADD COLUMN tokens_estimated boolean NOT NULL DEFAULT false;

-- The loop's own checkpoints (a nudge sent to the model, the cap that ends a run, recorded
-- before its forced summary so a resume makes the same request). They share the run's step
-- sequence but live in their own table, so agent_steps' kind list stays with its owners.
CREATE TABLE agent_loop_marks (
    run_id     uuid        NOT NULL REFERENCES agent_runs(id) ON DELETE CASCADE,
    seq        integer     NOT NULL,
    kind       text        NOT NULL CHECK (kind IN ('nudge', 'cap')),
    payload    jsonb       NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- Audit decisions of the loop itself: a nudge sent, a repeated call refused.
ALTER TABLE audit_events DROP CONSTRAINT audit_events_decision_check;
ALTER TABLE audit_events ADD CONSTRAINT audit_events_decision_check
    CHECK (decision IN ('auto_approved', 'proposed', 'denied', 'human_approved', 'human_rejected',
                        'expired', 'stale', 'error', 'capped', 'nudged', 'repeated'));

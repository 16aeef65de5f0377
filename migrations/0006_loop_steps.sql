-- Issue 11: estimated token counts on runs, and the loop's own checkpoints.
-- Runs whose token counts include estimates (a provider that sent no usage, or a call that
-- failed after the model generated): counted with a tokenizer rather than reported.
ALTER TABLE agent_runs ADD COLUMN tokens_estimated boolean NOT NULL DEFAULT false;

-- Loop checkpoints beside responses and tool results: a nudge sent to the model, and the cap
-- that ends a run (recorded before its forced summary so a resume makes the same request).
ALTER TABLE agent_steps DROP CONSTRAINT agent_steps_kind_check;
ALTER TABLE agent_steps ADD CONSTRAINT agent_steps_kind_check
    CHECK (kind IN ('llm_response', 'tool_result', 'nudge', 'cap'));

-- Audit decisions of the loop itself: a nudge sent, a repeated call refused.
ALTER TABLE audit_events DROP CONSTRAINT audit_events_decision_check;
ALTER TABLE audit_events ADD CONSTRAINT audit_events_decision_check
    CHECK (decision IN ('auto_approved', 'proposed', 'denied', 'human_approved', 'human_rejected',
                        'expired', 'stale', 'error', 'capped', 'nudged', 'repeated'));

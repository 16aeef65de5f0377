-- The union of the checkpoint kinds added in parallel by 0006 (the loop's nudges and caps) and
-- 0010 (a tool's own model answer, checkpointed before it is applied).
ALTER TABLE agent_steps DROP CONSTRAINT agent_steps_kind_check;
ALTER TABLE agent_steps ADD CONSTRAINT agent_steps_kind_check
    CHECK (kind IN ('llm_response', 'tool_result', 'nudge', 'cap', 'tool_model'));

-- A run's redaction tokens are in the run's org (0016's defence in depth, for 0030's table).
ALTER TABLE agent_runs ADD CONSTRAINT agent_runs_org_key UNIQUE (org_id, id);
ALTER TABLE pii_tokens ADD CONSTRAINT pii_tokens_run_same_org_fkey
    FOREIGN KEY (org_id, run_id) REFERENCES agent_runs (org_id, id) ON DELETE CASCADE;

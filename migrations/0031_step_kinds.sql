-- The union of the checkpoint kinds added in parallel by 0006 (the loop's nudges and caps) and
-- 0010 (a tool's own model answer, checkpointed before it is applied).
ALTER TABLE agent_steps DROP CONSTRAINT agent_steps_kind_check;
ALTER TABLE agent_steps ADD CONSTRAINT agent_steps_kind_check
    CHECK (kind IN ('llm_response', 'tool_result', 'nudge', 'cap', 'tool_model'));

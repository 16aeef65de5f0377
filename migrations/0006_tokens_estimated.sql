-- Runs whose token counts include estimates (a provider that sent no usage, or a call that
-- failed after the model generated): counted with a tokenizer rather than reported.
ALTER TABLE agent_runs ADD COLUMN tokens_estimated boolean NOT NULL DEFAULT false;

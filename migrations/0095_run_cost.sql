-- Issue 46, item 6: what a run costs in money. Each provider call is priced when it is charged,
-- at `llm.prices` (`config::prices`: cents per million input, output, cache-read and
-- cache-write tokens), and the run sums the cost in nano-dollars (10^-9 USD, integers: no
-- rounding drift over many calls).
ALTER TABLE agent_runs
    -- Of input_tokens: read from the provider's prompt cache, and written to it.
    ADD COLUMN cache_read_tokens  bigint NOT NULL DEFAULT 0,
    ADD COLUMN cache_write_tokens bigint NOT NULL DEFAULT 0,
    -- The calls' cost at the prices of their time. NULL: a run from before this migration,
    -- whose cost was never recorded (an added column keeps NULL in the rows it finds; new rows
    -- start at 0, and NULL + n stays NULL).
    ADD COLUMN cost_nano_usd      bigint,
    -- Tokens of calls whose model has no price: the run's cost is then not known (the API
    -- shows null, never a guess).
    ADD COLUMN unpriced_tokens    bigint NOT NULL DEFAULT 0;
ALTER TABLE agent_runs ALTER COLUMN cost_nano_usd SET DEFAULT 0;

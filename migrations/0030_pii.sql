-- Personal data: the redaction boundary in front of the model provider.

-- Per-org switch (on by default) and what each run did.
ALTER TABLE orgs ADD COLUMN redact_pii boolean NOT NULL DEFAULT true;
ALTER TABLE agent_runs ADD COLUMN pii_redacted boolean NOT NULL DEFAULT false;

-- A run's symbol table: the token the provider saw for each personal value. Kept so a resumed
-- run shows the model the same tokens; deleted with the run.
CREATE TABLE pii_tokens (
    run_id  uuid    NOT NULL REFERENCES agent_runs(id) ON DELETE CASCADE,
    org_id  uuid    NOT NULL,
    n       integer NOT NULL,
    token   text    NOT NULL,
    value   text    NOT NULL,
    PRIMARY KEY (run_id, token),
    UNIQUE (run_id, value)
);

-- Retention: finished transcripts are compacted after `retention.transcripts_after_days`.
ALTER TABLE agent_runs ADD COLUMN transcript_compacted boolean NOT NULL DEFAULT false;
CREATE INDEX agent_runs_compaction_idx ON agent_runs (finished_at)
    WHERE NOT transcript_compacted AND status <> 'running';

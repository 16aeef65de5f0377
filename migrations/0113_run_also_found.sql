-- Issue 48, item 2: key fields first. `create_schema` keeps a proposal's key fields and leaves
-- the others out ("also found": a table's rows, a contact or payment detail, a footer's line,
-- a double of another name); what was left out is recorded on the run so the document's
-- report shows it (`GET /v1/documents/{id}` → `also_found`) and the reviewer can add one back
-- (`POST /v1/documents/{id}/fields`): a JSON array of
-- {"name", "label", "reason", "why", "line", "score", "schema"}, the latest proposal's.
ALTER TABLE agent_runs
    ADD COLUMN also_found jsonb NOT NULL DEFAULT '[]'::jsonb;

-- Issue 48, item 1: no field named after the document's own words unless they name a field.
-- `create_schema` and `update_schema` leave out a proposed field named after an instruction-like
-- line, a value, a table row's item or the title of the run's document (and the analysis leaves
-- such candidates out of what it offers); what was left out, and why, is recorded on the run so
-- the document's report shows it to the reviewer (`GET /v1/documents/{id}` → `dropped_fields`):
-- a JSON array of {"name", "reason", "why", "line", "source"}, one entry per name.
ALTER TABLE agent_runs
    ADD COLUMN dropped_fields jsonb NOT NULL DEFAULT '[]'::jsonb;

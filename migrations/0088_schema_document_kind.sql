-- Issue 28, item 4: reuse before creating. The kind of document (`src/analysis/kind.rs`:
-- invoice, receipt, payslip, …) of the document a schema version was made for, when the
-- analysis knew it: `create_schema` reuses a schema of the same kind that shares a field, or
-- one of any kind that shares most of its fields (`src/tools/schema_reuse.rs`). NULL: made by a
-- person, before this column, or for a document of no known kind.
ALTER TABLE schemas ADD COLUMN document_kind text;

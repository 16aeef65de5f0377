-- Issue 28: values of an extraction that the document's text does not contain.
--
-- `run_extraction` checks every value of the model's answer against the document text after the
-- normalisation of `src/analysis` (an amount `1763.58` is found as `1.763,58 €`, a date
-- `2026-11-05` as `05.11.2026`) and stores the JSON pointers of the values it did not find
-- (`/total`, `/line_items/2/amount`): the reviewer sees them beside the result (the document's
-- auto-create report, `GET /v1/documents/{id}`), the eval counts them. Empty: every value was found,
-- or the row predates the check. `update_extraction_field` recomputes it. A default keeps the
-- ALTER cheap (PostgreSQL 11+ stores a constant default without rewriting the table).
ALTER TABLE extractions ADD COLUMN ungrounded text[] NOT NULL DEFAULT '{}';

-- Issue 18: the expiry sweep reads each pending approval's document id from a column.
--
-- The sweep re-validates approvals on a document (`update_document`, `delete_document`) set-based,
-- joining `documents` on `args->>'document_id'`. Casting a malformed id would abort the whole
-- batch, so every pass tested the text against a UUID regular expression first: about 3 µs per
-- approval per pass, two passes per sweep, a sweep every five minutes over every pending approval
-- (a 4 h approval is swept about 48 times). The id is now computed once, when the row is written:
-- NULL when `args` has no `document_id` in the hyphenated form (the sweep leaves those to its
-- Rust re-check, which parses every form `uuid` accepts). Which tools' approvals are on a document
-- is still the sweep's to decide (`p.tool = ANY(…)`): the column is only the parsed argument.
--
-- Adding a stored generated column rewrites the table once (ACCESS EXCLUSIVE for its duration;
-- decided approvals are purged after 30 days, so the table is bounded). An update recomputes it
-- (PostgreSQL 15 recomputes stored generated columns on every update); no index names it, so a
-- decision stays a HOT update (migration 0062).
ALTER TABLE pending_approvals
  ADD COLUMN document_id uuid GENERATED ALWAYS AS (
    CASE WHEN args->>'document_id'
              ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
         THEN (args->>'document_id')::uuid END) STORED;

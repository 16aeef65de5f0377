-- Document versions for the expiry sweep (issue 18). Every row version of a document gets a
-- number of its own (`documents.version`, from one sequence: an insert takes the default, every
-- UPDATE a new one in the trigger below), and a pending approval on a document records the
-- version its snapshot was read from (`pending_approvals.document_version`, written by
-- `approvals::propose` while the row is locked). The sweep compares the two numbers: equal means
-- the row is the one the snapshot was read from, so the snapshot (and its hash) is unchanged,
-- without rebuilding and comparing it. Anything else — another version, no version recorded
-- (approvals from before this migration, edited ones) — falls back to comparing snapshots.
--
-- Rows that exist now keep version 0 until their next update (a volatile default would rewrite
-- the table); a deleted and re-inserted id gets a new number, never 0 again. The trigger fires
-- with `session_replication_role = replica` too (ENABLE ALWAYS), so no update goes unnumbered.
CREATE SEQUENCE documents_version_seq;
ALTER TABLE documents ADD COLUMN version bigint NOT NULL DEFAULT 0;
ALTER TABLE documents ALTER COLUMN version SET DEFAULT nextval('documents_version_seq');

CREATE FUNCTION documents_next_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.version := nextval('documents_version_seq');
    RETURN NEW;
END $$;

CREATE TRIGGER documents_version BEFORE UPDATE ON documents
    FOR EACH ROW EXECUTE FUNCTION documents_next_version();
ALTER TABLE documents ENABLE ALWAYS TRIGGER documents_version;

ALTER TABLE pending_approvals ADD COLUMN document_version bigint;

-- The snapshot of an action on a document (what a pending approval's hash covers), defined
-- once: the tools read it (`src/store/sql/document_snapshot.sql`) and the set-based expiry
-- sweep compares stored snapshots with it (`src/store/sql/sweep_*.sql`). Before, Rust built it
-- with `json!` and the sweep's SQL imitated that; this is the same JSON, so the hashes of
-- approvals pending at the upgrade stay valid (tests/approvals.rs pins one).
--
-- `d` is the row of document `id` in the acting org, NULL when the document is missing or
-- another org's. Its name, tags, metadata and the SHA-256 of its text; not `updated_at` nor
-- `auto_create_status` (issue 33, item 5: accepting the document's proposal writes both and
-- changes nothing an action on it depends on). A field added here changes the snapshot of every
-- document, so every pending approval on one ends stale at the next sweep.
--
-- One SQL expression, STABLE: the planner inlines it, so in the sweep `d.text` is hashed only
-- where its CASE asks for the snapshot.
CREATE FUNCTION document_snapshot(id uuid, d documents) RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN d.id IS NULL
                THEN jsonb_build_object('exists', false, 'document_id', id)
                ELSE jsonb_build_object(
                       'exists', true, 'document_id', d.id, 'name', d.name,
                       'tag_ids', to_jsonb(d.tag_ids), 'metadata', d.metadata,
                       'text_sha256', encode(sha256(convert_to(COALESCE(d.text, ''), 'UTF8')), 'hex'))
           END
$$;

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

-- What the audit row of an approval the expiry sweep decided keeps: for `args`, the SHA-256 of
-- the arguments; for `outcome`, the status, the names of the changed parts (stale ones) and
-- the SHA-256 of the result. Never the values (review N2: they hold document metadata,
-- extraction values and before/after copies, and the trail is append-only); the approval's
-- proposal has its own audit row with the arguments redacted. One definition for the
-- set-based sweep and the row-by-row one (`src/store/sql/approvals_*.sql`), so both write the
-- same rows; before, a Rust macro spliced this SQL into both.
CREATE FUNCTION swept_audit_args(args jsonb) RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT jsonb_build_object('sha256', encode(sha256(convert_to(args::text, 'UTF8')), 'hex'))
$$;

CREATE FUNCTION swept_audit_outcome(status text, result jsonb) RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object(
             'status', status,
             'changed', (SELECT jsonb_agg(k ORDER BY k)
                           FROM jsonb_object_keys(CASE WHEN jsonb_typeof(result -> 'changes') = 'object'
                                                       THEN result -> 'changes' END) AS k),
             'sha256', encode(sha256(convert_to(result::text, 'UTF8')), 'hex')))
$$;

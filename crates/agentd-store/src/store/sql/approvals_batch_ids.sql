-- The ids of the batch `approvals_batch.sql` reads ($1-$5), in order, without locking them,
-- each with whether the set-based sweep has anything to do with it: past the TTL always; live,
-- unless it is an approval of one of the tools $6 (whose snapshot is their document's row) on
-- a document still at the version its snapshot was read from.
SELECT s.id,
       $2 OR NOT COALESCE(s.tool = ANY($6) AND d.version = s.document_version, false)
  FROM (SELECT p.id, p.org_id, p.tool, p.document_id, p.document_version
          FROM pending_approvals p
         WHERE p.status = 'pending'
           AND (CASE WHEN $2 THEN p.expires_at <= $1 ELSE p.expires_at > $1 END)
           AND p.id > $3
           AND ($4::uuid[] IS NULL OR p.id = ANY($4))
         ORDER BY p.id LIMIT $5) s
  LEFT JOIN documents d ON NOT $2 AND d.org_id = s.org_id AND d.id = s.document_id
 ORDER BY s.id

-- The snapshots (migration 0090's `document_snapshot`) of the documents ($1[i], $2[i]) as
-- (org_id, id), one row per pair in id order, read without locking them.
SELECT k.org_id, k.id, document_snapshot(k.id, d)
  FROM unnest($1::uuid[], $2::uuid[]) AS k(org_id, id)
  LEFT JOIN documents d ON d.org_id = k.org_id AND d.id = k.id
 ORDER BY k.id, k.org_id

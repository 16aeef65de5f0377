-- `document_snapshots.sql` with each document's row locked until the transaction ends, in id
-- order (the pairs are sorted before any is locked, so two sweepers lock in the same order).
SELECT k.org_id, k.id,
       document_snapshot(k.id, (SELECT d FROM documents d
                                 WHERE d.org_id = k.org_id AND d.id = k.id
                                   FOR UPDATE))
  FROM (SELECT u.org_id, u.id
          FROM unnest($1::uuid[], $2::uuid[]) AS u(org_id, id)
         ORDER BY u.id, u.org_id) k

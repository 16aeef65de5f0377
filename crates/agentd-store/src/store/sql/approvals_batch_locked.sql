-- `approvals_batch.sql` with the rows locked; rows another sweeper holds are skipped.
SELECT * FROM pending_approvals p
 WHERE p.status = 'pending'
   AND (CASE WHEN $2 THEN p.expires_at <= $1 ELSE p.expires_at > $1 END)
   AND p.id > $3
   AND ($4::uuid[] IS NULL OR p.id = ANY($4))
 ORDER BY p.id LIMIT $5
   FOR UPDATE SKIP LOCKED

-- A batch of pending approvals (`store::approvals_sweep::Batch`), read without locking them:
-- past their TTL at $1 when $2 (else not yet), after id $3, only the ids $4 when not NULL, at
-- most $5, in id order.
SELECT * FROM pending_approvals p
 WHERE p.status = 'pending'
   AND (CASE WHEN $2 THEN p.expires_at <= $1 ELSE p.expires_at > $1 END)
   AND p.id > $3
   AND ($4::uuid[] IS NULL OR p.id = ANY($4))
 ORDER BY p.id LIMIT $5

-- The audit rows of approvals the row-by-row sweep decided (`decide_many`): parallel arrays of
-- org $1, run $2, approval id $3, tool $4, arguments $5 and result $9; actor $6, decision
-- (the status) $7, at $8. The same rows the set-based sweep writes.
INSERT INTO audit_events (org_id, run_id, call_id, actor, tool, category, decision, args,
                          outcome, created_at)
SELECT o, r, 'approval:' || i, $6, t, 'approval', $7, swept_audit_args(a),
       swept_audit_outcome($7, res), $8
  FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::jsonb[], $9::jsonb[])
       AS x(o, r, i, t, a, res)

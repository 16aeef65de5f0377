-- The audit rows of approvals the row-by-row sweep decided (`decide_many`): parallel arrays of
-- org $1, run $2, approval id $3, tool $4, arguments $5 and result $9; actor $6, decision
-- (the status) $7, at $8. The same rows the set-based sweep writes (`approvals_sweep_*.sql`).
INSERT INTO audit_events (org_id, run_id, call_id, actor, tool, category, decision, args,
                          outcome, created_at)
SELECT o, r, 'approval:' || i, $6::text, t, 'approval', $7::text,
       -- for `args` the SHA-256 of the arguments; for `outcome` the status, the names of the
       -- changed parts and the SHA-256 of the result: never the values (review N2)
       jsonb_build_object('sha256', encode(sha256(convert_to(a::text, 'UTF8')), 'hex')),
       jsonb_strip_nulls(jsonb_build_object(
         'status', $7,
         'changed', (SELECT jsonb_agg(k ORDER BY k)
                       FROM jsonb_object_keys(CASE WHEN jsonb_typeof(res -> 'changes') = 'object'
                                                   THEN res -> 'changes' END) AS k),
         'sha256', encode(sha256(convert_to(res::text, 'UTF8')), 'hex'))),
       $8
  FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::jsonb[], $9::jsonb[])
       AS x(o, r, i, t, a, res)

-- Ends the pending approvals $2 with their results $3 (parallel arrays) as $4 (`expired` or
-- `stale`), decided by $5 at $1, and writes their audit rows and events (type $6) as the
-- set-based sweep does (`approvals_sweep_expired.sql`); the ones no longer pending are left
-- alone. Returns how many it ended.
WITH up AS (
  UPDATE pending_approvals p
     SET status = $4, decided_by = $5, decided_at = $1, result = d.result
    FROM unnest($2::uuid[], $3::jsonb[]) AS d(id, result)
   WHERE p.id = d.id AND p.status = 'pending'
  RETURNING p.id, p.org_id, p.run_id, p.suggestion_id, p.tool, p.args, p.status, p.result),
audit AS (
  INSERT INTO audit_events (org_id, run_id, call_id, actor, tool, category, decision, args,
                            outcome, created_at)
  SELECT org_id, run_id, 'approval:' || id, $5, tool, 'approval', status,
         -- for `args` the SHA-256 of the arguments; for `outcome` the status, the names of the
         -- changed parts and the SHA-256 of the result: never the values (review N2)
         jsonb_build_object('sha256', encode(sha256(convert_to(args::text, 'UTF8')), 'hex')),
         jsonb_strip_nulls(jsonb_build_object(
           'status', status,
           'changed', (SELECT jsonb_agg(k ORDER BY k)
                         FROM jsonb_object_keys(CASE WHEN jsonb_typeof(result -> 'changes') = 'object'
                                                     THEN result -> 'changes' END) AS k),
           'sha256', encode(sha256(convert_to(result::text, 'UTF8')), 'hex'))),
         $1
    FROM up ORDER BY id),
events AS (
  INSERT INTO agentd_events (org_id, type, subject_id, occurred_at, payload, dedupe_key)
  SELECT org_id, $6, id, $1,
         jsonb_build_object('approval_id', id, 'tool', tool, 'status', status,
                            'decided_by', $5, 'run_id', run_id, 'suggestion_id', suggestion_id),
         $6 || ':' || id
    FROM up ORDER BY id
  ON CONFLICT (dedupe_key) DO NOTHING)
SELECT count(*) FROM up

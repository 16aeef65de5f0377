-- The set-based expiry sweep over approvals not yet past their TTL
-- (`store::approvals_sweep::sweep_batch` explains the verdicts). $1 now, $2 the batch's ids, $3
-- the tools whose snapshot is their document's row, $4 who decides (`decided_by`, the audit
-- row's actor), $5 the event type `approval.stale`. `approvals_sweep_expired.sql` without the
-- lock (most rows stay unchanged, and locking them would write every row) and ending only the
-- changed ones, `stale`, if still pending, with their audit rows and events. Returns each
-- approval's id, whether the statement judged it (false: re-check it in Rust), and how many it
-- ended expired (none) and stale (the same on every row).
WITH b AS MATERIALIZED (
  SELECT p.id, p.org_id, p.snapshot, p.document_version,
         CASE WHEN p.tool = ANY($3) THEN p.document_id END AS doc
    FROM pending_approvals p
   WHERE p.id = ANY($2) AND p.status = 'pending' AND p.expires_at > $1
   ORDER BY p.id),
n AS MATERIALIZED (
  SELECT b.id, b.snapshot AS s,
         CASE WHEN b.doc IS NULL OR b.document_version = d.version THEN NULL
              ELSE document_snapshot(b.doc, d) END AS cur,
         b.doc IS NOT NULL AND b.document_version = d.version AS same_version
    FROM b LEFT JOIN documents d ON d.org_id = b.org_id AND d.id = b.doc),
c AS MATERIALIZED (
  SELECT n.id, n.s, n.cur,
         CASE WHEN n.same_version THEN 'same'
              WHEN n.cur IS NULL THEN 'recheck'
              WHEN n.s = n.cur THEN 'same'
              WHEN jsonb_typeof(n.s) = 'object'
               AND NOT jsonb_path_exists(n.s, 'lax $.** ? (@.type() == "number")')
               AND NOT jsonb_path_exists(n.cur, 'lax $.** ? (@.type() == "number")')
                THEN 'changed'
              ELSE 'recheck' END AS verdict
    FROM n),
e AS MATERIALIZED (
  SELECT c.id, 'stale' AS status,
         jsonb_build_object('changes', (
                     -- approvals::diff: every key whose values differ, before and after
                     SELECT COALESCE(jsonb_object_agg(k, jsonb_build_object('before', c.s -> k,
                                                                            'after', c.cur -> k)),
                                     '{}'::jsonb)
                       FROM (SELECT jsonb_object_keys(c.s)
                             UNION SELECT jsonb_object_keys(c.cur)) AS keys(k)
                      WHERE (c.s -> k) IS DISTINCT FROM (c.cur -> k))) AS result
    FROM c WHERE c.verdict = 'changed'),
up AS (
  UPDATE pending_approvals p
     SET status = x.status, decided_by = $4, decided_at = $1, result = x.result
    FROM unnest(ARRAY(SELECT e.id FROM e ORDER BY e.id),
                ARRAY(SELECT e.status FROM e ORDER BY e.id),
                ARRAY(SELECT e.result FROM e ORDER BY e.id)) AS x(id, status, result)
   WHERE p.id = x.id AND p.status = 'pending'
  RETURNING p.id, p.org_id, p.run_id, p.suggestion_id, p.tool, p.args, p.status, p.result),
audit AS (
  INSERT INTO audit_events (org_id, run_id, call_id, actor, tool, category, decision, args,
                            outcome, created_at)
  SELECT org_id, run_id, 'approval:' || id, $4, tool, 'approval', status,
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
  SELECT org_id, $5, id, $1,
         jsonb_build_object('approval_id', id, 'tool', tool, 'status', status,
                            'decided_by', $4, 'run_id', run_id, 'suggestion_id', suggestion_id),
         $5 || ':' || id
    FROM up ORDER BY id
  ON CONFLICT (dedupe_key) DO NOTHING)
SELECT c.id, c.verdict <> 'recheck',
       (SELECT count(*) FROM up WHERE up.status = 'expired'),
       (SELECT count(*) FROM up WHERE up.status = 'stale')
  FROM c ORDER BY c.id

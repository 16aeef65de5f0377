-- Every job made for one org names it (review D1). `approval_expiry` jobs from the API (a sweep
-- of `approval_ids`) and the sweeps' re-proposals (`repropose`, `repropose_expired`) carried no
-- `org_id`: an org's reads matched them by probing `pending_approvals` for every such job of
-- every org (`JOB_OF_ORG`'s second branch), so an uploader enqueuing sweeps slowed every other
-- org's status, queue and job reads; the fair claim put them all in one group '' and pausing an
-- org did not hold them. Producers now write the org; this writes it into the jobs already
-- stored, from the approvals they name, so the one `payload->>'org_id'` condition (and its index
-- of migration 0066) finds them, and the second index is dropped with the branch that used it.

-- Re-proposals: the org of the approval.
UPDATE agentd_jobs j
   SET payload = j.payload || jsonb_build_object('org_id', p.org_id)
  FROM pending_approvals p
 WHERE j.kind = 'approval_expiry'
   AND NOT j.payload ? 'org_id'
   AND p.id::text = coalesce(j.payload->>'repropose', j.payload->>'repropose_expired');

-- Sweeps of a list of approvals that all belong to one org (the API's; it checked that).
UPDATE agentd_jobs j
   SET payload = j.payload || jsonb_build_object('org_id', o.org_id)
  FROM (SELECT j2.id, min(p.org_id::text)::uuid AS org_id
          FROM agentd_jobs j2
          CROSS JOIN LATERAL jsonb_array_elements_text(j2.payload->'approval_ids') a(id)
          JOIN pending_approvals p ON p.id::text = a.id
         WHERE j2.kind = 'approval_expiry'
           AND NOT j2.payload ? 'org_id'
           AND jsonb_typeof(j2.payload->'approval_ids') = 'array'
         GROUP BY j2.id
        HAVING count(DISTINCT p.org_id) = 1) o
 WHERE j.id = o.id;

DROP INDEX IF EXISTS agentd_jobs_approval_ids_idx;

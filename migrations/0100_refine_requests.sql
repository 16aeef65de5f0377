-- Security review 2026-12-02, D13: a refine's instructions (a reviewer's words, which may name
-- people) leave the job's payload, where erasure could not reach them and any job reader saw
-- them. They live here, one row per refine job: the job's id is the reference (the payload's
-- `refine` keeps only who asked). The row goes with its document (erasure deletes it:
-- `pii::retention::erase_document`, and the FK cascades) and with its job (the queue's
-- retention of finished jobs, or `delete_on_success`). `prior_status` is the document's status
-- when the refine was asked, which a failed, cancelled or dead refine restores.
CREATE TABLE refine_requests (
    job_id       bigint      PRIMARY KEY REFERENCES agentd_jobs (id) ON DELETE CASCADE,
    org_id       uuid        NOT NULL,
    document_id  uuid        NOT NULL,
    instructions text        NOT NULL,
    prior_status text        NOT NULL CHECK (prior_status IN ('proposed', 'accepted')),
    created_at   timestamptz NOT NULL,
    FOREIGN KEY (org_id, document_id) REFERENCES documents (org_id, id) ON DELETE CASCADE
);
CREATE INDEX refine_requests_document_idx ON refine_requests (org_id, document_id);

-- Refines queued before this migration: their words move here (the prior status was not
-- recorded; `proposed` is what a failed refine restored until now), and every stored payload,
-- finished ones included, loses them.
INSERT INTO refine_requests (job_id, org_id, document_id, instructions, prior_status, created_at)
SELECT j.id, d.org_id, d.id, j.payload->'refine'->>'instructions', 'proposed', j.created_at
  FROM agentd_jobs j
  JOIN documents d ON d.id::text = j.payload->>'document_id' AND d.org_id::text = j.payload->>'org_id'
 WHERE j.kind = 'auto_create' AND j.state IN ('available', 'running')
   AND jsonb_typeof(j.payload->'refine'->'instructions') = 'string';
UPDATE agentd_jobs SET payload = jsonb_set(payload, '{refine}', (payload->'refine') - 'instructions')
 WHERE kind = 'auto_create' AND jsonb_typeof(payload->'refine') = 'object'
   AND payload->'refine' ? 'instructions';

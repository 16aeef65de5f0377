-- Nothing stays stuck (issue 12, item 6).

-- Unique keys bind only while a job is waiting or running: a dead, cancelled or finished job no
-- longer blocks a re-enqueue under its key (e.g. `auto_create:{doc}` after a dead job). Producers
-- that must not run a key twice even after it finished (cron ticks, nightly fan-out, re-proposals)
-- check the plain index below at enqueue time (`NewJob::unique_until_purged`).
ALTER TABLE agentd_jobs DROP CONSTRAINT agentd_jobs_unique_key_key;
CREATE UNIQUE INDEX agentd_jobs_unique_active_idx ON agentd_jobs (unique_key)
    WHERE state IN ('available', 'running');
CREATE INDEX agentd_jobs_unique_key_idx ON agentd_jobs (unique_key) WHERE unique_key IS NOT NULL;

-- The reconciler finds the jobs of a document.
CREATE INDEX agentd_jobs_auto_create_doc_idx ON agentd_jobs ((payload->>'document_id'), id)
    WHERE kind = 'auto_create';
-- ... and the documents it may have to end.
CREATE INDEX documents_auto_create_open_idx ON documents (id)
    WHERE auto_create_status IN ('queued', 'running');
-- ... and the runs.
CREATE INDEX agent_runs_running_idx ON agent_runs (job_id) WHERE status = 'running';

-- At most one running auto_create run per document. Older duplicates (left by the defect this
-- closes) are ended first so the index can be built.
UPDATE agent_runs r SET status = 'failed', stop_reason = 'error', finished_at = now(),
       error = 'ended by migration 0015: another run of the same document was running'
 WHERE r.kind = 'auto_create' AND r.status = 'running'
   AND EXISTS (SELECT 1 FROM agent_runs o
                WHERE o.kind = 'auto_create' AND o.status = 'running'
                  AND o.org_id = r.org_id AND o.subject = r.subject
                  AND (o.started_at, o.id) > (r.started_at, r.id));
CREATE UNIQUE INDEX agent_runs_one_running_per_doc_idx ON agent_runs (org_id, subject)
    WHERE kind = 'auto_create' AND status = 'running';

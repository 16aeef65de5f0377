-- Issue 49, item 2: `GET /v1/jobs` lists an org's jobs newest first in keyset pages
-- (`(created_at, id) < cursor ORDER BY created_at DESC, id DESC`). The org index of 0066 found
-- the org's jobs but not in that order, so every page of a busy org read and sorted all its jobs
-- (finished ones are kept for days). This one has the same expression and predicate (what
-- `JOB_OF_ORG` matches, src/store/api_reads.rs) followed by the order: a page reads its own rows,
-- and a `created_after`/`created_before` range is a range of the index. Every read 0066 served
-- (the org's counts, its dead jobs, one job by id) is served by its leading column, so it
-- replaces 0066's index rather than adding a third index to every job insert.
CREATE INDEX agentd_jobs_org_created_idx ON agentd_jobs ((payload->>'org_id'), created_at, id)
    WHERE payload ? 'org_id';
DROP INDEX agentd_jobs_org_idx;

-- ... and `GET /v1/runs?subject=` (a document's runs, the console's link from a document to
-- them) reads one subject's runs of the org newest first, not the org's runs until it finds them.
CREATE INDEX agent_runs_org_subject_idx ON agent_runs (org_id, subject, started_at);

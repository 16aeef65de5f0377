-- An org's jobs are found by index (review N8): `GET /v1/status`, the console's queue view and
-- every other per-org read of `agentd_jobs` filter with `JOB_OF_ORG` (src/store/api_reads.rs),
-- which scanned the whole table (finished jobs are kept for days). Expression indexes, not a
-- column: the payload never changes after the insert, so claims and acks stay HOT updates, and
-- every producer (the API, the CLI, cron, the webhook dispatcher's SQL) is covered as it is.
-- 1. Jobs whose payload names their org.
CREATE INDEX agentd_jobs_org_idx ON agentd_jobs ((payload->>'org_id'))
    WHERE payload ? 'org_id';
-- 2. Approval sweeps of a list of approvals (their org is the approvals' org).
CREATE INDEX agentd_jobs_approval_ids_idx ON agentd_jobs (kind)
    WHERE jsonb_typeof(payload->'approval_ids') = 'array';

-- Per-org caps of running jobs (issue 30 item 1, review N3): a claim leaves out an org that has
-- its cap of jobs of the kind running across the fleet (src/queue/fair.rs). The kind's cap is
-- the job file's `queue.max_running_per_org`; a row here sets one org's own cap for one kind
-- (`agentd orgs set-limit`). Keyed like the claim index: the org as the text of the payload's
-- `org_id` ('' for jobs without one).
CREATE TABLE agentd_org_queue_limits (
    kind        text   NOT NULL,
    org_key     text   NOT NULL,
    max_running integer NOT NULL CHECK (max_running >= 1),
    PRIMARY KEY (kind, org_key)
);

-- The running jobs of a kind by org, counted by a claim when a cap applies. Entries exist only
-- for running row versions (a claim writes one; a heartbeat, which changes neither the state
-- nor the payload, stays a HOT update).
CREATE INDEX agentd_jobs_running_org_idx ON agentd_jobs
    (kind, (coalesce(payload->>'org_id', '')))
    WHERE state = 'running';

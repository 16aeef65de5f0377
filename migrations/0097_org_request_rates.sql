-- Issue 47, item 5: an org's own API request rates, over the service's (`api.*` in the
-- config). NULL: the service's rate. `requests_per_minute` replaces
-- `api.requests_per_minute_per_org` for the org (all its keys together), `runs_per_minute`
-- replaces `api.runs_per_minute_per_key` for each of its keys (requests that enqueue model
-- runs). An operator sets either to anything; an org's admin may only lower them
-- (`org_settings::check_org_change`).
ALTER TABLE orgs
    ADD COLUMN requests_per_minute integer CHECK (requests_per_minute BETWEEN 1 AND 1000000),
    ADD COLUMN runs_per_minute     integer CHECK (runs_per_minute BETWEEN 1 AND 1000000);

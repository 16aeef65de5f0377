-- The trace a job continues (issue 31, item 3): the W3C `traceparent` of the API request that
-- enqueued it (src/telemetry/propagation.rs), so the worker's `job` span joins the producer's
-- trace. NULL for jobs without one (cron ticks, triggers, plain-SQL producers that set none).
--
-- A nullable column without a default: adding it rewrites nothing. No index names it, so a
-- claim, a heartbeat or an ack updates no more index entries than before (heartbeats stay HOT);
-- a claim only returns it. The worker parses it strictly and ignores anything malformed.
ALTER TABLE agentd_jobs ADD COLUMN traceparent text;

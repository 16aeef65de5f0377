-- A circuit breaker per webhook subscription (review N3): one org's receiver that black-holes
-- its deliveries must not hold the fleet's delivery slots for everyone. After
-- `webhook.failures_to_open` consecutive failures the subscription is `failing` and open until
-- `open_until` (30 s, doubling per further failure, at most an hour): its waiting deliveries
-- are pushed to that time, and new events' deliveries are enqueued for it (the dispatcher
-- below). The first delivery after it is the probe: a success closes the breaker.
ALTER TABLE agentd_webhooks
    ADD COLUMN consecutive_failures integer NOT NULL DEFAULT 0,
    ADD COLUMN failing_since timestamptz,
    ADD COLUMN open_until timestamptz;

CREATE OR REPLACE FUNCTION agentd_events_dispatch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO agentd_jobs (kind, payload, priority, max_attempts, unique_key, run_at)
    SELECT 'webhook_delivery',
           jsonb_build_object('org_id', e.org_id, 'event_id', e.id, 'webhook_id', w.id),
           w.priority, w.max_attempts, 'webhook:' || w.id || ':' || e.id,
           GREATEST(now(), w.open_until)
      FROM new_events e
      JOIN agentd_webhooks w ON w.org_id = e.org_id AND e.type = ANY (w.events)
     ORDER BY e.id, w.id
    ON CONFLICT DO NOTHING;
    PERFORM pg_notify('agentd_events', '');
    RETURN NULL;
END $$;

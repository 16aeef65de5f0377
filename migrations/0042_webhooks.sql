-- Webhook subscriptions (issue 15) and the dispatcher that turns each new event into one
-- delivery job per matching subscription.
--
-- The secret signs deliveries (HMAC-SHA256), so it is stored as given; no API answer returns it.
-- `max_attempts` and `priority` are copied from jobs/webhook_delivery.toml when the subscription
-- is made (the dispatcher below runs in SQL and cannot read the job file).
CREATE TABLE agentd_webhooks (
    id           uuid PRIMARY KEY,
    org_id       uuid NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    url          text NOT NULL,
    events       text[] NOT NULL CHECK (cardinality(events) > 0),
    secret       text NOT NULL,
    max_attempts integer NOT NULL CHECK (max_attempts >= 1),
    priority     smallint NOT NULL DEFAULT 0,
    created_at   timestamptz NOT NULL
);
CREATE INDEX agentd_webhooks_org_idx ON agentd_webhooks (org_id);

-- The dispatcher: in the statement (so the transaction) that writes events, one
-- `webhook_delivery` job per (event, subscription of its org that lists its type). The event
-- insert is itself deduped (ON CONFLICT on its key writes no row, so no job), and the unique key
-- `webhook:{webhook}:{event}` is a second guard: exactly one delivery job per (event, webhook).
-- Subscriptions made after an event was written do not receive it (read the cursor instead).
-- One NOTIFY per statement wakes the SSE streams (`GET /v1/events/stream`).
CREATE FUNCTION agentd_events_dispatch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO agentd_jobs (kind, payload, priority, max_attempts, unique_key)
    SELECT 'webhook_delivery',
           jsonb_build_object('org_id', e.org_id, 'event_id', e.id, 'webhook_id', w.id),
           w.priority, w.max_attempts, 'webhook:' || w.id || ':' || e.id
      FROM new_events e
      JOIN agentd_webhooks w ON w.org_id = e.org_id AND e.type = ANY (w.events)
     ORDER BY e.id, w.id
    ON CONFLICT DO NOTHING;
    PERFORM pg_notify('agentd_events', '');
    RETURN NULL;
END $$;

CREATE TRIGGER agentd_events_dispatch AFTER INSERT ON agentd_events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION agentd_events_dispatch();

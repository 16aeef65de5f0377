-- Time-based retention of the history tables (review #10): agent runs (with their transcripts),
-- events, suggestions, the audit trail and provider calls are deleted once older than
-- `[retention] *_after_days` (src/pii/history.rs), in batches, by the maintenance loop.
--
-- The audit trail and provider calls stay append-only for everyone, the application role
-- included: the one way to delete their rows is `agentd_purge_history`, which runs as the schema
-- owner, deletes only rows older than its cutoff *and* older than `agentd_history_min_days()`
-- (30 unless the owner replaces it, so a compromised application role cannot wipe the
-- recent trail), and never a row of a run still running.

-- The floor, which only the owner can change (by replacing this function: the application role
-- owns no function and cannot replace it).
CREATE FUNCTION agentd_history_min_days() RETURNS integer LANGUAGE sql IMMUTABLE AS $$ SELECT 30 $$;

-- DELETE passes the append-only trigger only inside agentd_purge_history: the function sets
-- `agentd.history_purge` for its transaction and runs as the table's owner; anyone else (or the
-- owner without the setting) is refused as before. TRUNCATE and UPDATE stay refused.
CREATE OR REPLACE FUNCTION audit_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE'
       AND current_setting('agentd.history_purge', true) = 'on'
       AND current_user = (SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = TG_RELID) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP USING ERRCODE = 'insufficient_privilege';
END $$;

-- Deletes up to `lim` of the oldest rows of `tbl` ('audit_events' or 'provider_calls') created
-- before `cutoff` and before now() - agentd_history_min_days() days, none of a running run; returns how many.
CREATE FUNCTION agentd_purge_history(tbl text, cutoff timestamptz, lim integer) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    floor_at timestamptz;
    n bigint;
BEGIN
    floor_at := least(cutoff, now() - make_interval(days => agentd_history_min_days()));
    PERFORM set_config('agentd.history_purge', 'on', true);
    IF tbl = 'audit_events' THEN
        DELETE FROM audit_events WHERE id = ANY(ARRAY(
            SELECT a.id FROM audit_events a
             WHERE a.created_at < floor_at
               AND NOT EXISTS (SELECT 1 FROM agent_runs r WHERE r.id = a.run_id AND r.status = 'running')
             ORDER BY a.created_at LIMIT lim));
    ELSIF tbl = 'provider_calls' THEN
        DELETE FROM provider_calls WHERE id = ANY(ARRAY(
            SELECT c.id FROM provider_calls c
             WHERE c.created_at < floor_at
               AND NOT EXISTS (SELECT 1 FROM agent_runs r WHERE r.id = c.run_id AND r.status = 'running')
             ORDER BY c.created_at LIMIT lim));
    ELSE
        RAISE EXCEPTION 'agentd_purge_history: unknown table %', tbl USING ERRCODE = 'invalid_parameter_value';
    END IF;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM set_config('agentd.history_purge', '', true);
    RETURN n;
END $$;

-- Oldest first, without reading the tables from the start.
CREATE INDEX audit_events_created_idx ON audit_events (created_at);
CREATE INDEX provider_calls_created_idx ON provider_calls (created_at);
CREATE INDEX agentd_events_occurred_idx ON agentd_events (occurred_at);
-- Finished runs by age (the compaction index covers only runs not yet compacted).
CREATE INDEX agent_runs_finished_idx ON agent_runs (finished_at) WHERE status <> 'running';
-- Suggestions no longer waiting for anyone, by age.
CREATE INDEX suggestions_settled_idx ON suggestions (created_at)
    WHERE status NOT IN ('pending', 'shown');
-- What a run or a suggestion is still needed by (the guards of the deletes above).
CREATE INDEX pending_approvals_pending_run_idx ON pending_approvals (run_id) WHERE status = 'pending';
CREATE INDEX pending_approvals_pending_suggestion_idx ON pending_approvals (suggestion_id)
    WHERE status = 'pending';
CREATE INDEX suggestions_open_run_idx ON suggestions (run_id) WHERE status IN ('pending', 'shown');

-- A SECURITY DEFINER function runs as its owner, and PostgreSQL grants EXECUTE on every new
-- function to PUBLIC: `agentd_purge_history` (migration 0080) could be called by any role that
-- can connect — a read-only reporting login, another application's role on a shared cluster —
-- and delete the audit trail older than its floor (review D4). EXECUTE on every such function of
-- the schema is revoked from PUBLIC and granted to the application roles only: the ones
-- `agentd_grant_app` set up before (they hold INSERT on audit_events), and from now on by
-- `agentd_grant_app` itself. `tests/it/db_roles.rs` lists the schema's SECURITY DEFINER functions
-- from pg_proc and fails on any that PUBLIC may execute, so a later one cannot slip through.
DO $$
DECLARE
    f record;
    r record;
BEGIN
    FOR f IN SELECT p.oid::regprocedure AS sig FROM pg_proc p
              WHERE p.pronamespace = current_schema()::regnamespace AND p.prosecdef
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f.sig);
        FOR r IN SELECT DISTINCT g.grantee FROM information_schema.role_table_grants g
                  WHERE g.table_schema = current_schema() AND g.table_name = 'audit_events'
                    AND g.privilege_type = 'INSERT'
                    AND g.grantee <> (SELECT pg_get_userbyid(c.relowner) FROM pg_class c
                                       WHERE c.oid = 'audit_events'::regclass)
        LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f.sig, r.grantee);
        END LOOP;
    END LOOP;
END $$;

CREATE OR REPLACE FUNCTION agentd_grant_app(app_role name) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    t record;
    f record;
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', current_schema(), app_role);
    FOR t IN SELECT c.relname FROM pg_class c
              WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
    LOOP
        IF t.relname = 'audit_events' THEN
            EXECUTE format('REVOKE ALL ON %I FROM %I', t.relname, app_role);
            EXECUTE format('GRANT SELECT, INSERT ON %I TO %I', t.relname, app_role);
        ELSIF t.relname = '_sqlx_migrations' THEN
            EXECUTE format('GRANT SELECT ON %I TO %I', t.relname, app_role);
        ELSE
            EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I TO %I', t.relname, app_role);
        END IF;
    END LOOP;
    EXECUTE format('GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA %I TO %I', current_schema(), app_role);
    -- The owner's functions that the application calls (PUBLIC may not: migration 0092).
    FOR f IN SELECT p.oid::regprocedure AS sig FROM pg_proc p
              WHERE p.pronamespace = current_schema()::regnamespace AND p.prosecdef
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f.sig, app_role);
    END LOOP;
END $$;

-- A NOTIFY in a transaction that writes takes PostgreSQL's cluster-wide notify lock at commit
-- and holds it through the commit's WAL flush: commits that notify are serialised (no group
-- commit). `queue::enqueue_committed` (single-row producers on a pool) therefore sets
-- `agentd.jobs_notify = 'after_commit'` for its insert's transaction and sends the NOTIFY after
-- the commit, from a read-only statement that holds that lock for microseconds. Every other
-- insert (plain SQL producers, inserts inside a caller's transaction) still notifies here.
CREATE OR REPLACE FUNCTION agentd_jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('agentd.jobs_notify', true) IS DISTINCT FROM 'after_commit' THEN
        PERFORM pg_notify('agentd_jobs', '');
    END IF;
    RETURN NULL;
END $$;

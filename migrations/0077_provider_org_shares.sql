-- Per-org shares of the fleet provider limits (issue 30, item 2): one org cannot take the whole
-- bucket of an endpoint (migration 0055) while another org's calls wait. See src/llm/limits.rs.
--
-- An org's grants are spaced by its share while another org waits: after a grant it may be
-- granted again only at `next_at` (60 / (share × rpm) seconds later, and the estimate's tokens
-- repaid at share × tpm / 60 per second), unless no other org is waiting. An org waits from
-- the moment the fleet bucket refused it until shortly after it asks again (`waiting_until`).
-- With nobody waiting an org may use the whole rate: the shares cost nothing when one org
-- calls alone. The org is the text of the run's org id ('' for calls outside a run).
CREATE TABLE agentd_provider_org_shares (
    key           text NOT NULL REFERENCES agentd_provider_limits (key) ON DELETE CASCADE,
    org_key       text NOT NULL,
    next_at       timestamptz NOT NULL,
    waiting_until timestamptz,
    granted       bigint NOT NULL DEFAULT 0,
    held_back     bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (key, org_key)
);

-- Takes one request of `p_org` costing `p_cost` tokens from the buckets of `p_key` with the
-- org's share `p_share` (0 < share < 1; 1: no share, as agentd_provider_take), or says how long
-- to wait. The fleet row's lock serialises every process, as in agentd_provider_take, which
-- this calls in the same transaction for the fleet bucket itself.
CREATE FUNCTION agentd_provider_take_org(p_key text, p_org text, p_cost double precision,
                                         p_share double precision,
                                         OUT ok boolean, OUT wait_secs double precision)
LANGUAGE plpgsql AS $$
DECLARE
    r      agentd_provider_limits%ROWTYPE;
    c      timestamptz;
    o_next timestamptz;
    others boolean;
    space  double precision;
BEGIN
    SELECT * INTO r FROM agentd_provider_limits WHERE key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        ok := true;
        wait_secs := 0;
        RETURN;
    END IF;
    IF p_share >= 1 THEN
        SELECT t.ok, t.wait_secs INTO ok, wait_secs FROM agentd_provider_take(p_key, p_cost) t;
        RETURN;
    END IF;
    c := clock_timestamp();
    SELECT s.next_at INTO o_next FROM agentd_provider_org_shares s
     WHERE s.key = p_key AND s.org_key = p_org;
    SELECT EXISTS (SELECT 1 FROM agentd_provider_org_shares s
                    WHERE s.key = p_key AND s.org_key <> p_org AND s.waiting_until > c)
      INTO others;
    IF others AND o_next > c THEN
        -- The org had its share lately and another org waits: the other goes first.
        UPDATE agentd_provider_limits SET throttled = throttled + 1 WHERE key = p_key;
        UPDATE agentd_provider_org_shares SET held_back = held_back + 1
         WHERE key = p_key AND org_key = p_org;
        ok := false;
        wait_secs := greatest(0.001, extract(epoch FROM o_next - c));
        RETURN;
    END IF;
    SELECT t.ok, t.wait_secs INTO ok, wait_secs FROM agentd_provider_take(p_key, p_cost) t;
    IF ok THEN
        space := greatest(
            CASE WHEN r.requests_per_minute > 0
                 THEN 60.0 / (p_share * r.requests_per_minute) ELSE 0 END,
            CASE WHEN r.tokens_per_minute > 0
                 THEN p_cost * 60.0 / (p_share * r.tokens_per_minute) ELSE 0 END);
        INSERT INTO agentd_provider_org_shares (key, org_key, next_at, granted)
        VALUES (p_key, p_org, c + make_interval(secs => space), 1)
        ON CONFLICT (key, org_key) DO UPDATE
           SET next_at = EXCLUDED.next_at,
               granted = agentd_provider_org_shares.granted + 1;
    ELSE
        -- Refused by the fleet bucket: the org waits, and asks again within the wait (the
        -- limiter asks again after at most 5 s), so it counts as waiting a second past that.
        INSERT INTO agentd_provider_org_shares (key, org_key, next_at, waiting_until)
        VALUES (p_key, p_org, c, c + make_interval(secs => least(wait_secs, 5.0) + 1.0))
        ON CONFLICT (key, org_key) DO UPDATE SET waiting_until = EXCLUDED.waiting_until;
    END IF;
END $$;

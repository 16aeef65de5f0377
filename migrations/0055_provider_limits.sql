-- Provider limits across the fleet (issue 18): one row per provider endpoint, shared by every
-- worker process. Requests and tokens per minute are buckets refilled by time (the database's
-- clock, the one clock every process shares); a 429 with Retry-After blocks the endpoint for
-- everyone until `blocked_until`. See src/llm/limits.rs for the rules.
CREATE TABLE agentd_provider_limits (
    -- The endpoint: the provider's base URL (every process calling it shares the row).
    key            text PRIMARY KEY,
    requests_per_minute integer NOT NULL CHECK (requests_per_minute >= 0),
    tokens_per_minute   bigint  NOT NULL CHECK (tokens_per_minute >= 0),
    -- Levels at `refilled_at`: a request is granted when the request level reaches 1 and the
    -- token level is not in debt; the grant takes 1 and the call's estimate.
    request_level  double precision NOT NULL,
    token_level    double precision NOT NULL,
    refilled_at    timestamptz NOT NULL,
    blocked_until  timestamptz,
    granted        bigint NOT NULL DEFAULT 0,
    throttled      bigint NOT NULL DEFAULT 0,
    rate_limited   bigint NOT NULL DEFAULT 0,
    last_429_at    timestamptz
);


-- Takes one request costing `p_cost` tokens from the buckets of `p_key`, or says how long to
-- wait. The row lock serialises every process; the time is read after the lock is held, so
-- `refilled_at` never moves backwards. Requests: the level is at most 1 and refills at
-- rpm/60 per second, so grants are at least 60/rpm seconds apart (never more than rpm in any
-- minute). Tokens: the level is at most 0 and a grant puts it in debt by the estimate; the next
-- grant waits until the debt is repaid at tpm/60 per second.
CREATE FUNCTION agentd_provider_take(p_key text, p_cost double precision,
                                     OUT ok boolean, OUT wait_secs double precision)
LANGUAGE plpgsql AS $$
DECLARE
    r   agentd_provider_limits%ROWTYPE;
    c   timestamptz;
    t   timestamptz;
    ahead double precision;
    el  double precision;
    req double precision;
    tok double precision;
BEGIN
    SELECT * INTO r FROM agentd_provider_limits WHERE key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        ok := true;
        wait_secs := 0;
        RETURN;
    END IF;
    -- After a 429 `refilled_at` is in the future (the end of the block): levels start there.
    c := clock_timestamp();
    t := greatest(c, r.refilled_at);
    ahead := extract(epoch FROM t - c);
    el := extract(epoch FROM t - r.refilled_at);
    req := CASE WHEN r.requests_per_minute > 0
                THEN least(1.0, r.request_level + el * r.requests_per_minute / 60.0) ELSE 1.0 END;
    tok := CASE WHEN r.tokens_per_minute > 0
                THEN least(0.0, r.token_level + el * r.tokens_per_minute / 60.0) ELSE 0.0 END;
    ok := (r.blocked_until IS NULL OR r.blocked_until <= t) AND req >= 0.999999 AND tok >= -0.000001;
    IF ok THEN
        UPDATE agentd_provider_limits
           SET request_level = least(req, 1.0) - 1.0,
               token_level = CASE WHEN r.tokens_per_minute > 0 THEN tok - p_cost ELSE 0 END,
               refilled_at = t, granted = granted + 1
         WHERE key = p_key;
        wait_secs := 0;
    ELSE
        UPDATE agentd_provider_limits
           SET request_level = req, token_level = tok, refilled_at = t, throttled = throttled + 1
         WHERE key = p_key;
        wait_secs := greatest(0.001,
            CASE WHEN r.blocked_until > c THEN extract(epoch FROM r.blocked_until - c) ELSE 0 END,
            ahead + CASE WHEN r.requests_per_minute > 0 THEN (1.0 - req) * 60.0 / r.requests_per_minute ELSE 0 END,
            ahead + CASE WHEN r.tokens_per_minute > 0 THEN (0.0 - tok) * 60.0 / r.tokens_per_minute ELSE 0 END);
    END IF;
END $$;

-- A 429: nobody calls `p_key` for `p_secs`, and the buckets restart empty after that.
CREATE FUNCTION agentd_provider_block(p_key text, p_secs double precision) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    t timestamptz;
BEGIN
    PERFORM 1 FROM agentd_provider_limits WHERE key = p_key FOR UPDATE;
    t := clock_timestamp();
    UPDATE agentd_provider_limits
       SET blocked_until = greatest(coalesce(blocked_until, t), t + make_interval(secs => p_secs)),
           request_level = 0,
           token_level = least(token_level, 0),
           refilled_at = greatest(refilled_at, t + make_interval(secs => p_secs)),
           rate_limited = rate_limited + 1,
           last_429_at = t
     WHERE key = p_key;
END $$;

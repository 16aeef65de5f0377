-- `org_settings.sql` with the org's row locked until the transaction ends.
SELECT id AS org_id, timezone, nightly_hour, approval_ttl_secs, repropose_expired, model,
       auto_create,
       COALESCE(token_budget, (SELECT monthly_limit FROM org_budgets b
                                WHERE b.org_id = orgs.id AND orgs.cost_cap_cents IS NULL))
         AS token_budget,
       cost_cap_cents, byok_fallback, requests_per_minute, runs_per_minute
  FROM orgs WHERE id = $1
   FOR UPDATE

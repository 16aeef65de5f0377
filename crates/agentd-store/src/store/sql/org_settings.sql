-- The settings of org $1 (`store::org_settings::OrgSettings`); a token budget set before
-- migration 0045 (an `org_budgets` row, no cost cap) counts as asked for.
SELECT id AS org_id, timezone, nightly_hour, approval_ttl_secs, repropose_expired, model,
       auto_create,
       COALESCE(token_budget, (SELECT monthly_limit FROM org_budgets b
                                WHERE b.org_id = orgs.id AND orgs.cost_cap_cents IS NULL))
         AS token_budget,
       cost_cap_cents, byok_fallback, requests_per_minute, runs_per_minute
  FROM orgs WHERE id = $1

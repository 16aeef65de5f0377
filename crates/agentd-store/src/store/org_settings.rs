//! SQL for per-org settings (migration 0045): time zone and nightly hour, approval TTL,
//! re-proposal of expired approvals, model, auto-create, token budget and cost cap, and whether
//! an org's calls with its own provider key fall back to the operator's entries (migration
//! 0094), and the org's own API request rates (migration 0097). The limit the
//! budget code enforces stays in `org_budgets.monthly_limit`; [`save`] writes it with the
//! settings in one transaction.

use serde::{Deserialize, Serialize};
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

/// An org's settings as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct OrgSettings {
    pub org_id: Uuid,
    pub timezone: String,
    pub nightly_hour: i16,
    pub approval_ttl_secs: Option<i32>,
    pub repropose_expired: bool,
    pub model: Option<String>,
    pub auto_create: bool,
    /// The monthly token budget the org asked for (null: none).
    pub token_budget: Option<i64>,
    pub cost_cap_cents: Option<i64>,
    /// Where the org's calls go when it brought its own provider key and that entry fails or
    /// does not serve the model.
    pub byok_fallback: ByokFallback,
    /// The org's own API request rate, all its keys together (null: `api.requests_per_minute_per_org`).
    pub requests_per_minute: Option<i32>,
    /// The org's own rate of run-enqueuing requests per key (null: `api.runs_per_minute_per_key`).
    pub runs_per_minute: Option<i32>,
}

/// Where an org's calls made with its own provider key may go beyond the entry the key is for
/// (`orgs.byok_fallback`, review D2).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
#[sqlx(type_name = "text", rename_all = "lowercase")]
pub enum ByokFallback {
    /// Nowhere: the org's own entry only; its failures are the call's (retried later).
    #[default]
    None,
    /// The operator's entries, with the operator's keys, as for an org without a key.
    Operator,
}

impl ByokFallback {
    /// The stored (and wire) values.
    pub const ALL: [ByokFallback; 2] = [ByokFallback::None, ByokFallback::Operator];

    /// The stored (and wire) value.
    pub fn as_str(self) -> &'static str {
        match self {
            ByokFallback::None => "none",
            ByokFallback::Operator => "operator",
        }
    }
}

impl std::fmt::Display for ByokFallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// The settings of one org.
pub async fn get<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
) -> sqlx::Result<Option<OrgSettings>> {
    sqlx::query_as(include_str!("sql/org_settings.sql"))
        .bind(org_id)
        .fetch_optional(exec)
        .await
}

/// The settings of one org, its row locked until the transaction ends.
pub async fn lock(conn: &mut PgConnection, org_id: Uuid) -> sqlx::Result<Option<OrgSettings>> {
    sqlx::query_as(include_str!("sql/org_settings_locked.sql"))
        .bind(org_id)
        .fetch_optional(conn)
        .await
}

/// Writes `s` and the enforced monthly token limit (`None`: unlimited, the budget row goes).
pub async fn save(
    conn: &mut PgConnection,
    s: &OrgSettings,
    enforced_limit: Option<i64>,
    now: chrono::DateTime<chrono::Utc>,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE orgs SET timezone = $2, nightly_hour = $3, approval_ttl_secs = $4,
                repropose_expired = $5, model = $6, auto_create = $7, token_budget = $8,
                cost_cap_cents = $9, byok_fallback = $10, requests_per_minute = $11,
                runs_per_minute = $12
          WHERE id = $1",
    )
    .bind(s.org_id)
    .bind(&s.timezone)
    .bind(s.nightly_hour)
    .bind(s.approval_ttl_secs)
    .bind(s.repropose_expired)
    .bind(&s.model)
    .bind(s.auto_create)
    .bind(s.token_budget)
    .bind(s.cost_cap_cents)
    .bind(s.byok_fallback)
    .bind(s.requests_per_minute)
    .bind(s.runs_per_minute)
    .execute(&mut *conn)
    .await?;
    match enforced_limit {
        Some(limit) => super::runs::set_budget(&mut *conn, s.org_id, limit, now).await?,
        None => {
            super::api_keys::clear_budget(&mut *conn, s.org_id).await?;
        }
    }
    Ok(())
}

//! Read-only summaries for `agentd status` and `/metrics`.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

/// A running job and how old its lease is.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct RunningJob {
    pub id: i64,
    pub kind: String,
    pub attempt: i32,
    pub locked_by: Option<String>,
    pub running_secs: f64,
    pub lease_left_secs: f64,
}

/// Running jobs, oldest first.
pub async fn running_jobs(
    pool: &PgPool,
    now: DateTime<Utc>,
    limit: i64,
) -> Result<Vec<RunningJob>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, kind, attempt, locked_by,
                EXTRACT(EPOCH FROM ($1 - started_at))::float8 AS running_secs,
                EXTRACT(EPOCH FROM (lease_expires_at - $1))::float8 AS lease_left_secs
           FROM agentd_jobs WHERE state = 'running' ORDER BY started_at LIMIT $2",
    )
    .bind(now)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// Runs per kind, status and stop reason since `since`.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct RunCount {
    pub kind: String,
    pub status: String,
    pub stop_reason: Option<String>,
    pub count: i64,
}

/// Runs started since `since`, grouped.
pub async fn runs_since(pool: &PgPool, since: DateTime<Utc>) -> Result<Vec<RunCount>, sqlx::Error> {
    sqlx::query_as(
        "SELECT kind, status, stop_reason, count(*) AS count FROM agent_runs
          WHERE started_at >= $1 GROUP BY kind, status, stop_reason ORDER BY kind, status",
    )
    .bind(since)
    .fetch_all(pool)
    .await
}

/// Approvals by status, and pending ones expiring before `soon`.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct ApprovalCount {
    pub status: String,
    pub count: i64,
    pub expiring_soon: i64,
}

/// Approval counts.
pub async fn approvals(
    pool: &PgPool,
    soon: DateTime<Utc>,
) -> Result<Vec<ApprovalCount>, sqlx::Error> {
    sqlx::query_as(
        "SELECT status, count(*) AS count,
                count(*) FILTER (WHERE status = 'pending' AND expires_at < $1) AS expiring_soon
           FROM pending_approvals GROUP BY status ORDER BY status",
    )
    .bind(soon)
    .fetch_all(pool)
    .await
}

/// Budget use of one org this period.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct BudgetUse {
    pub org_id: Uuid,
    pub org_name: String,
    pub monthly_limit: i64,
    pub tokens_used: i64,
}

/// Orgs with a budget, most used first.
pub async fn budgets(
    pool: &PgPool,
    now: DateTime<Utc>,
    limit: i64,
) -> Result<Vec<BudgetUse>, sqlx::Error> {
    sqlx::query_as(
        "SELECT b.org_id, o.name AS org_name, b.monthly_limit,
                CASE WHEN b.period_start = $1 THEN b.tokens_used ELSE 0 END AS tokens_used
           FROM org_budgets b JOIN orgs o ON o.id = b.org_id
          ORDER BY CASE WHEN b.period_start = $1 THEN b.tokens_used ELSE 0 END::float8 / GREATEST(b.monthly_limit, 1) DESC
          LIMIT $2",
    )
    .bind(super::runs::period_of(now))
    .bind(limit)
    .fetch_all(pool)
    .await
}

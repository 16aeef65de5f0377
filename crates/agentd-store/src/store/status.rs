//! Read-only summaries of the queue, runs, approvals and budgets: of one org (`GET /v1/status`,
//! the console's queue view) or of every org (`agentd status`, `/metrics`). Each query takes
//! `org: Option<Uuid>` as `$1`; an org's jobs are those [`JOB_OF_ORG`] names. "Now" is a
//! parameter.

use super::api_reads::JOB_OF_ORG;
pub use super::states::{ApprovalStatus, RunStatus};
use crate::queue::{JobRow, JobState};
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgExecutor, PgPool};
use uuid::Uuid;

/// `SELECT {columns}` of the jobs `j` of the org `$1` (of every org when `$1` is null), then
/// `rest` (more conditions, grouping, order).
fn jobs(columns: &str, rest: &str) -> sqlx::AssertSqlSafe<String> {
    sqlx::AssertSqlSafe(format!(
        "SELECT {columns} FROM agentd_jobs j WHERE ($1::uuid IS NULL OR {JOB_OF_ORG}) {rest}"
    ))
}

/// Jobs per kind and state.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct StateCount {
    pub kind: String,
    pub state: JobState,
    pub count: i64,
}

/// The jobs per kind and state.
pub async fn job_counts<'e>(
    exec: impl PgExecutor<'e>,
    org: Option<Uuid>,
) -> sqlx::Result<Vec<StateCount>> {
    let columns = "j.kind, j.state, count(*) AS count";
    sqlx::query_as(jobs(
        columns,
        "GROUP BY j.kind, j.state ORDER BY j.kind, j.state",
    ))
    .bind(org)
    .fetch_all(exec)
    .await
}

/// Per kind: ready jobs and the age of the oldest one, in seconds.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct ReadyAge {
    pub kind: String,
    pub ready: i64,
    pub oldest_ready_secs: Option<f64>,
}

/// The ready jobs per kind and the oldest one's age.
pub async fn ready_ages<'e>(
    exec: impl PgExecutor<'e>,
    org: Option<Uuid>,
    now: DateTime<Utc>,
) -> sqlx::Result<Vec<ReadyAge>> {
    let columns = "j.kind, count(*) AS ready,
                   EXTRACT(EPOCH FROM ($2 - min(j.run_at)))::float8 AS oldest_ready_secs";
    let rest = "AND j.state = 'available' AND j.run_at <= $2 GROUP BY j.kind ORDER BY j.kind";
    sqlx::query_as(jobs(columns, rest))
        .bind(org)
        .bind(now)
        .fetch_all(exec)
        .await
}

/// A running job and how old its lease is.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct RunningJob {
    pub id: i64,
    pub kind: String,
    pub attempt: i32,
    /// The worker holding it: operators only; the API leaves it out (review L8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locked_by: Option<String>,
    pub running_secs: f64,
    pub lease_left_secs: f64,
}

/// The running jobs, oldest first.
pub async fn running_jobs<'e>(
    exec: impl PgExecutor<'e>,
    org: Option<Uuid>,
    now: DateTime<Utc>,
    limit: i64,
) -> sqlx::Result<Vec<RunningJob>> {
    let columns = "j.id, j.kind, j.attempt, j.locked_by,
                   EXTRACT(EPOCH FROM ($2 - j.started_at))::float8 AS running_secs,
                   EXTRACT(EPOCH FROM (j.lease_expires_at - $2))::float8 AS lease_left_secs";
    sqlx::query_as(jobs(
        columns,
        // `kind IS NOT NULL`: the running jobs' index (migration 0114).
        "AND j.state = 'running' AND j.kind IS NOT NULL ORDER BY j.started_at LIMIT $3",
    ))
    .bind(org)
    .bind(now)
    .bind(limit)
    .fetch_all(exec)
    .await
}

/// The most recent dead jobs.
pub async fn dead_jobs<'e>(
    exec: impl PgExecutor<'e>,
    org: Option<Uuid>,
    limit: i64,
) -> sqlx::Result<Vec<JobRow>> {
    sqlx::query_as(jobs(
        "j.*",
        "AND j.state = 'dead' ORDER BY j.id DESC LIMIT $2",
    ))
    .bind(org)
    .bind(limit)
    .fetch_all(exec)
    .await
}

/// Runs per kind, status and stop reason since `since`.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct RunCount {
    pub kind: String,
    pub status: RunStatus,
    pub stop_reason: Option<String>,
    pub count: i64,
}

/// The runs started since `since`, grouped.
pub async fn runs_since<'e>(
    exec: impl PgExecutor<'e>,
    org: Option<Uuid>,
    since: DateTime<Utc>,
) -> sqlx::Result<Vec<RunCount>> {
    sqlx::query_as(
        "SELECT kind, status, stop_reason, count(*) AS count FROM agent_runs
          WHERE ($1::uuid IS NULL OR org_id = $1) AND started_at >= $2
          GROUP BY kind, status, stop_reason ORDER BY kind, status",
    )
    .bind(org)
    .bind(since)
    .fetch_all(exec)
    .await
}

/// Approvals by status, and pending ones expiring before `soon`.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct ApprovalCount {
    pub status: ApprovalStatus,
    pub count: i64,
    pub expiring_soon: i64,
}

/// The approvals by status, and pending ones expiring before `soon`.
pub async fn approval_counts<'e>(
    exec: impl PgExecutor<'e>,
    org: Option<Uuid>,
    soon: DateTime<Utc>,
) -> sqlx::Result<Vec<ApprovalCount>> {
    sqlx::query_as(
        "SELECT status, count(*) AS count,
                count(*) FILTER (WHERE status = 'pending' AND expires_at < $2) AS expiring_soon
           FROM pending_approvals WHERE $1::uuid IS NULL OR org_id = $1
          GROUP BY status ORDER BY status",
    )
    .bind(org)
    .bind(soon)
    .fetch_all(exec)
    .await
}

/// The queue, the last hour's runs and the approvals at a glance (`agentd status --json` and
/// `GET /v1/status` add the provider, budgets and kinds without a handler).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Glance {
    pub jobs: Vec<StateCount>,
    pub ready: Vec<ReadyAge>,
    /// The 20 oldest running jobs.
    pub running: Vec<RunningJob>,
    /// The 5 latest dead jobs.
    pub recent_dead: Vec<JobRow>,
    pub runs_last_hour: Vec<RunCount>,
    /// With pending ones expiring within the hour.
    pub approvals: Vec<ApprovalCount>,
    /// Kinds paused (claims of the org's jobs of the kind stop; running ones finish).
    pub paused: Vec<crate::queue::pause::PausedKind>,
}

/// The glance of one org, or of every org.
pub async fn glance(pool: &PgPool, org: Option<Uuid>, now: DateTime<Utc>) -> sqlx::Result<Glance> {
    let hour = chrono::Duration::hours(1);
    Ok(Glance {
        jobs: job_counts(pool, org).await?,
        ready: ready_ages(pool, org, now).await?,
        running: running_jobs(pool, org, now, 20).await?,
        recent_dead: dead_jobs(pool, org, 5).await?,
        runs_last_hour: runs_since(pool, org, now - hour).await?,
        approvals: approval_counts(pool, org, now + hour).await?,
        paused: crate::queue::pause::paused(pool, org).await?,
    })
}

/// Budget use of one org this period.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct BudgetUse {
    pub org_id: Uuid,
    pub org_name: String,
    pub monthly_limit: i64,
    pub tokens_used: i64,
}

/// One org's model use this month (`agentd status`).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct OrgMonthUse {
    pub org_id: Uuid,
    pub org_name: String,
    #[sqlx(flatten)]
    pub usage: super::runs::MonthUsage,
}

/// The orgs whose runs started this month, the costliest first (then the most tokens).
pub async fn month_use(
    pool: &PgPool,
    now: DateTime<Utc>,
    limit: i64,
) -> sqlx::Result<Vec<OrgMonthUse>> {
    let period = super::runs::period_of(now);
    let next = period
        .checked_add_months(chrono::Months::new(1))
        .unwrap_or(chrono::NaiveDate::MAX);
    let midnight = |d: chrono::NaiveDate| d.and_time(chrono::NaiveTime::MIN).and_utc();
    sqlx::query_as(
        "SELECT r.org_id, o.name AS org_name, count(*) AS runs,
                sum(r.input_tokens)::bigint AS input_tokens,
                sum(r.output_tokens)::bigint AS output_tokens,
                sum(r.cache_read_tokens)::bigint AS cache_read_tokens,
                sum(r.cache_write_tokens)::bigint AS cache_write_tokens,
                COALESCE(sum(r.cost_nano_usd), 0)::bigint AS cost_nano_usd,
                sum(r.unpriced_tokens)::bigint AS unpriced_tokens,
                count(*) FILTER (WHERE r.cost_nano_usd IS NULL) AS unrecorded_runs
           FROM agent_runs r JOIN orgs o ON o.id = r.org_id
          WHERE r.started_at >= $1 AND r.started_at < $2
          GROUP BY r.org_id, o.name
          ORDER BY 8 DESC, sum(r.input_tokens + r.output_tokens) DESC, o.name
          LIMIT $3",
    )
    .bind(midnight(period))
    .bind(midnight(next))
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// Orgs with a budget, most used first.
pub async fn budgets(
    pool: &PgPool,
    now: DateTime<Utc>,
    limit: i64,
) -> sqlx::Result<Vec<BudgetUse>> {
    sqlx::query_as(
        "SELECT b.org_id, o.name AS org_name, b.monthly_limit,
                CASE WHEN b.period_start >= $1 THEN b.tokens_used ELSE 0 END AS tokens_used
           FROM org_budgets b JOIN orgs o ON o.id = b.org_id
          ORDER BY CASE WHEN b.period_start >= $1 THEN b.tokens_used ELSE 0 END::float8 / GREATEST(b.monthly_limit, 1) DESC
          LIMIT $2",
    )
    .bind(super::runs::period_of(now))
    .bind(limit)
    .fetch_all(pool)
    .await
}

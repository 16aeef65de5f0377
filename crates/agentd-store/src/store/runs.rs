//! SQL for agent runs, their checkpoints (`agent_steps`) and org token budgets. Audit rows are
//! [`super::audit`]'s (re-exported here, where their callers look for them).

pub use super::audit::{
    ArgsKept, AuditCategory, AuditDecision, AuditRow, NewAudit, audit_for_run, insert_audit,
};
use super::sql;

pub use super::agent_loop::{Counters, CountersView};
pub use super::states::RunStatus;
use chrono::{DateTime, NaiveDate, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

/// A run row (`Run` in the OpenAPI document).
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
#[schema(as = Run)]
pub struct RunRow {
    pub id: Uuid,
    pub org_id: Uuid,
    /// The job kind it runs for (`auto_create`, `proactive_suggestion`).
    pub kind: String,
    /// What it works on: a document id, or the night of a nightly run.
    pub subject: String,
    pub job_id: Option<i64>,
    pub provider: String,
    pub model: String,
    /// `running`, `succeeded`, `capped`, `failed` or `cancelled`.
    pub status: RunStatus,
    /// Why it stopped: completed, or the cap it reached.
    pub stop_reason: Option<String>,
    #[serde(flatten)]
    #[sqlx(flatten)]
    pub counters: Counters,
    pub final_text: Option<String>,
    pub error: Option<String>,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// A fork: the run it was forked from (`POST /v1/runs/{id}/fork`; the parent may be gone).
    pub parent_run_id: Option<Uuid>,
    /// A fork: how many of the parent's checkpoints it starts with (copied, not run again).
    pub parent_step: Option<i32>,
}

/// What a checkpoint is. The names are a stable format: stored in `agent_steps.kind` and
/// `agent_loop_marks.kind` (their CHECKs list them, migrations 0031 and 0007), shown by the API
/// and read back by every later agentd on resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// A provider answer of the loop.
    LlmResponse,
    /// A tool call's result.
    ToolResult,
    /// A model-calling tool's provider answer, ahead of its result.
    ToolModel,
    /// Loop marks: a nudge sent to the model, the cap that ends the run, a resume.
    Nudge,
    Cap,
    Resume,
    /// The run began to wait for the decisions on its pending approvals (`agent.await_decisions`)
    /// ...
    Waiting,
    /// ... and they were decided: the outcomes, as the message the model reads next.
    Decided,
}

impl StepKind {
    pub const ALL: [StepKind; 8] = [
        StepKind::LlmResponse,
        StepKind::ToolResult,
        StepKind::ToolModel,
        StepKind::Nudge,
        StepKind::Cap,
        StepKind::Resume,
        StepKind::Waiting,
        StepKind::Decided,
    ];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            StepKind::LlmResponse => "llm_response",
            StepKind::ToolResult => "tool_result",
            StepKind::ToolModel => "tool_model",
            StepKind::Nudge => "nudge",
            StepKind::Cap => "cap",
            StepKind::Resume => "resume",
            StepKind::Waiting => "waiting",
            StepKind::Decided => "decided",
        }
    }

    /// The kind stored as `name` (`None`: not one this build knows).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// A checkpoint row (`RunStep` in the OpenAPI document).
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
#[schema(as = RunStep)]
pub struct StepRow {
    pub seq: i32,
    /// `llm_response`, `tool_result`, `tool_model`, or a loop mark (cap, nudge, resume): a
    /// [`StepKind`]'s name.
    pub kind: String,
    pub call_id: Option<String>,
    /// The checkpoint as written (a model answer, a tool result, …).
    #[schema(value_type = Object)]
    pub payload: Value,
    pub created_at: DateTime<Utc>,
}

/// The checkpoint format this build writes (the `v` field of every step's payload, added by
/// [`StepRow::written`]; checked by `agent::transcript` on resume). Steps without `v` predate
/// versioning and read as version 1.
pub const CHECKPOINT_VERSION: u64 = 1;

impl StepRow {
    /// The row as stored: text cleaned of what PostgreSQL refuses, the checkpoint format
    /// version `v` added (checked when a run resumes), the time at the database's precision.
    /// The loop keeps these in memory instead of reading back what it wrote.
    /// What this checkpoint is (`None`: a kind this build does not know).
    pub fn step_kind(&self) -> Option<StepKind> {
        StepKind::parse(&self.kind)
    }

    pub fn written(
        seq: i32,
        kind: StepKind,
        call_id: Option<&str>,
        payload: &Value,
        now: DateTime<Utc>,
    ) -> Self {
        let mut payload = super::documents::clean_json(payload);
        if let Value::Object(o) = &mut payload {
            o.insert("v".into(), Value::from(CHECKPOINT_VERSION));
        }
        Self {
            seq,
            kind: kind.as_str().to_string(),
            call_id: call_id.map(str::to_string),
            payload,
            created_at: chrono::SubsecRound::trunc_subsecs(now, 6),
        }
    }
}

/// The run driven by a job, if one exists.
pub async fn run_for_job<'e, E: PgExecutor<'e>>(
    exec: E,
    job_id: i64,
) -> sqlx::Result<Option<RunRow>> {
    sqlx::query_as("SELECT * FROM agent_runs WHERE job_id = $1")
        .bind(job_id)
        .fetch_optional(exec)
        .await
}

/// Ends the run job `job_id` drives, if still running (or waiting, `job_id` its resume job), as
/// `cancelled` (the job was cancelled: `jobs::cancel`). The number of runs ended (0 or 1).
pub async fn cancel_for_job<'e, E: PgExecutor<'e>>(
    exec: E,
    job_id: i64,
    now: DateTime<Utc>,
) -> sqlx::Result<u64> {
    let done = sqlx::query(
        "UPDATE agent_runs SET status = 'cancelled', stop_reason = 'cancelled', finished_at = $2,
                error = 'job ' || $1 || ' was cancelled'
          WHERE job_id = $1 AND status IN ('running', 'waiting')",
    )
    .bind(job_id)
    .bind(now)
    .execute(exec)
    .await?;
    Ok(done.rows_affected())
}

/// Unlinks a finished run from its job (the job is retried with a fresh run).
pub async fn detach_from_job<'e, E: PgExecutor<'e>>(exec: E, run_id: Uuid) -> sqlx::Result<()> {
    sql::execute(
        exec,
        "UPDATE agent_runs SET job_id = NULL WHERE id = $1",
        run_id,
    )
    .await?;
    Ok(())
}

/// One run.
pub async fn get_run<'e, E: PgExecutor<'e>>(exec: E, id: Uuid) -> sqlx::Result<Option<RunRow>> {
    sqlx::query_as("SELECT * FROM agent_runs WHERE id = $1")
        .bind(id)
        .fetch_optional(exec)
        .await
}

/// The kind of the run `run_id`, if there is one and it still exists.
pub async fn kind_of<'e, E: PgExecutor<'e>>(
    exec: E,
    run_id: Option<Uuid>,
) -> sqlx::Result<Option<String>> {
    Ok(match run_id {
        Some(r) => get_run(exec, r).await?.map(|r| r.kind),
        None => None,
    })
}

/// Recent runs, newest first.
pub async fn list_runs<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Option<Uuid>,
    kind: Option<&str>,
    limit: i64,
) -> sqlx::Result<Vec<RunRow>> {
    sqlx::query_as(
        "SELECT * FROM agent_runs WHERE ($1::uuid IS NULL OR org_id = $1) AND ($2::text IS NULL OR kind = $2)
          ORDER BY started_at DESC LIMIT $3",
    )
    .bind(org_id)
    .bind(kind)
    .bind(limit)
    .fetch_all(exec)
    .await
}

/// What `agentd runs list` filters by (as `GET /v1/runs`): every filter given must hold.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    /// Only this org's runs (default: every org's).
    pub org_id: Option<Uuid>,
    pub kind: Option<String>,
    pub status: Option<RunStatus>,
    /// A document id, or the night of a nightly run.
    pub subject: Option<String>,
    pub model: Option<String>,
}

/// The newest `limit` runs that match `f`.
pub async fn find_runs<'e, E: PgExecutor<'e>>(
    exec: E,
    f: &RunFilter,
    limit: i64,
) -> sqlx::Result<Vec<RunRow>> {
    let mut q = sqlx::QueryBuilder::new("SELECT * FROM agent_runs WHERE true");
    if let Some(org) = f.org_id {
        q.push(" AND org_id = ").push_bind(org);
    }
    if let Some(kind) = &f.kind {
        q.push(" AND kind = ").push_bind(kind.as_str());
    }
    if let Some(status) = f.status {
        q.push(" AND status = ").push_bind(status);
    }
    if let Some(subject) = &f.subject {
        q.push(" AND subject = ").push_bind(subject.as_str());
    }
    if let Some(model) = &f.model {
        q.push(" AND model = ").push_bind(model.as_str());
    }
    q.push(" ORDER BY started_at DESC, id DESC LIMIT ")
        .push_bind(limit);
    q.build_query_as().fetch_all(exec).await
}

/// New run parameters.
pub struct NewRun<'a> {
    pub id: Uuid,
    pub org_id: Uuid,
    pub kind: &'a str,
    pub subject: &'a str,
    pub job_id: Option<i64>,
    pub provider: &'a str,
    pub model: &'a str,
    pub started_at: DateTime<Utc>,
}

/// Inserts a run in state `running`. With a job id, a concurrent insert for the same job
/// returns the existing run instead.
pub async fn create_run(conn: &mut PgConnection, r: &NewRun<'_>) -> sqlx::Result<RunRow> {
    let inserted: Option<RunRow> = sqlx::query_as(
        "INSERT INTO agent_runs (id, org_id, kind, subject, job_id, provider, model, status, started_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, 'running', $8)
         ON CONFLICT (job_id) DO NOTHING RETURNING *",
    )
    .bind(r.id)
    .bind(r.org_id)
    .bind(r.kind)
    .bind(r.subject)
    .bind(r.job_id)
    .bind(r.provider)
    .bind(r.model)
    .bind(r.started_at)
    .fetch_optional(&mut *conn)
    .await?;
    match inserted {
        Some(r) => Ok(r),
        None => run_for_job(&mut *conn, r.job_id.unwrap_or_default())
            .await?
            .ok_or(sqlx::Error::RowNotFound),
    }
}

/// Model answers a tool asked for itself (`run_extraction`'s `tool_model` checkpoints) per
/// run of `run_ids`: the calls a run made besides its rounds.
pub async fn tool_model_answers<'e, E: PgExecutor<'e>>(
    exec: E,
    run_ids: &[Uuid],
) -> sqlx::Result<std::collections::HashMap<Uuid, i64>> {
    let rows: Vec<(Uuid, i64)> = sqlx::query_as(
        "SELECT run_id, count(*) FROM agent_steps WHERE run_id = ANY($1) AND kind = 'tool_model'
          GROUP BY run_id",
    )
    .bind(run_ids)
    .fetch_all(exec)
    .await?;
    Ok(rows.into_iter().collect())
}

/// The checkpoints of a run, in order.
pub async fn steps<'e, E: PgExecutor<'e>>(exec: E, run_id: Uuid) -> sqlx::Result<Vec<StepRow>> {
    sqlx::query_as("SELECT seq, kind, call_id, payload, created_at FROM agent_steps WHERE run_id = $1 ORDER BY seq")
        .bind(run_id)
        .fetch_all(exec)
        .await
}

/// Adds what a call charged outside a checkpoint (a tool's model call decided by a person, a
/// failed call's estimate) to the run: its tokens, cache reads and writes, cost and unpriced
/// tokens.
pub async fn add_usage(conn: &mut PgConnection, run_id: Uuid, add: &Counters) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE agent_runs
            SET input_tokens = input_tokens + $2, output_tokens = output_tokens + $3,
                cache_read_tokens = cache_read_tokens + $4, cache_write_tokens = cache_write_tokens + $5,
                cost_nano_usd = cost_nano_usd + $6, unpriced_tokens = unpriced_tokens + $7
          WHERE id = $1",
    )
    .bind(run_id)
    .bind(add.input_tokens)
    .bind(add.output_tokens)
    .bind(add.cache_read_tokens)
    .bind(add.cache_write_tokens)
    .bind(add.cost_nano_usd.unwrap_or(0))
    .bind(add.unpriced_tokens)
    .execute(conn)
    .await?;
    Ok(())
}

/// Final state of a run (only while it is still running: finishing twice changes nothing).
pub async fn finish_run<'e, E: PgExecutor<'e>>(
    exec: E,
    run_id: Uuid,
    status: RunStatus,
    stop_reason: Option<&str>,
    final_text: Option<&str>,
    error: Option<&str>,
    now: DateTime<Utc>,
) -> sqlx::Result<bool> {
    let done = sqlx::query(
        "UPDATE agent_runs SET status = $2, stop_reason = $3, final_text = $4, error = $5, finished_at = $6
          WHERE id = $1 AND status IN ('running', 'waiting')",
    )
    .bind(run_id)
    .bind(status)
    .bind(stop_reason)
    .bind(final_text.map(|t| super::documents::clean_text(t).into_owned()))
    .bind(error.map(super::documents::bounded_error))
    .bind(now)
    .execute(exec)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Marks a running run `failed` (stop reason `error`, the job gave up), keeping what it did.
pub async fn fail_run<'e>(
    exec: impl PgExecutor<'e>,
    run_id: Uuid,
    error: &str,
    now: DateTime<Utc>,
) -> sqlx::Result<bool> {
    finish_run(
        exec,
        run_id,
        RunStatus::Failed,
        Some("error"),
        None,
        Some(error),
        now,
    )
    .await
}

/// An org's budget state for the current period.
#[derive(Debug, Clone, Copy, sqlx::FromRow)]
pub struct Budget {
    pub monthly_limit: i64,
    pub tokens_used: i64,
}

/// An org's model use in a month (UTC), summed over the runs started in it (`GET /v1/usage`,
/// `agentd status`).
#[derive(Debug, Clone, Copy, Default, PartialEq, sqlx::FromRow)]
pub struct MonthUsage {
    pub runs: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    /// The priced calls' cost (nano-dollars).
    pub cost_nano_usd: i64,
    /// Tokens of calls whose model has no price.
    pub unpriced_tokens: i64,
    /// Runs from before costs were recorded.
    pub unrecorded_runs: i64,
}

impl MonthUsage {
    /// The month's cost, or why it is not known (some calls unpriced or unrecorded).
    pub fn cost(&self) -> Result<crate::config::NanoUsd, String> {
        let mut why = Vec::new();
        if self.unpriced_tokens > 0 {
            why.push(format!(
                "{} tokens were of a model with no price in llm.prices",
                self.unpriced_tokens
            ));
        }
        if self.unrecorded_runs > 0 {
            why.push(format!(
                "{} run(s) predate cost accounting",
                self.unrecorded_runs
            ));
        }
        match why.is_empty() {
            true => Ok(crate::config::NanoUsd(self.cost_nano_usd)),
            false => Err(why.join("; ")),
        }
    }
}

/// The org's use in the month that starts on `period` (the first of a month).
pub async fn month_usage<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    period: NaiveDate,
) -> sqlx::Result<MonthUsage> {
    let next = period
        .checked_add_months(chrono::Months::new(1))
        .unwrap_or(NaiveDate::MAX);
    let midnight = |d: NaiveDate| d.and_time(chrono::NaiveTime::MIN).and_utc();
    sqlx::query_as(
        "SELECT count(*) AS runs,
                COALESCE(sum(input_tokens), 0)::bigint AS input_tokens,
                COALESCE(sum(output_tokens), 0)::bigint AS output_tokens,
                COALESCE(sum(cache_read_tokens), 0)::bigint AS cache_read_tokens,
                COALESCE(sum(cache_write_tokens), 0)::bigint AS cache_write_tokens,
                COALESCE(sum(cost_nano_usd), 0)::bigint AS cost_nano_usd,
                COALESCE(sum(unpriced_tokens), 0)::bigint AS unpriced_tokens,
                count(*) FILTER (WHERE cost_nano_usd IS NULL) AS unrecorded_runs
           FROM agent_runs
          WHERE org_id = $1 AND started_at >= $2 AND started_at < $3",
    )
    .bind(org_id)
    .bind(midnight(period))
    .bind(midnight(next))
    .fetch_one(exec)
    .await
}

/// The first day of `now`'s month: the budget period.
pub fn period_of(now: DateTime<Utc>) -> NaiveDate {
    use chrono::Datelike;
    NaiveDate::from_ymd_opt(now.year(), now.month(), 1).expect("valid month start")
}

/// The org's budget this period (`None`: no budget set, unlimited).
pub async fn budget<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    now: DateTime<Utc>,
) -> sqlx::Result<Option<Budget>> {
    sqlx::query_as(
        "SELECT monthly_limit, CASE WHEN period_start >= $2 THEN tokens_used ELSE 0 END AS tokens_used
           FROM org_budgets WHERE org_id = $1",
    )
    .bind(org_id)
    .bind(period_of(now))
    .fetch_optional(exec)
    .await
}

/// Sets an org's monthly limit.
pub async fn set_budget<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    limit: i64,
    now: DateTime<Utc>,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO org_budgets (org_id, monthly_limit, period_start) VALUES ($1, $2, $3)
         ON CONFLICT (org_id) DO UPDATE SET monthly_limit = EXCLUDED.monthly_limit",
    )
    .bind(org_id)
    .bind(limit)
    .bind(period_of(now))
    .execute(exec)
    .await?;
    Ok(())
}

/// Adds used tokens atomically (rolling the period over when a new month starts). Writes one
/// `budget.threshold` event per threshold (80 % and 100 % of the limit) and month, on `conn`
/// (the caller's transaction). Returns `Some((used, limit))` exactly once per period, when use
/// first crosses 80% of the limit.
pub async fn charge_budget(
    conn: &mut PgConnection,
    org_id: Uuid,
    tokens: i64,
    now: DateTime<Utc>,
) -> sqlx::Result<Option<(i64, i64)>> {
    let period = period_of(now);
    let row: Option<(i64, i64)> = sqlx::query_as(
        "UPDATE org_budgets
            SET tokens_used = CASE WHEN period_start >= $3 THEN tokens_used + $2 ELSE $2 END,
                period_start = GREATEST(period_start, $3)
          WHERE org_id = $1
      RETURNING tokens_used, monthly_limit",
    )
    .bind(org_id)
    .bind(tokens)
    .bind(period)
    .fetch_optional(&mut *conn)
    .await?;
    let Some((used, limit)) = row else {
        return Ok(None);
    };
    after_charge(conn, org_id, used, limit, now).await
}

/// Whether `used` of `limit` is past the month's 80 % warning (from there a charge checks the
/// threshold flags).
pub fn past_warning(used: i64, limit: i64) -> bool {
    used * 5 >= limit * 4
}

/// The rest of a charge that left the org's use at `used` of `limit` in `now`'s period (the
/// budget row locked by it): flips the month's 80 % and 100 % flags and writes their
/// `budget.threshold` events on `conn`. Returns `Some((used, limit))` exactly once per period,
/// when use first crosses 80% of the limit. Nothing to do (and no round trip) below 80 %.
pub async fn after_charge(
    conn: &mut PgConnection,
    org_id: Uuid,
    used: i64,
    limit: i64,
    now: DateTime<Utc>,
) -> sqlx::Result<Option<(i64, i64)>> {
    if !past_warning(used, limit) {
        return Ok(None);
    }
    let period = period_of(now);
    // Lock the row (held already when the charge is in this transaction) so that the flags
    // below are read after any other run's flip committed: only one run flips each flag.
    sql::execute(
        &mut *conn,
        "SELECT 1 FROM org_budgets WHERE org_id = $1 FOR UPDATE",
        org_id,
    )
    .await?;
    let flipped: Option<(bool, bool)> = sqlx::query_as(
        "WITH old AS (SELECT warned_period, warned_full_period FROM org_budgets WHERE org_id = $1)
         UPDATE org_budgets b SET warned_period = $2,
                warned_full_period = CASE WHEN $3 THEN $2 ELSE b.warned_full_period END
           FROM old
          WHERE b.org_id = $1
            AND (old.warned_period IS DISTINCT FROM $2
                 OR ($3 AND old.warned_full_period IS DISTINCT FROM $2))
      RETURNING old.warned_period IS DISTINCT FROM $2,
                $3 AND old.warned_full_period IS DISTINCT FROM $2",
    )
    .bind(org_id)
    .bind(period)
    .bind(used >= limit)
    .fetch_optional(&mut *conn)
    .await?;
    let (eighty, full) = flipped.unwrap_or((false, false));
    for (pct, crossed) in [(80, eighty), (100, full)] {
        if crossed {
            threshold_event(conn, org_id, pct, used, limit, period, now).await?;
        }
    }
    Ok(eighty.then_some((used, limit)))
}

/// `budget.threshold` for `pct` % of the org's budget in the month starting `period`.
async fn threshold_event(
    conn: &mut PgConnection,
    org_id: Uuid,
    pct: i64,
    used: i64,
    limit: i64,
    period: chrono::NaiveDate,
    now: DateTime<Utc>,
) -> sqlx::Result<()> {
    use super::events::{EventType, NewEvent, emit};
    let payload = serde_json::json!({
        "threshold_percent": pct, "tokens_used": used, "monthly_limit": limit,
        "period_start": period,
    });
    let key = format!("budget.threshold:{org_id}:{period}:{pct}");
    emit(
        conn,
        &NewEvent {
            org_id,
            kind: EventType::BudgetThreshold,
            subject_id: None,
            occurred_at: now,
            payload: &payload,
            dedupe_key: Some(&key),
        },
    )
    .await?;
    Ok(())
}

/// The next free checkpoint sequence number of a run.
pub async fn next_seq(conn: &mut PgConnection, run_id: Uuid) -> sqlx::Result<i32> {
    sqlx::query_scalar("SELECT COALESCE(max(seq), -1) + 1 FROM agent_steps WHERE run_id = $1")
        .bind(run_id)
        .fetch_one(conn)
        .await
}

/// The payload of the checkpoint of `call_id` in a run, if there is one.
pub async fn step_for_call(
    conn: &mut PgConnection,
    run_id: Uuid,
    call_id: &str,
) -> sqlx::Result<Option<Value>> {
    sqlx::query_scalar("SELECT payload FROM agent_steps WHERE run_id = $1 AND call_id = $2")
        .bind(run_id)
        .bind(call_id)
        .fetch_optional(conn)
        .await
}

/// Calls of `tool` in a run whose model answer was paid for but failed (audited as errors with
/// tokens): the failed-extraction cap counts them.
pub async fn failed_model_answers(
    conn: &mut PgConnection,
    run_id: Uuid,
    tool: &str,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "SELECT count(*) FROM audit_events WHERE run_id = $1 AND tool = $2 AND is_error AND tokens > 0",
    )
    .bind(run_id)
    .bind(tool)
    .fetch_one(conn)
    .await
}

#[cfg(test)]
mod tests {
    use super::StepKind;

    /// The kinds each table's CHECK allows, as the last migration that set it lists them.
    fn checked(sql: &str) -> Vec<String> {
        let list = sql
            .rsplit_once("CHECK (kind IN (")
            .and_then(|(_, rest)| rest.split_once("))"))
            .map(|(list, _)| list)
            .unwrap_or_default();
        list.split(',')
            .map(|s| s.trim().trim_matches('\'').to_string())
            .filter(|s| !s.is_empty())
            .collect()
    }

    #[test]
    fn every_step_kind_is_a_stored_name_and_reads_back() {
        let steps = checked(include_str!("../../../../migrations/0031_step_kinds.sql"));
        let marks = checked(include_str!(
            "../../../../migrations/0107_runs_await_decisions.sql"
        ));
        let mut stored: Vec<String> = steps.into_iter().chain(marks).collect();
        stored.sort();
        stored.dedup();
        let mut ours: Vec<String> = StepKind::ALL.iter().map(|k| k.as_str().into()).collect();
        ours.sort();
        assert_eq!(
            ours, stored,
            "StepKind and the CHECKs of agent_steps / agent_loop_marks"
        );
        for k in StepKind::ALL {
            assert_eq!(StepKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(StepKind::parse("llm-response"), None);
    }
}

//! SQL of the loop's own records (issue 11): estimated token counts on runs (a provider that
//! sent no usage, a call that failed after the model generated), and loop marks (a nudge, the
//! cap that ends a run) that share the run's step sequence.

use super::runs::{StepKind, StepRow};
use super::sql;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::postgres::PgArguments;
use sqlx::{Arguments, PgConnection, PgExecutor};
// Checkpoints of the loop live here; `runs` keeps the run rows.
use uuid::Uuid;

/// Records a loop mark (`nudge` or `cap`) at step `seq` of the run.
pub async fn insert_mark(
    conn: &mut PgConnection,
    run_id: Uuid,
    seq: i32,
    kind: StepKind,
    payload: &Value,
    now: DateTime<Utc>,
) -> sqlx::Result<StepRow> {
    // As read back: marks carry no version and no call id.
    let row = StepRow {
        seq,
        kind: kind.as_str().to_string(),
        call_id: None,
        payload: payload.clone(),
        created_at: chrono::SubsecRound::trunc_subsecs(now, 6),
    };
    sqlx::query(
        "INSERT INTO agent_loop_marks (run_id, seq, kind, payload, created_at) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(run_id)
    .bind(seq)
    .bind(kind.as_str())
    .bind(payload)
    .bind(row.created_at)
    .execute(conn)
    .await?;
    Ok(row)
}

/// The run's checkpoints and loop marks, in step order.
pub async fn steps_and_marks(pool: &sqlx::PgPool, run_id: Uuid) -> sqlx::Result<Vec<StepRow>> {
    let mut steps = super::runs::steps(pool, run_id).await?;
    let marks: Vec<StepRow> = sqlx::query_as(
        "SELECT seq, kind, NULL::text AS call_id, payload, created_at FROM agent_loop_marks WHERE run_id = $1",
    )
    .bind(run_id)
    .fetch_all(pool)
    .await?;
    if !marks.is_empty() {
        steps.extend(marks);
        steps.sort_by_key(|s| s.seq);
    }
    Ok(steps)
}

/// Marks the run's token counts as including estimates.
pub async fn mark_estimated<'e, E: PgExecutor<'e>>(exec: E, run_id: Uuid) -> sqlx::Result<()> {
    sql::execute(
        exec,
        "UPDATE agent_runs SET tokens_estimated = true WHERE id = $1 AND NOT tokens_estimated",
        run_id,
    )
    .await?;
    Ok(())
}

/// True if the run's token counts include estimates.
pub async fn is_estimated<'e, E: PgExecutor<'e>>(exec: E, run_id: Uuid) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT tokens_estimated FROM agent_runs WHERE id = $1")
        .bind(run_id)
        .fetch_one(exec)
        .await
}

/// Charges the estimated input of a failed call to the run and its org, marked estimated: `add`
/// holds its input tokens and their cost. Returns `Some((used, limit))` when the org's use first
/// crosses 80% of its budget.
pub async fn charge_failed_call(
    conn: &mut PgConnection,
    org_id: Uuid,
    run_id: Uuid,
    add: &Counters,
    now: DateTime<Utc>,
) -> sqlx::Result<Option<(i64, i64)>> {
    super::runs::add_usage(&mut *conn, run_id, add).await?;
    mark_estimated(&mut *conn, run_id).await?;
    super::runs::charge_budget(conn, org_id, add.tokens(), now).await
}

/// Begins a transaction that commits without waiting for its WAL to reach the disk
/// (PostgreSQL's `synchronous_commit = off`, for this transaction only; one round trip with its
/// BEGIN). For records whose loss in a crash of the database server (never of agentd: the commit
/// is visible at once) costs nothing, or repeats work: the next durable commit on the server
/// flushes the WAL before it, this record included (the WAL writer does within 0.6 s anyway).
pub async fn begin_unflushed(
    pool: &sqlx::PgPool,
) -> sqlx::Result<sqlx::Transaction<'static, sqlx::Postgres>> {
    pool.begin_with("BEGIN; SET LOCAL synchronous_commit = off")
        .await
}

/// A run's counters (columns of `agent_runs`), and what a checkpoint adds to them. Shown as
/// [`CountersView`]: the cost in dollars, or why it is not known.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, sqlx::FromRow)]
#[serde(into = "CountersView")]
pub struct Counters {
    /// Model answers.
    pub rounds: i32,
    /// Tool calls answered.
    pub tool_calls: i32,
    /// Tokens the provider read and wrote, as it reported them (or as estimated).
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// Of `input_tokens`: read from the provider's prompt cache, and written to it.
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    /// The calls' cost in nano-dollars at `llm.prices` (`config::prices::cost`); `None`: a run
    /// from before costs were recorded. Added to the run: `None` adds nothing.
    pub cost_nano_usd: Option<i64>,
    /// Tokens of calls whose model has no price (the run's cost is then not known).
    pub unpriced_tokens: i64,
}

impl Counters {
    /// Tokens in and out: what budgets and caps count.
    pub fn tokens(&self) -> i64 {
        self.input_tokens + self.output_tokens
    }

    /// What the run cost, or why that is not known (a model without a price, a run from before
    /// costs were recorded): a figure only when every call was priced.
    pub fn cost(&self) -> Result<NanoUsd, String> {
        if self.unpriced_tokens > 0 {
            return Err(format!(
                "{} of its tokens were of a model with no price in llm.prices",
                self.unpriced_tokens
            ));
        }
        match self.cost_nano_usd {
            Some(n) => Ok(NanoUsd(n)),
            None => Err("the run predates cost accounting".into()),
        }
    }

    /// The cost as a person reads it: `$0.004215`, or `n/a`.
    pub fn cost_text(&self) -> String {
        match self.cost() {
            Ok(c) => c.to_string(),
            Err(_) => "n/a".into(),
        }
    }
}

use crate::config::NanoUsd;

/// A run's counters as the API shows them (`Counters` in the OpenAPI document).
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[schema(as = Counters)]
pub struct CountersView {
    /// Model answers.
    pub rounds: i32,
    /// Tool calls answered.
    pub tool_calls: i32,
    /// Tokens the provider read (cache reads and writes included) and wrote, as it reported
    /// them (or as estimated).
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// Of `input_tokens`: read from the provider's prompt cache (priced lower).
    pub cache_read_tokens: i64,
    /// Of `input_tokens`: written to the provider's prompt cache.
    pub cache_write_tokens: i64,
    /// What the run's model calls cost, in US dollars at `llm.prices` (list prices unless the
    /// operator set others), rounded to the micro-dollar; null when it is not known
    /// (`cost_note` says why).
    pub cost_usd: Option<f64>,
    /// Why `cost_usd` is null: a model with no price, or a run from before costs were recorded.
    pub cost_note: Option<String>,
}

impl From<Counters> for CountersView {
    fn from(c: Counters) -> Self {
        let (cost_usd, cost_note) = match c.cost() {
            Ok(n) => (Some(n.dollars()), None),
            Err(why) => (None, Some(why)),
        };
        CountersView {
            rounds: c.rounds,
            tool_calls: c.tool_calls,
            input_tokens: c.input_tokens,
            output_tokens: c.output_tokens,
            cache_read_tokens: c.cache_read_tokens,
            cache_write_tokens: c.cache_write_tokens,
            cost_usd,
            cost_note,
        }
    }
}

impl utoipa::PartialSchema for Counters {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        <CountersView as utoipa::PartialSchema>::schema()
    }
}

impl utoipa::ToSchema for Counters {
    fn name() -> std::borrow::Cow<'static, str> {
        <CountersView as utoipa::ToSchema>::name()
    }

    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        schemas.push((
            Self::name().into_owned(),
            <Self as utoipa::PartialSchema>::schema(),
        ));
    }
}

/// A charge settled with a checkpoint: the reservation `reservation` (if one was held) dropped
/// and `tokens` added to the org's use in `now`'s period (rolled over when a month starts).
#[derive(Debug, Clone, Copy)]
pub struct Settle {
    pub org_id: Uuid,
    pub reservation: Option<Uuid>,
    pub tokens: i64,
    pub now: DateTime<Utc>,
}

/// What a settled checkpoint returns: the run's token total, and the org's budget after the
/// charge (`None`: the org has no budget).
#[derive(Debug, Clone, Copy)]
pub struct Settled {
    pub run_tokens: i64,
    pub budget: Option<super::runs::Budget>,
}

/// Whether a commit waits for its WAL to reach the disk (see [`begin_unflushed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    Durable,
    Unflushed,
}

/// Appends a checkpoint (see [`StepRow::written`]), adds `add` to the run's counters (its
/// tokens, cache reads and writes, cost and unpriced tokens) and settles
/// `settle` on the org's budget, in one statement (the charge's 80 %/100 % flags and events are
/// the caller's: `runs::after_charge`). A second row at the same `seq` or for the same
/// `(run_id, call_id)` is a unique violation: nothing of the statement is written.
///
/// Run outside a transaction it is its own: one round trip for the whole checkpoint, with
/// `flush` deciding whether that commit waits for the disk (`set_config(…, true)` lasts until
/// the statement's implicit transaction ends, its commit included). Inside a caller's
/// transaction `Flush::Unflushed` applies to that transaction's commit.
pub async fn checkpoint_settled(
    conn: &mut PgConnection,
    run_id: Uuid,
    step: &StepRow,
    add: Counters,
    settle: Settle,
    flush: Flush,
) -> sqlx::Result<Settled> {
    let (run_tokens, used, limit): (i64, Option<i64>, Option<i64>) = sqlx::query_as_with(
        include_str!("sql/agent_checkpoint_settled.sql"),
        step_arguments(PgArguments::default(), run_id, step, add)?,
    )
    .bind(settle.reservation)
    .bind(settle.org_id)
    .bind(settle.tokens)
    .bind(super::runs::period_of(settle.now))
    .bind(flush == Flush::Unflushed)
    .bind(add.cache_read_tokens)
    .bind(add.cache_write_tokens)
    .bind(add.cost_nano_usd.unwrap_or(0))
    .bind(add.unpriced_tokens)
    .fetch_one(conn)
    .await?;
    let budget = match (used, limit) {
        (Some(tokens_used), Some(monthly_limit)) => Some(super::runs::Budget {
            monthly_limit,
            tokens_used,
        }),
        _ => None,
    };
    Ok(Settled { run_tokens, budget })
}

/// `args` followed by a checkpoint's and its counters' values, in the order both combined
/// statements number them: run_id, seq, kind, call_id, payload, created_at, rounds, tool_calls,
/// input_tokens, output_tokens.
fn step_arguments(
    mut args: PgArguments,
    run_id: Uuid,
    step: &StepRow,
    add: Counters,
) -> sqlx::Result<PgArguments> {
    let mut values = || -> Result<(), sqlx::error::BoxDynError> {
        args.add(run_id)?;
        args.add(step.seq)?;
        args.add(&step.kind)?;
        args.add(&step.call_id)?;
        args.add(&step.payload)?;
        args.add(step.created_at)?;
        args.add(add.rounds)?;
        args.add(add.tool_calls)?;
        args.add(add.input_tokens)?;
        args.add(add.output_tokens)
    };
    values().map_err(sqlx::Error::Encode)?;
    Ok(args)
}

/// Appends the audit row `audit` and a checkpoint (see [`StepRow::written`]) and adds `add` to
/// the run's counters, in one statement; returns the run's token total. A second result for the
/// same `(run_id, call_id)`, or a second row at the same `seq`, is a unique violation (the tool
/// already ran, or another worker holds the run): the caller's transaction rolls back and
/// nothing runs twice.
pub async fn checkpoint_audited(
    conn: &mut PgConnection,
    run_id: Uuid,
    step: &StepRow,
    add: Counters,
    audit: &super::audit::NewAudit<'_>,
) -> sqlx::Result<i64> {
    sqlx::query_scalar_with(
        include_str!("sql/agent_checkpoint_audited.sql"),
        step_arguments(super::audit::audit_arguments(audit)?, run_id, step, add)?,
    )
    .fetch_one(conn)
    .await
}

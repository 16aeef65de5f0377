//! The tool loop: one engine for every job kind. Before each provider call the caps (rounds,
//! tool calls, tokens, deadline, refinements) and the org's monthly budget are checked; each
//! provider response and each tool result is a checkpoint committed in the same transaction as
//! the tool's side effects and its audit row, so a crashed run resumes from its last checkpoint
//! without repeating a provider call or re-executing a tool.

mod caps;
mod constrain;
mod context;
mod decide;
pub mod decisions;
pub mod goals;
mod guard;
mod marks;
mod metering;
mod model_step;
mod next;
mod one_call;
mod outcome;
mod review;
mod round;
pub mod settings;
mod step;
mod step_conn;
mod summary;
pub mod transcript;
mod wait;

use crate::approvals::ToolEnv;
use crate::clock::SharedClock;
use crate::store::runs::{self, NewRun, RunRow, RunStatus};
use chrono::NaiveDate;
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};
use transcript::Transcript;
use uuid::Uuid;

use next::{Next, Round};
// Budget reservation is `llm::budget` (approvals reserve too); the tool policy `tools::policy`.
pub use crate::llm::budget;
pub use crate::tools::policy;
pub use caps::{Caps, StopReason};
pub use context::fenced;
pub use outcome::{RunError, RunOutcome};
pub use policy::Policy;
pub use settings::LoopSettings;

/// Everything a run needs to know about its job.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub kind: String,
    pub org_id: Uuid,
    /// What the run is about (document id, night, approval id).
    pub subject: String,
    /// The driving job: a retried job resumes this run.
    pub job_id: Option<i64>,
    pub model: String,
    pub system_prompt: String,
    pub first_message: String,
    pub policy: Policy,
    pub caps: Caps,
    pub approval_ttl: chrono::Duration,
    pub document_id: Option<Uuid>,
    pub night: Option<NaiveDate>,
    pub max_suggestions: Option<u32>,
    /// For re-proposals: the chain given to the approvals this run proposes.
    pub chain: Option<crate::store::approvals::Chain>,
    /// For re-proposals: the stale approval's action (the run's goal).
    pub repropose: Option<goals::Reproposal>,
    /// Nudges, repeat guard, guided mode, tool_choice and sizes.
    pub settings: LoopSettings,
    /// What the run starts from besides its document: a schema, prompt and tags a person
    /// named, or the proposal a refine revises (issue 33).
    pub start: crate::store::auto_create::StartFrom,
    /// Whose decisions the first message shows ("what people decided"); `None`: none.
    pub decisions: Option<crate::store::decisions::DecisionScope>,
    /// The job that resumes this run when it waits for the decisions on its proposals
    /// (`agent.await_decisions`: `agent/wait.rs`), as the kind built it; `None`: the run
    /// never waits.
    pub resume_job: Option<crate::queue::NewJob>,
}

/// What one write of the loop added: its checkpoints (in sequence order), kept in memory by the
/// loop instead of read back, and the run's token total when a counter moved.
#[derive(Debug, Default)]
pub(crate) struct Written {
    pub steps: Vec<crate::store::runs::StepRow>,
    pub tokens: Option<i64>,
    /// This write charged the org's budget (a budget seen before it is stale) ...
    pub charged: bool,
    /// ... and left it so, when the charge returned it.
    pub budget: Option<BudgetSeen>,
}

/// The org's budget as the last charge of this run returned it (`RETURNING` of the settle): the
/// next round's pre-check reads it instead of the database. Other runs' charges since then are
/// not in it — as if they had committed just after a read — and the reservation, which locks
/// the budget row, still checks against them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BudgetSeen {
    budget: Option<runs::Budget>,
    period: NaiveDate,
}

impl BudgetSeen {
    /// What a charge at `now` returned (`None`: the org has no budget).
    pub fn after(budget: Option<runs::Budget>, now: chrono::DateTime<chrono::Utc>) -> Self {
        Self {
            budget,
            period: runs::period_of(now),
        }
    }

    /// The budget at `now`, as [`runs::budget`] reads it: a new month starts at zero.
    fn at(&self, now: chrono::DateTime<chrono::Utc>) -> Option<runs::Budget> {
        let fresh = runs::period_of(now) == self.period;
        self.budget.map(|b| runs::Budget {
            tokens_used: if fresh { b.tokens_used } else { 0 },
            ..b
        })
    }
}

impl Written {
    fn apply(self, steps: &mut Vec<crate::store::runs::StepRow>, tokens: &mut u64) {
        steps.extend(self.steps);
        if let Some(n) = self.tokens {
            *tokens = n.max(0) as u64;
        }
    }
}

/// The loop, with what it shares across runs.
#[derive(Clone)]
pub struct Engine {
    pub pool: PgPool,
    pub clock: SharedClock,
    pub env: ToolEnv,
    /// The redaction boundary every provider call of a run goes through.
    pub pii: crate::pii::PiiSettings,
    /// The run's redaction table once its run started with redaction on: the audit rows of its
    /// calls hold tokens where the model's arguments held them, not the rehydrated values.
    pub vault: Option<std::sync::Arc<crate::pii::Vault>>,
}

impl Engine {
    /// Runs (or resumes) the run of `spec` to its end.
    pub async fn run(
        &self,
        spec: &RunSpec,
        cancel: &CancellationToken,
    ) -> Result<RunOutcome, RunError> {
        // A job killed after its run began to wait, retried once the run's resume job took it
        // over: its part is done (the run is reported as it stands, not driven twice).
        if let Some(job) = spec.job_id
            && spec.resume_job.is_some()
            && let Some(r) = crate::store::run_waits::handed_on(&self.pool, job).await?
        {
            return Ok(RunOutcome::from_row(&r));
        }
        let (run, reopened) = self.open_run(spec).await?;
        // A waiting run is resumed by its resume job (`wait.rs` decides whether it goes on).
        if !matches!(run.status, RunStatus::Running | RunStatus::Waiting) {
            return Ok(RunOutcome::from_row(&run));
        }
        let span = info_span!("agent.run", run_id = %run.id, kind = %spec.kind);
        // Every provider call of this run (the loop's and run_extraction's) is redacted.
        let mut engine = self.clone();
        // Innermost, every call is counted as sent (a tokenizer where the server omits usage).
        // Scoped to the org: its calls recorded per provider entry, made with its own key if it
        // stored one (a key that cannot be used fails the run with the reason).
        let scoped = crate::llm::org_keys::provider_for_org(
            &self.env.provider,
            &self.pool,
            self.env.org_key_cipher.as_deref(),
            spec.org_id,
            Some(run.id),
        )
        .await
        .map_err(|e| match e {
            crate::llm::org_keys::ScopeError::Db(e) => RunError::from(e),
            crate::llm::org_keys::ScopeError::Unusable(e) => round::provider_error(e),
        })?;
        let metered = metering::Metered::wrap(scoped, self.pool.clone(), run.id);
        // Then each call's span (the counted usage on it), behind the redaction boundary.
        let metered = crate::llm::traced::Traced::wrap(metered);
        (engine.env.provider, engine.vault) = crate::llm::redacting::provider_for_run(
            &self.pii,
            &self.pool,
            spec.org_id,
            run.id,
            metered,
        )
        .await?;
        // The run's provider calls count against its org's share of the fleet limits.
        crate::llm::limits::for_org(
            spec.org_id,
            engine.drive(spec, run, reopened, cancel).instrument(span),
        )
        .await
    }

    /// Marks a run failed (the job gave up), keeping what it did.
    pub async fn fail_run(&self, run_id: Uuid, error: &str) -> sqlx::Result<()> {
        runs::fail_run(&self.pool, run_id, error, self.clock.now()).await?;
        Ok(())
    }

    /// The run of `spec`'s job, and whether an earlier attempt opened it (`true`: a resume).
    async fn open_run(&self, spec: &RunSpec) -> sqlx::Result<(RunRow, bool)> {
        if let Some(job) = spec.job_id
            && let Some(r) = runs::run_for_job(&self.pool, job).await?
        {
            if !matches!(r.status, RunStatus::Failed | RunStatus::Cancelled) {
                return Ok((r, true));
            }
            // A dead job retried by an operator starts a fresh run; the failed one stays.
            runs::detach_from_job(&self.pool, r.id).await?;
        }
        let mut conn = self.pool.acquire().await?;
        runs::create_run(
            &mut conn,
            &NewRun {
                id: Uuid::now_v7(),
                org_id: spec.org_id,
                kind: &spec.kind,
                subject: &spec.subject,
                job_id: spec.job_id,
                provider: self.env.provider.name(),
                model: self.env.provider.model_for(&spec.model),
                started_at: self.clock.now(),
            },
        )
        .await
        .map(|r| (r, false))
    }

    async fn drive(
        &self,
        spec: &RunSpec,
        run: RunRow,
        reopened: bool,
        cancel: &CancellationToken,
    ) -> Result<RunOutcome, RunError> {
        let deadline = chrono::Duration::from_std(spec.caps.deadline).unwrap_or_default();
        // The run's checkpoints are read once; from then on the loop keeps what it writes in
        // memory (a stale copy cannot write: every checkpoint's `(run_id, seq)` is unique).
        let mut steps = crate::store::agent_loop::steps_and_marks(&self.pool, run.id).await?;
        // A resume: the time since the last checkpoint (or since the run was opened, when the
        // attempts before died ahead of its first checkpoint) was not spent on this run. Without
        // the mark, a run reopened with no checkpoint counted every earlier attempt's wait as
        // active time and was capped by its deadline at once (found by the chaos suite).
        let next = match steps.last() {
            Some(last) => Some(last.seq + 1),
            None => reopened.then_some(0),
        };
        if let Some(seq) = next {
            let mark = self.record_resume(run.id, seq).await?;
            steps.push(mark);
        }
        let mut tokens = run.counters.tokens() as u64;
        // The org's budget as this run's last charge left it, if nothing charged it since.
        let mut seen: Option<BudgetSeen> = None;
        // Recomputed only after a tool step (only tools make a goal's parts).
        let mut goal = goals::state(&self.pool, spec, run.id, self.clock.now()).await?;
        let tools = self.env.registry.specs(&spec.policy.allow);
        let first_message = self.first_message(spec).await?;
        let cx = round::RunCtx {
            spec,
            run_id: run.id,
            first_message: &first_message,
            tools: &tools,
            cancel,
        };
        // The span of the last round: the tool calls it asked for run under it.
        let mut round: Option<tracing::Span> = None;
        loop {
            if cancel.is_cancelled() {
                return Err(RunError::Cancelled);
            }
            #[cfg(debug_assertions)]
            self.check_memory(run.id, &steps).await?;
            let mut t = Transcript::from_steps(&steps, &self.env.registry)?;
            let now = self.clock.now();
            let state = next::State {
                t: &t,
                goal: goal.as_ref(),
                caps: &spec.caps,
                max_nudges: spec.settings.max_nudges,
                max_repeats: spec.settings.max_repeats,
                tokens,
                past_deadline: marks::active_time(run.started_at, &steps, now) >= deadline,
                constrained: round::constrained(self, spec, &t),
            };
            let due = match next::next_step(&state) {
                Next::Call(call) => {
                    // Under the round that asked for it (none on a resume: then the run's).
                    let parent = round.clone().unwrap_or_else(tracing::Span::current);
                    let w = self
                        .run_call(spec, run.id, &t, &call, goal.as_ref())
                        .instrument(parent)
                        .await?;
                    if w.charged {
                        seen = w.budget;
                    }
                    w.apply(&mut steps, &mut tokens);
                    goal = goals::state(&self.pool, spec, run.id, self.clock.now()).await?;
                    continue;
                }
                Next::Nudge { text, missing } => {
                    steps.push(
                        self.nudge(spec, run.id, t.next_seq, &text, &missing)
                            .await?,
                    );
                    continue;
                }
                Next::Finish(f) => match self.await_decisions(spec, run.id, &t, f).await? {
                    wait::Awaited::Finish(f) => return self.finish(run.id, f).await,
                    wait::Awaited::Wait(outcome) => return Ok(outcome),
                    wait::Awaited::Decided(step) => {
                        steps.push(step);
                        continue;
                    }
                },
                Next::Round(due) => due,
            };
            let org_budget = match seen.take() {
                Some(s) => s.at(now),
                None => runs::budget(&self.pool, spec.org_id, now).await?,
            };
            match due.given(org_budget, &t, goal.as_ref()) {
                Round::OutOfBudget(f) => {
                    if let Some(b) = &org_budget {
                        warn!(org_id = %spec.org_id, used = b.tokens_used, limit = b.monthly_limit, "org budget exhausted; provider call refused");
                    }
                    return self.finish(run.id, f).await;
                }
                Round::RecordCap(reason) => {
                    steps.push(self.record_cap(run.id, t.next_seq, reason).await?);
                }
                Round::Ask { capped } => {
                    let budgeted = org_budget.is_some();
                    let asked = self
                        .ask(
                            &cx,
                            &mut t,
                            goal.as_ref(),
                            capped,
                            budgeted,
                            now,
                            &mut round,
                        )
                        .await?;
                    match asked {
                        round::Asked::Written(w) => {
                            seen = w.budget;
                            w.apply(&mut steps, &mut tokens);
                        }
                        round::Asked::Finish(f) => return self.finish(run.id, f).await,
                    }
                }
            }
        }
    }

    /// The run's first message: the job's, with the document's intro (compact runs) and what
    /// people decided.
    async fn first_message(&self, spec: &RunSpec) -> Result<String, RunError> {
        let first_message = match spec.settings.compact {
            true => match context::document_intro(self, spec).await? {
                Some(intro) => format!("{}\n\n{intro}", spec.first_message),
                None => spec.first_message.clone(),
            },
            false => spec.first_message.clone(),
        };
        Ok(
            match decisions::block(&self.pool, spec, self.clock.now()).await? {
                Some(block) => format!("{first_message}\n\n{block}"),
                None => first_message,
            },
        )
    }

    /// Debug builds (every test) check that what the loop keeps in memory is what a resume
    /// would read back. Through a pooler in transaction mode a checkpoint written outside a
    /// transaction commits when its connection returns to the pool, a moment after the call
    /// (`db::pooling`): while the stored steps are a prefix of the remembered ones, the read
    /// is made again, for a few seconds at most.
    #[cfg(debug_assertions)]
    async fn check_memory(
        &self,
        run_id: Uuid,
        steps: &[crate::store::runs::StepRow],
    ) -> Result<(), RunError> {
        let key = |s: &crate::store::runs::StepRow| {
            (
                s.seq,
                s.kind.clone(),
                s.call_id.clone(),
                s.payload.clone(),
                s.created_at,
            )
        };
        let mem: Vec<_> = steps.iter().map(key).collect();
        let pooled = crate::db::pooling::is_pooled(&self.pool);
        let until = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        let db = loop {
            let stored = crate::store::agent_loop::steps_and_marks(&self.pool, run_id).await?;
            let db: Vec<_> = stored.iter().map(key).collect();
            let behind = db.len() < mem.len() && mem.starts_with(&db);
            if !(pooled && behind && tokio::time::Instant::now() < until) {
                break db;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        };
        assert_eq!(
            mem, db,
            "the loop's memory of run {run_id} differs from its checkpoints"
        );
        Ok(())
    }

    /// Runs (or refuses) one pending call: repaired arguments, the repeat guard, then the
    /// tool step.
    async fn run_call(
        &self,
        spec: &RunSpec,
        run_id: Uuid,
        t: &Transcript,
        call: &transcript::ToolCall,
        goal: Option<&goals::GoalState>,
    ) -> Result<Written, RunError> {
        let registry = &self.env.registry;
        let call = one_call::fill_pins(registry, goal, call);
        let (fixed, _notes) = guard::repaired(registry, &call);
        if spec.settings.compact
            && let Some(earlier) = guard::repeat_of(t, registry, &fixed.name, &fixed.args)
        {
            let next = goal
                .map(|g| g.next_step())
                .unwrap_or_else(|| "use the earlier result, or answer".into());
            return guard::refuse(self, spec, run_id, t.next_seq, &fixed, earlier, &next).await;
        }
        let over_calls = t.tool_calls >= spec.caps.max_tool_calls;
        step::execute_call(self, spec, run_id, t.next_seq, &fixed, t, over_calls)
            .instrument(info_span!("tool", name = %call.name, call_id = %call.id))
            .await
    }

    async fn finish(&self, run_id: Uuid, f: next::Finish) -> Result<RunOutcome, RunError> {
        let next::Finish {
            status,
            reason,
            text,
        } = f;
        let text = Some(text.as_str());
        let now = self.clock.now();
        let mut tx = self.pool.begin().await?;
        let changed = runs::finish_run(
            &mut *tx,
            run_id,
            status,
            Some(reason.as_str()),
            text,
            None,
            now,
        )
        .await?;
        let run = runs::get_run(&mut *tx, run_id)
            .await?
            .ok_or(sqlx::Error::RowNotFound)?;
        if changed && status == RunStatus::Capped {
            let actor = format!("agent:{}", run.kind);
            runs::insert_audit(
                &mut *tx,
                &runs::NewAudit {
                    outcome: Some(&json!({"rounds": run.counters.rounds, "tool_calls": run.counters.tool_calls, "tokens": run.counters.tokens()})),
                    ..runs::NewAudit::new(run.org_id, Some(run_id), &actor, reason.as_str(), runs::AuditCategory::Cap, runs::AuditDecision::Capped, now)
                },
            )
            .await?;
        }
        tx.commit().await?;
        if changed {
            metrics::counter!("agentd_agent_runs_total", "status" => status.to_string(), "stop_reason" => reason.as_str()).increment(1);
            info!(
                status = status.as_str(),
                stop_reason = reason.as_str(),
                rounds = run.counters.rounds,
                tool_calls = run.counters.tool_calls,
                "run finished"
            );
        }
        Ok(RunOutcome::from_row(&run))
    }
}

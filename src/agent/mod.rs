//! The tool loop: one engine for every job kind. Before each provider call the caps (rounds,
//! tool calls, tokens, deadline, refinements) and the org's monthly budget are checked; each
//! provider response and each tool result is a checkpoint committed in the same transaction as
//! the tool's side effects and its audit row, so a crashed run resumes from its last checkpoint
//! without repeating a provider call or re-executing a tool.

pub mod policy;
mod step;
pub mod transcript;

use crate::approvals::ToolEnv;
use crate::clock::SharedClock;
use crate::llm::{CompletionRequest, LlmError, Message, Role, ToolChoice};
use crate::store::runs::{self, NewRun, RunRow};
use chrono::NaiveDate;
use serde::Serialize;
use serde_json::json;
use sqlx::PgPool;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};
use transcript::Transcript;
use uuid::Uuid;

pub use policy::Policy;

/// Limits of one run.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    pub max_rounds: u32,
    pub max_tool_calls: u32,
    pub max_tokens: u64,
    pub deadline: Duration,
    pub max_refinements: u32,
}

/// Why a run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model answered without tool calls.
    Completed,
    MaxRounds,
    MaxToolCalls,
    MaxTokens,
    Deadline,
    MaxRefinements,
    /// The org's monthly token budget is used up.
    Budget,
}

impl StopReason {
    /// The name stored on the run.
    pub fn as_str(&self) -> &'static str {
        match self {
            StopReason::Completed => "completed",
            StopReason::MaxRounds => "max_rounds",
            StopReason::MaxToolCalls => "max_tool_calls",
            StopReason::MaxTokens => "max_tokens",
            StopReason::Deadline => "deadline",
            StopReason::MaxRefinements => "max_refinements",
            StopReason::Budget => "budget",
        }
    }
}

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
    /// For re-proposals: `(chain_id, depth)` given to the approvals this run proposes.
    pub chain: Option<(Uuid, i32)>,
}

/// How a run ended.
#[derive(Debug, Clone, Serialize)]
pub struct RunOutcome {
    pub run_id: Uuid,
    /// succeeded | capped | failed | cancelled
    pub status: String,
    pub stop_reason: Option<String>,
    pub final_text: Option<String>,
    pub error: Option<String>,
    pub rounds: i32,
    pub tool_calls: i32,
    pub tokens: i64,
}

impl RunOutcome {
    fn from_row(r: &RunRow) -> Self {
        Self {
            run_id: r.id,
            status: r.status.clone(),
            stop_reason: r.stop_reason.clone(),
            final_text: r.final_text.clone(),
            error: r.error.clone(),
            rounds: r.rounds,
            tool_calls: r.tool_calls,
            tokens: r.input_tokens + r.output_tokens,
        }
    }
}

/// Why a run could not go on (the job decides whether to retry).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("provider failed: {0}")]
    Provider(LlmError),
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
    #[error("cancelled (lease lost or shutting down); the run resumes from its last checkpoint")]
    Cancelled,
    #[error(transparent)]
    Checkpoint(#[from] transcript::CheckpointError),
}

impl RunError {
    /// Worth another attempt of the job.
    pub fn is_retryable(&self) -> bool {
        match self {
            RunError::Provider(e) => e.retryable,
            RunError::Db(_) | RunError::Cancelled => true,
            RunError::Checkpoint(_) => false,
        }
    }
}

/// The loop, with what it shares across runs.
#[derive(Clone)]
pub struct Engine {
    pub pool: PgPool,
    pub clock: SharedClock,
    pub env: ToolEnv,
}

impl Engine {
    /// Runs (or resumes) the run of `spec` to its end.
    pub async fn run(
        &self,
        spec: &RunSpec,
        cancel: &CancellationToken,
    ) -> Result<RunOutcome, RunError> {
        let run = self.open_run(spec).await?;
        if run.status != "running" {
            return Ok(RunOutcome::from_row(&run));
        }
        let span = info_span!("agent.run", run_id = %run.id, kind = %spec.kind);
        self.drive(spec, run, cancel).instrument(span).await
    }

    /// Marks a run failed (the job gave up), keeping what it did.
    pub async fn fail_run(&self, run_id: Uuid, error: &str) -> Result<(), sqlx::Error> {
        runs::finish_run(
            &self.pool,
            run_id,
            "failed",
            Some("error"),
            None,
            Some(error),
            self.clock.now(),
        )
        .await?;
        Ok(())
    }

    async fn open_run(&self, spec: &RunSpec) -> Result<RunRow, sqlx::Error> {
        if let Some(job) = spec.job_id
            && let Some(r) = runs::run_for_job(&self.pool, job).await?
        {
            if r.status != "failed" && r.status != "cancelled" {
                return Ok(r);
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
                model: &spec.model,
                started_at: self.clock.now(),
            },
        )
        .await
    }

    async fn drive(
        &self,
        spec: &RunSpec,
        run: RunRow,
        cancel: &CancellationToken,
    ) -> Result<RunOutcome, RunError> {
        let deadline =
            run.started_at + chrono::Duration::from_std(spec.caps.deadline).unwrap_or_default();
        let tools = self.env.registry.specs(&spec.policy.allow);
        loop {
            if cancel.is_cancelled() {
                return Err(RunError::Cancelled);
            }
            let steps = runs::steps(&self.pool, run.id).await?;
            let t = Transcript::from_steps(&steps)?;
            let current = runs::get_run(&self.pool, run.id)
                .await?
                .ok_or(sqlx::Error::RowNotFound)?;
            let tokens = (current.input_tokens + current.output_tokens) as u64;

            if !t.pending.is_empty() {
                for (i, call) in t.pending.iter().enumerate() {
                    if cancel.is_cancelled() {
                        return Err(RunError::Cancelled);
                    }
                    let over_calls = t.tool_calls + i as u32 >= spec.caps.max_tool_calls;
                    step::execute_call(
                        self,
                        spec,
                        run.id,
                        t.next_seq + i as i32,
                        call,
                        &t,
                        over_calls,
                    )
                    .instrument(info_span!("tool", name = %call.1, call_id = %call.0))
                    .await?;
                }
                continue;
            }
            if t.summary_done {
                return self
                    .finish(
                        run.id,
                        "capped",
                        StopReason::MaxRounds,
                        t.final_text.as_deref(),
                    )
                    .await;
            }
            if let Some(text) = &t.final_text {
                return self
                    .finish(run.id, "succeeded", StopReason::Completed, Some(text))
                    .await;
            }
            if t.refinements > spec.caps.max_refinements {
                return self
                    .finish(run.id, "capped", StopReason::MaxRefinements, None)
                    .await;
            }
            let now = self.clock.now();
            let capped = if now >= deadline {
                Some(StopReason::Deadline)
            } else if tokens >= spec.caps.max_tokens {
                Some(StopReason::MaxTokens)
            } else if t.tool_calls >= spec.caps.max_tool_calls {
                Some(StopReason::MaxToolCalls)
            } else {
                None
            };
            if let Some(reason) = capped {
                return self.finish(run.id, "capped", reason, None).await;
            }
            if let Some(b) = runs::budget(&self.pool, spec.org_id, now).await?
                && b.tokens_used >= b.monthly_limit
            {
                warn!(org_id = %spec.org_id, used = b.tokens_used, limit = b.monthly_limit, "org budget exhausted; provider call refused");
                return self
                    .finish(run.id, "capped", StopReason::Budget, None)
                    .await;
            }
            // The round cap: one last call without tools so the run ends with a summary.
            let summary = t.rounds >= spec.caps.max_rounds;
            let mut messages = vec![
                Message::text(Role::System, &spec.system_prompt),
                Message::text(Role::User, &spec.first_message),
            ];
            messages.extend(t.messages.iter().cloned());
            if summary {
                messages.push(Message::text(
                    Role::User,
                    "The round limit is reached. Do not call tools; summarise what you did and what is left.",
                ));
            }
            let req = CompletionRequest {
                model: spec.model.clone(),
                messages,
                tools: if summary { Vec::new() } else { tools.clone() },
                tool_choice: if summary {
                    ToolChoice::None
                } else {
                    ToolChoice::Auto
                },
                max_tokens: Some(4096),
                response_format: None,
            };
            let span = info_span!("agent.round", n = t.rounds + 1);
            // Raced with the token: a lost lease or a cancel stops the call (issue 12, item 5).
            let call = async { self.env.provider.complete(req).await }.instrument(span);
            let resp = tokio::select! {
                r = call => r,
                _ = cancel.cancelled() => return Err(RunError::Cancelled),
            }
            .map_err(|e| {
                    metrics::counter!("agentd_provider_errors_total", "provider" => e.provider.clone(), "retryable" => e.retryable.to_string()).increment(1);
                    RunError::Provider(e)
                })?;
            let mut resp = resp;
            if summary {
                // tool_choice none: a server that still sends calls gets them dropped.
                resp.message
                    .content
                    .retain(|b| matches!(b, crate::llm::Block::Text { .. }));
            }
            step::checkpoint_response(self, spec, run.id, t.next_seq, t.rounds, resp, summary)
                .await?;
        }
    }

    async fn finish(
        &self,
        run_id: Uuid,
        status: &str,
        reason: StopReason,
        text: Option<&str>,
    ) -> Result<RunOutcome, RunError> {
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
        if changed && status == "capped" {
            runs::insert_audit(
                &mut *tx,
                &runs::NewAudit {
                    org_id: run.org_id,
                    run_id: Some(run_id),
                    call_id: None,
                    actor: &format!("agent:{}", run.kind),
                    tool: reason.as_str(),
                    category: "cap",
                    decision: "capped",
                    args: None,
                    outcome: Some(&json!({"rounds": run.rounds, "tool_calls": run.tool_calls, "tokens": run.input_tokens + run.output_tokens})),
                    is_error: false,
                    duration_ms: 0,
                    tokens: 0,
                    now,
                },
            )
            .await?;
        }
        tx.commit().await?;
        if changed {
            metrics::counter!("agentd_agent_runs_total", "status" => status.to_string(), "stop_reason" => reason.as_str()).increment(1);
            info!(
                status,
                stop_reason = reason.as_str(),
                rounds = run.rounds,
                tool_calls = run.tool_calls,
                "run finished"
            );
        }
        Ok(RunOutcome::from_row(&run))
    }
}

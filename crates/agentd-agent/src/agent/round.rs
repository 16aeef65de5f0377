//! One provider call of the loop: the request (stable prefix, compacted history, working state,
//! the right `tool_choice`), the call with one hinted retry when the server could not parse
//! the model's output, tool calls written as text recovered, and tokens counted with a
//! tokenizer when the provider sent no usage. Failed calls after generation are charged too.

use super::goals::GoalState;
use super::next::Finish;
use super::transcript::Transcript;
use super::{
    Engine, RunError, RunSpec, StopReason, Written, budget, constrain, context, guard, one_call,
    review, step, summary,
};
use crate::config::Constrained;
use crate::llm::schema_output::{self, Unconstrained};
use crate::llm::{
    CompletionRequest, CompletionResponse, FinishReason, LlmError, Message, Role, ToolChoice,
    ToolSpec, textcalls, tokens,
};
use crate::store::agent_loop;
use crate::store::budget::Reservation;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, warn};
use uuid::Uuid;

/// Appended (once) when the server could not parse what the model generated.
pub const PARSE_HINT: &str = "Your previous answer could not be parsed by the server. Answer \
    again: either plain text, or exactly one tool call with arguments that are one valid JSON \
    object (double quotes, no comments, no trailing commas).";

/// Builds the request of the next round. `cap` is set for the forced summary.
pub fn build(
    engine: &Engine,
    spec: &RunSpec,
    first_message: &str,
    t: &mut Transcript,
    all_tools: &[ToolSpec],
    goal: Option<&GoalState>,
    cap: Option<StopReason>,
) -> CompletionRequest {
    let s = &spec.settings;
    let mut messages = vec![
        Message::text(Role::System, &spec.system_prompt),
        Message::text(Role::User, first_message),
    ];
    if s.compact {
        guard::annotate_repairs(t, &engine.env.registry);
        let text_shown = spec.document_id.is_some() && first_message.contains("<document>");
        context::compact(
            &mut t.messages,
            &t.history,
            t.rounds.saturating_sub(1),
            text_shown,
            goal.is_some_and(|g| g.names_what_calls_made()),
        );
    }
    messages.extend(t.messages.iter().cloned());
    if s.compact
        && let Some(g) = goal
    {
        messages.push(guard::state_message(g.block()));
    }
    if let Some(reason) = cap {
        messages.push(Message::text(Role::User, summary::instruction(reason)));
    }
    let read = context::shows_excerpt(first_message);
    let tools = context::offered(all_tools, spec, goal, &engine.env.registry, read);
    let unmet = goal.is_some_and(|g| !g.met());
    let tool_choice = if cap.is_some() {
        ToolChoice::None
    } else if s.compact && unmet && s.tool_choice_required && !tools.is_empty() {
        ToolChoice::Required
    } else {
        ToolChoice::Auto
    };
    let response_format = if constrained(engine, spec, t) && tool_choice == ToolChoice::Required {
        let candidates = crate::analysis::names_in_brief(first_message);
        constrain::call_format(
            &tools,
            &engine.env.registry,
            goal,
            spec.document_id,
            &candidates,
        )
        .map(|mut f| {
            constrain::offer_documents(&mut f, &constrain::overview_signals(&t.history));
            f
        })
    } else {
        None
    };
    // The output cap fits the call asked for: a required call of a tool without arguments
    // needs a few tokens, not the general cap.
    let max_tokens = match tool_choice == ToolChoice::Required
        && constrain::all_without_arguments(&tools, &engine.env.registry)
    {
        true => s
            .max_output_tokens
            .min(constrain::NO_ARGUMENTS_OUTPUT_TOKENS),
        false => s.max_output_tokens,
    };
    CompletionRequest {
        model: spec.model.clone(),
        messages,
        tools,
        tool_choice,
        max_tokens: Some(max_tokens),
        response_format,
    }
}

/// Whether this run's next rounds that require a call are constrained — the one place that
/// says so: not after a constrained round of the run went without its format (`t`), and then
/// as `llm.constrained_calls` says: on, off, or "auto": while the endpoint the run's model is
/// called at has neither refused nor ignored a constrained round (`llm::schema_output`).
pub fn constrained(engine: &Engine, spec: &RunSpec, t: &Transcript) -> bool {
    if t.unconstrained {
        return false;
    }
    match spec.settings.constrained_calls {
        Constrained::On => true,
        Constrained::Off => false,
        Constrained::Auto => engine
            .env
            .provider
            .endpoint(&spec.model)
            .is_some_and(|e| schema_output::constrains(e, &spec.model)),
    }
}

/// The span of round `round` (0-based): its provider calls, then the tool calls it asked for
/// (`Engine::run_call` opens theirs under it), until the next round.
pub fn span(round: u32) -> tracing::Span {
    tracing::info_span!("agent.round", n = round + 1, hinted = false)
}

/// Calls the provider for `req`; on an unparsed-output error retries once with [`PARSE_HINT`].
/// Returns the answer with usage filled in (estimated when the provider sent none), and whether
/// the round went without its constrained format: `plain`, the round as it is without
/// constrained calls, is asked instead when the endpoint refuses the `response_format` (else
/// `req` without its format); an answer outside the format with no tool call
/// ([`constrain::ignored`]) is returned as such, for the loop to discard and ask the round
/// again unconstrained (a new call, reserved on the budget as any round). Both are remembered
/// for the endpoint ([`schema_output::fell_back`]).
pub async fn call(
    engine: &Engine,
    spec: &RunSpec,
    run_id: Uuid,
    mut req: CompletionRequest,
    mut plain: Option<CompletionRequest>,
) -> Result<(CompletionResponse, Option<Unconstrained>), LlmError> {
    let mut hinted = false;
    let mut unconstrained = None;
    loop {
        let result = engine.env.provider.complete(req.clone()).await;
        match result {
            Ok(mut resp) => {
                if one_call::split(&req, &mut resp) == 0
                    && review::split(&req, &mut resp) == 0
                    && req.tool_choice != ToolChoice::None
                {
                    // Any tool of the job counts, also one this round did not offer (guided).
                    let n = textcalls::recover(&mut resp, &spec.policy.allow);
                    if n > 0 {
                        metrics::counter!("agentd_text_tool_calls_total").increment(n as u64);
                    }
                }
                if resp.usage.total() == 0 {
                    resp.usage = tokens::estimate(&req, &resp.message);
                    if let Err(e) = agent_loop::mark_estimated(&engine.pool, run_id).await {
                        warn!(error = %e, "could not mark the run's tokens as estimated");
                    }
                }
                if constrain::ignored(&req, &resp) {
                    // An answer cut at the output cap says nothing about the server's grammar.
                    let remember = resp.finish != FinishReason::MaxTokens;
                    schema_output::fell_back(
                        engine.env.provider.endpoint(&req.model),
                        engine.env.provider.name(),
                        &req.model,
                        Unconstrained::Ignored,
                        remember,
                    );
                    return Ok((resp, Some(Unconstrained::Ignored)));
                }
                return Ok((resp, unconstrained));
            }
            Err(e) => {
                metrics::counter!("agentd_provider_errors_total", "provider" => e.provider.clone(), "retryable" => e.retryable.to_string()).increment(1);
                if e.after_generation() {
                    charge_failed(engine, spec, run_id, &req).await;
                }
                // A server that refuses the response_format is told apart from one that fails,
                // remembered, and asked the same round again without it.
                if req.response_format.is_some() && schema_output::is_refusal(&e) {
                    schema_output::fell_back(
                        engine.env.provider.endpoint(&req.model),
                        &e.provider,
                        &req.model,
                        Unconstrained::Refused,
                        true,
                    );
                    unconstrained = Some(Unconstrained::Refused);
                    match plain.take() {
                        Some(p) => req = p,
                        None => req.response_format = None,
                    }
                    continue;
                }
                if hinted || !e.is_unparsed_output() {
                    return Err(e);
                }
                warn!(error = %e, "the server could not parse the model's output; one retry with a hint");
                hinted = true;
                // The round's span (see `span`) says its answer needed the hint.
                tracing::Span::current().record("hinted", true);
                req.messages.push(Message::text(Role::User, PARSE_HINT));
            }
        }
    }
}

/// Charges the estimated input of a call that failed after the model generated.
async fn charge_failed(engine: &Engine, spec: &RunSpec, run_id: Uuid, req: &CompletionRequest) {
    let usage = crate::llm::Usage {
        input_tokens: tokens::request(req),
        ..Default::default()
    };
    let add = crate::llm::budget::charge(&engine.env.prices, &[&req.model], &usage);
    let now = engine.clock.now();
    let charged = async {
        let mut tx = engine.pool.begin().await?;
        let warned =
            agent_loop::charge_failed_call(&mut tx, spec.org_id, run_id, &add, now).await?;
        tx.commit().await?;
        Ok::<_, sqlx::Error>(warned)
    }
    .await;
    match charged {
        Ok(Some((used, limit))) => {
            warn!(org_id = %spec.org_id, used, limit, "org token budget is 80% used this month")
        }
        Ok(None) => {}
        Err(e) => warn!(error = %e, "could not charge a failed call's tokens"),
    }
}

/// Provider failures end the round as before.
pub fn provider_error(e: LlmError) -> RunError {
    RunError::Provider(e)
}

/// What a run keeps for every round: its spec, id, first message, tools and cancel token.
pub(super) struct RunCtx<'a> {
    pub spec: &'a RunSpec,
    pub run_id: Uuid,
    pub first_message: &'a str,
    pub tools: &'a [ToolSpec],
    pub cancel: &'a CancellationToken,
}

/// How a round ended: its checkpoint written, or the run's end.
pub(super) enum Asked {
    Written(Written),
    Finish(Finish),
}

impl Engine {
    /// The properties of the run's schema (the goal's), for the review's format; empty when
    /// the run has none or it is gone.
    async fn schema_properties(
        &self,
        spec: &RunSpec,
        goal: Option<&GoalState>,
    ) -> Result<serde_json::Map<String, serde_json::Value>, RunError> {
        let Some((id, version)) = goal
            .and_then(|g| g.schema.as_deref())
            .and_then(crate::tools::split_revid)
        else {
            return Ok(Default::default());
        };
        let mut conn = self.pool.acquire().await?;
        let schema = crate::store::schemas::get(&mut conn, spec.org_id, id, version).await?;
        Ok(schema
            .and_then(|s| {
                crate::tools::schemas::inner_schema(&s.response_format)
                    .get("properties")
                    .and_then(serde_json::Value::as_object)
                    .cloned()
            })
            .unwrap_or_default())
    }

    /// One provider round: the request built and fitted to the context window, shaped as the
    /// one call where it applies, its estimate reserved against the org's budget (`budgeted`:
    /// the org has one), the call raced with the cancel token, and its answer checkpointed.
    /// `capped`: the forced summary of that cap, whose failure ends the run with a summary
    /// built from its records. `round` becomes this round's span.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn ask(
        &self,
        cx: &RunCtx<'_>,
        t: &mut Transcript,
        goal: Option<&GoalState>,
        capped: Option<StopReason>,
        budgeted: bool,
        now: chrono::DateTime<chrono::Utc>,
        round: &mut Option<tracing::Span>,
    ) -> Result<Asked, RunError> {
        let (spec, run_id) = (cx.spec, cx.run_id);
        let mut req = build(self, spec, cx.first_message, t, cx.tools, goal, capped);
        if let Err(msg) = context::fit(&mut req, spec.settings.context_window_tokens) {
            return Err(provider_error(LlmError::new(
                self.env.provider.name(),
                msg,
                false,
            )));
        }
        // The one call for the schema and the prompt; `plain` is the round without it.
        let plain = match req.tool_choice == ToolChoice::Required
            && one_call::applies(spec, constrained(self, spec, t), goal, t, cx.first_message)
        {
            true => {
                let mut plain = req.clone();
                plain.response_format = None;
                let candidates = crate::analysis::parse_brief(cx.first_message);
                one_call::shape(&mut req, &self.env.registry, &candidates);
                Some(plain)
            }
            false => match review::flags(spec, constrained(self, spec, t), goal, t) {
                // The review of flagged values: a short brief in place of the round.
                Some(flags) => {
                    let mut plain = req.clone();
                    plain.response_format = None;
                    let properties = self.schema_properties(spec, goal).await?;
                    req = review::request(&req, &flags, &properties);
                    Some(plain)
                }
                None => None,
            },
        };
        // Reserve the call's estimate against the org budget; settled at the checkpoint. An
        // org without a budget (just read) has nothing to reserve against.
        let reservation = match budgeted {
            false => Reservation::Unlimited,
            true => budget::reserve(&self.pool, spec.org_id, &req, now).await?,
        };
        if matches!(reservation, Reservation::Refused { .. }) {
            return Ok(Asked::Finish(Finish::capped(
                StopReason::Budget,
                None,
                t,
                goal,
            )));
        }
        // Raced with the token: a lost lease or a cancel stops the call (issue 12, item 5).
        let this_round = span(t.rounds);
        *round = Some(this_round.clone());
        let resp = tokio::select! {
            r = call(self, spec, run_id, req, plain).instrument(this_round.clone()) => r,
            _ = cx.cancel.cancelled() => {
                budget::release(&self.pool, &reservation).await;
                return Err(RunError::Cancelled);
            }
        };
        if resp.is_err() {
            budget::release(&self.pool, &reservation).await;
        }
        let (resp, unconstrained) = match (resp, capped) {
            (Ok(r), _) => r,
            (Err(e), Some(reason)) => {
                // The summary is a courtesy: the run ends with one built from its records.
                warn!(error = %e, "the forced summary failed; using the run's records");
                return Ok(Asked::Finish(Finish::capped(reason, None, t, goal)));
            }
            (Err(e), None) => return Err(provider_error(e)),
        };
        let w = step::checkpoint_response(
            self,
            spec,
            run_id,
            (t.next_seq, t.rounds),
            resp,
            (capped.is_some(), unconstrained),
            &reservation,
            spec.caps.max_tool_calls.saturating_sub(t.tool_calls),
        )
        .instrument(this_round)
        .await?;
        Ok(Asked::Written(w))
    }
}

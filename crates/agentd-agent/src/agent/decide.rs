//! Deciding what becomes of one tool call, before anything is written: [`refused`] (over the call
//! cap, a tool the job does not offer, arguments that do not validate) and [`plan`] (the job's
//! policy, the run's subject, the refinement and failed-extraction caps). `step.rs` applies the
//! decision: execute, propose or deny, with the audit row and the checkpoint.

use super::step::Decided;
use super::transcript::Transcript;
use super::{Engine, RunError, RunSpec};
use crate::catalog::PolicyDecision;
use crate::store::documents::bounded_error;
use crate::store::runs::{self, AuditCategory, AuditDecision};
use crate::tools::registry::CallError;
use crate::tools::{Category, Registry, Tool, ToolCtx, ToolError, scope};
use serde_json::{Value, json};

/// Whether a valid call of `tool` may write anything besides its audit row and checkpoint. A
/// read tool the policy runs unasked may not: [`plan`] denies a read off the run's subject,
/// never proposes it, and read tools write nothing (no follow-up either). Such a step needs
/// no transaction (`step_conn`).
pub(super) fn may_write(spec: &RunSpec, tool: &dyn Tool) -> bool {
    let category = tool.category();
    category != Category::Read
        || tool.calls_model()
        || spec.policy.decide(tool.name(), category) != PolicyDecision::Auto
}

/// What the policy, the subject and the caps make of a valid call.
pub(super) enum Plan {
    Done(Decided),
    /// Store as a pending approval (with the off-subject reason, if that is why).
    Propose(Option<String>),
    Auto,
    /// Auto, through prepare → model call → checkpoint → apply.
    Model,
}

/// A call that cannot run at all: over the run's call cap, a tool the job does not offer, or
/// arguments that do not parse or validate. `Ok`: the tool and its valid arguments.
pub(super) fn refused<'a>(
    spec: &RunSpec,
    name: &str,
    tool: Option<&'a std::sync::Arc<dyn Tool>>,
    args: &'a Result<Value, CallError>,
    over_call_cap: bool,
) -> Result<(&'a dyn Tool, &'a Value), Decided> {
    if over_call_cap {
        return Err(Decided::error(
            AuditCategory::Cap,
            AuditDecision::Capped,
            format!(
                "not executed: the tool call limit of this run ({}) is reached",
                spec.caps.max_tool_calls
            ),
        ));
    }
    let Some(tool) = tool else {
        let offered = spec.policy.allow.join(", ");
        return Err(Decided::error(
            AuditCategory::Unknown,
            AuditDecision::Error,
            format!(
                "unknown tool `{}`; the tools you can call are: {offered}",
                bounded_error(&name.chars().take(100).collect::<String>())
            ),
        ));
    };
    let valid = match args {
        Ok(a) => Registry::validate(tool.as_ref(), a)
            .map(|()| a)
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    valid.map(|a| (tool.as_ref(), a)).map_err(|msg| {
        Decided::error(
            tool.category().into(),
            AuditDecision::Error,
            format!("{msg}. Fix the arguments and call `{name}` again."),
        )
    })
}

/// What the policy, the subject and the caps make of a valid call (deciding only: nothing is
/// written).
pub(super) async fn plan(
    engine: &Engine,
    ctx: &mut ToolCtx<'_>,
    spec: &RunSpec,
    t: &Transcript,
    tool: &dyn Tool,
    args: &Value,
) -> Result<Plan, RunError> {
    let name = tool.name();
    let category = tool.category();
    let cat = AuditCategory::from(category);
    let mut decision = spec.policy.decide(name, category);
    let mut off = None;
    match scope::check(ctx, tool, args).await {
        Ok(()) => {}
        Err(ToolError::Db(e)) => return Err(e.into()),
        Err(e) => {
            off = Some(e.to_string());
            let propose = engine.env.subject_policy.off_subject != PolicyDecision::Deny;
            decision = if category == Category::Read || decision == PolicyDecision::Deny || !propose
            {
                PolicyDecision::Deny
            } else {
                PolicyDecision::Propose
            };
        }
    }
    match decision {
        PolicyDecision::Deny => {
            let mut d = match &off {
                Some(reason) => Decided::error(
                    cat,
                    AuditDecision::Denied,
                    format!("refused: {reason}; do not call it again for that"),
                ),
                None => Decided::error(
                    cat,
                    AuditDecision::Denied,
                    format!(
                        "refused: the policy of this job denies `{name}` ({} tools); do not call it again",
                        category.as_str()
                    ),
                ),
            };
            if off.is_some() {
                d.outcome["off_subject"] = json!(true);
            }
            Ok(Plan::Done(d))
        }
        PolicyDecision::Propose => Ok(Plan::Propose(off)),
        PolicyDecision::Auto => {
            let failed = if tool.calls_model() {
                let run = ctx.run_id.unwrap_or_default();
                runs::failed_model_answers(ctx.conn, run, name).await? as u32
            } else {
                0
            };
            let max_failed = engine.env.max_failed_extractions;
            if tool.calls_model() && failed >= max_failed {
                return Ok(Plan::Done(Decided::error(
                    cat,
                    AuditDecision::Capped,
                    format!(
                        "not executed: the extraction model's answer failed {failed} time(s) in \
                         this run (max_failed_extractions = {max_failed}); finish with what you have"
                    ),
                )));
            }
            // A paid-for failed answer counts as a refinement like a successful redo.
            let earlier = t.successes.get(name).copied().unwrap_or(0) + failed;
            if tool.refines().counts(earlier) && t.refinements + failed >= spec.caps.max_refinements
            {
                return Ok(Plan::Done(Decided::error(
                    cat,
                    AuditDecision::Capped,
                    format!(
                        "not executed: the refinement limit of this run ({}) is reached; finish with what you have",
                        spec.caps.max_refinements
                    ),
                )));
            }
            Ok(if tool.calls_model() {
                Plan::Model
            } else {
                Plan::Auto
            })
        }
    }
}

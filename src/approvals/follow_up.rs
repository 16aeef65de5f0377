//! Follow-up actions (a suggestion's `proposed_action`) become pending approvals only when the
//! job may use the tool at all: it must be in the kind's allow-list, not denied by its policy,
//! valid, and its arguments must stay on the follow-up's subject (the suggestion's document).

use super::{ProposalOrigin, propose};
use crate::agent::Policy;
use crate::catalog::PolicyDecision;
use crate::tools::{FollowUp, Registry, ToolCtx, ToolError, scope};
use uuid::Uuid;

/// Proposes `f` for a person: `Ok(Ok(approval_id))`, or `Ok(Err(reason))` when the action is
/// refused (the reason goes back to the model; nothing is stored). Database errors are `Err`.
pub async fn propose_follow_up(
    ctx: &mut ToolCtx<'_>,
    registry: &Registry,
    policy: &Policy,
    f: &FollowUp,
    origin: ProposalOrigin<'_>,
) -> Result<Result<Uuid, String>, sqlx::Error> {
    let name = f.tool.as_str();
    let Some(tool) = registry.get(name).cloned() else {
        return Ok(Err(format!(
            "unknown tool `{name}`: the action was not proposed"
        )));
    };
    if !policy.allows(name) {
        return Ok(Err(format!(
            "`{name}` is not one of the tools this job may use ({}): the action was not proposed",
            policy.allow.join(", ")
        )));
    }
    if policy.decide(name, tool.category()) == PolicyDecision::Deny {
        return Ok(Err(format!(
            "the policy of this job denies `{name}`: the action was not proposed"
        )));
    }
    if let Err(e) = Registry::validate(tool.as_ref(), &f.args) {
        return Ok(Err(format!("{e}: the action was not proposed")));
    }
    // The action is checked (and its document_id defaulted) against the suggestion's subject.
    let saved = (ctx.subject, ctx.document_id);
    ctx.subject = f.subject;
    if let scope::Subject::Suggestion { document_id } = f.subject {
        ctx.document_id = document_id;
    }
    let checked = scope::check(ctx, tool.as_ref(), &f.args).await;
    let outcome = match checked {
        Err(ToolError::Db(e)) => Err(e),
        Err(e) => Ok(Err(format!("{e}: the action was not proposed"))),
        Ok(()) => proposed(ctx, tool.as_ref(), f, origin).await,
    };
    (ctx.subject, ctx.document_id) = saved;
    outcome
}

async fn proposed(
    ctx: &mut ToolCtx<'_>,
    tool: &dyn crate::tools::Tool,
    f: &FollowUp,
    origin: ProposalOrigin<'_>,
) -> Result<Result<Uuid, String>, sqlx::Error> {
    let origin = ProposalOrigin {
        suggestion_id: f.suggestion_id,
        ..origin
    };
    match ctx
        .savepoint(async |c| propose(c, tool, &f.args, origin).await)
        .await?
    {
        Ok(id) => Ok(Ok(id)),
        Err(ToolError::Db(e)) => Err(e),
        Err(e) => Ok(Err(e.to_string())),
    }
}

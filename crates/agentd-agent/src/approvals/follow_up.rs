//! Follow-up actions (a suggestion's `proposed_action`) become pending approvals only when the
//! job may use the tool at all: it must be in the kind's allow-list, not denied by its policy,
//! valid, and its arguments must stay on the follow-up's subject (the suggestion's document).

use super::{ProposalOrigin, propose};
use crate::catalog::PolicyDecision;
use crate::tools::policy::Policy;
use crate::tools::{FollowUp, Registry, ToolCtx, ToolError, scope};
use uuid::Uuid;

/// Why a follow-up action was not proposed (nothing is stored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The registry has no such tool.
    UnknownTool,
    /// The job's allow-list does not name it.
    NotAllowed,
    /// The job's policy denies it.
    Denied,
    /// Its arguments fail the tool's schema.
    InvalidArgs,
    /// Its arguments leave the follow-up's subject.
    OutOfScope,
    /// The tool refused to be proposed (e.g. it has no snapshot).
    NotProposable,
}

/// A refused follow-up: why, and the reason in words, which goes back to the model (its
/// `Display`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct NotProposed {
    pub why: Refusal,
    reason: String,
}

impl NotProposed {
    fn new(why: Refusal, reason: impl std::fmt::Display) -> Self {
        Self {
            why,
            reason: format!("{reason}: the action was not proposed"),
        }
    }
}

/// Proposes `f` for a person: `Ok(Ok(approval_id))`, or `Ok(Err(why))` when the action is
/// refused (the reason goes back to the model; nothing is stored). Database errors are `Err`.
pub async fn propose_follow_up(
    ctx: &mut ToolCtx<'_>,
    registry: &Registry,
    policy: &Policy,
    f: &FollowUp,
    origin: ProposalOrigin<'_>,
) -> sqlx::Result<Result<Uuid, NotProposed>> {
    let name = f.tool.as_str();
    let Some(tool) = registry.get(name).cloned() else {
        let unknown = format!("unknown tool `{name}`");
        return Ok(Err(NotProposed::new(Refusal::UnknownTool, unknown)));
    };
    if !policy.allows(name) {
        let allowed = policy.allow.join(", ");
        let not_allowed = format!("`{name}` is not one of the tools this job may use ({allowed})");
        return Ok(Err(NotProposed::new(Refusal::NotAllowed, not_allowed)));
    }
    if policy.decide(name, tool.category()) == PolicyDecision::Deny {
        let denied = format!("the policy of this job denies `{name}`");
        return Ok(Err(NotProposed::new(Refusal::Denied, denied)));
    }
    if let Err(e) = Registry::validate(tool.as_ref(), &f.args) {
        return Ok(Err(NotProposed::new(Refusal::InvalidArgs, e)));
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
        Err(e) => Ok(Err(NotProposed::new(Refusal::OutOfScope, e))),
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
) -> sqlx::Result<Result<Uuid, NotProposed>> {
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
        Err(e) => Ok(Err(NotProposed {
            why: Refusal::NotProposable,
            reason: e.to_string(),
        })),
    }
}

//! The audit row and the event of a consequential act through the API (review D5): a reviewer
//! accepting or rejecting a proposal, an admin making or revoking a key, setting or removing the
//! org's provider key, adding or removing a webhook, changing settings, pausing or resuming a
//! kind, cancelling a job or retrying dead ones. Written on the connection of the act's own
//! transaction, so the trail holds an act exactly when it took effect.
//!
//! The row's actor is the key (`key <id>`), its tool the act's name, its arguments what the act
//! was about — ids, a role, the names of changed settings — never a secret (the provider key's
//! value, a webhook's secret) and never document text.

use super::auth::Caller;
use crate::store::events::{self, EventType, NewEvent};
use crate::store::runs::{self, AuditCategory, AuditDecision, NewAudit};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sqlx::PgConnection;
use uuid::Uuid;

/// An act, by its audited name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    AcceptProposal,
    RejectProposal,
    AddProposalField,
    CreateKey,
    RevokeKey,
    SetProviderKey,
    DeleteProviderKey,
    CreateWebhook,
    DeleteWebhook,
    UpdateSettings,
    PauseQueue,
    ResumeQueue,
    CancelJob,
    RetryDeadJobs,
    CancelDeadJobs,
}

impl Act {
    /// The name on the audit row (`tool`) and in the event (`action`).
    pub fn as_str(self) -> &'static str {
        match self {
            Act::AcceptProposal => "accept_proposal",
            Act::RejectProposal => "reject_proposal",
            Act::AddProposalField => "add_proposal_field",
            Act::CreateKey => "create_api_key",
            Act::RevokeKey => "revoke_api_key",
            Act::SetProviderKey => "set_provider_key",
            Act::DeleteProviderKey => "delete_provider_key",
            Act::CreateWebhook => "create_webhook",
            Act::DeleteWebhook => "delete_webhook",
            Act::UpdateSettings => "update_settings",
            Act::PauseQueue => "pause_queue",
            Act::ResumeQueue => "resume_queue",
            Act::CancelJob => "cancel_job",
            Act::RetryDeadJobs => "retry_dead_jobs",
            Act::CancelDeadJobs => "cancel_dead_jobs",
        }
    }

    /// Its audit category, decision and event type.
    fn filed(self) -> (AuditCategory, AuditDecision, EventType) {
        match self {
            Act::AcceptProposal => (
                AuditCategory::Document,
                AuditDecision::HumanApproved,
                EventType::ProposalAccepted,
            ),
            Act::RejectProposal => (
                AuditCategory::Document,
                AuditDecision::HumanRejected,
                EventType::ProposalRejected,
            ),
            _ => (
                AuditCategory::Admin,
                AuditDecision::Performed,
                EventType::AdminChanged,
            ),
        }
    }
}

/// The actor of a request's acts.
pub fn actor(caller: &Caller) -> String {
    format!("key {}", caller.key_id)
}

/// Appends the audit row and writes the event of `act` by `caller` about `subject` (the
/// document, key, webhook or run; none for the org itself), with `about` (ids, names, counts:
/// no secret, no text) as the row's arguments and the event's payload beside `action` and `by`.
pub async fn record(
    conn: &mut PgConnection,
    caller: &Caller,
    act: Act,
    subject: Option<Uuid>,
    about: Value,
    now: DateTime<Utc>,
) -> sqlx::Result<()> {
    record_by(
        conn,
        caller.org_id,
        &actor(caller),
        act,
        subject,
        about,
        now,
    )
    .await
}

/// [`record`] for an actor other than a key (`agentd documents accept` by a person at the CLI).
pub async fn record_by(
    conn: &mut PgConnection,
    org_id: Uuid,
    by: &str,
    act: Act,
    subject: Option<Uuid>,
    about: Value,
    now: DateTime<Utc>,
) -> sqlx::Result<()> {
    let (category, decision, event) = act.filed();
    let audit = NewAudit {
        args: Some(&about),
        ..NewAudit::new(org_id, None, by, act.as_str(), category, decision, now)
    };
    runs::insert_audit(&mut *conn, &audit).await?;
    let mut payload = json!({"action": act.as_str(), "by": by});
    if let (Some(p), Value::Object(extra)) = (payload.as_object_mut(), about) {
        for (k, v) in extra {
            p.entry(k).or_insert(v);
        }
    }
    events::emit(
        conn,
        &NewEvent {
            org_id,
            kind: event,
            subject_id: subject,
            occurred_at: now,
            payload: &payload,
            dedupe_key: None,
        },
    )
    .await?;
    Ok(())
}

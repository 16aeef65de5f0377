//! Tools of the `suggestions` group: `org_overview` (the org's state as counts and signals,
//! computed in SQL) and `create_suggestion` (unique per org, kind, subject and night; capped
//! per org per night).

use super::documents::document_not_found;
use super::schemas::params;
use super::{Category, Registry, Tool, ToolCtx, ToolError, opt_uuid};
use crate::store::documents;
use crate::store::suggestions::{self as store, Created, NewSuggestion};
use serde_json::{Value, json};
use std::sync::Arc;

/// Registers this group's tools.
pub fn register(r: &mut Registry) {
    r.register(Arc::new(OrgOverview));
    r.register(Arc::new(CreateSuggestion));
}

/// The kinds of suggestion the nightly job may write.
pub const KINDS: [&str; 5] = [
    "review_proposal",
    "retry_failed",
    "tag_documents",
    "rerun_extraction",
    "other",
];

/// A proposal waiting longer than this many days is a signal.
const WAITING_AFTER_DAYS: i32 = 3;
/// Longest list per signal.
const SIGNAL_LIMIT: i64 = 20;

struct OrgOverview;

#[async_trait::async_trait]
impl Tool for OrgOverview {
    fn name(&self) -> &'static str {
        "org_overview"
    }
    fn description(&self) -> &'static str {
        "The organisation at a glance: document counts by auto_create_status; signals worth a \
         suggestion (proposals waiting more than 3 days → review_proposal, failed auto-creates \
         → retry_failed, untagged documents while tags exist → tag_documents, extractions made \
         with an older schema version → rerun_extraction); and how many suggestions this night \
         already has, against the cap."
    }
    fn parameters(&self) -> Value {
        params(json!({}), &[])
    }
    fn category(&self) -> Category {
        Category::Read
    }
    async fn call(&self, ctx: &mut ToolCtx<'_>, _args: Value) -> Result<Value, ToolError> {
        let night = ctx.night.unwrap_or_else(|| ctx.now.date_naive());
        let o = store::overview(
            ctx.conn,
            ctx.org_id,
            ctx.now,
            night,
            WAITING_AFTER_DAYS,
            SIGNAL_LIMIT,
        )
        .await?;
        Ok(json!({
            "documents": {"total": o.documents_total, "by_status": o.documents_by_status},
            "tags": o.tags,
            "schemas": o.schemas,
            "prompts": o.prompts,
            "signals": {
                "proposals_waiting_over_3_days": o.waiting_proposals,
                "failed_auto_creates": o.failed_auto_creates,
                "untagged_documents": o.untagged_documents,
                "untagged_documents_total": o.untagged_total,
                "extractions_on_old_schema_version": o.outdated_extractions,
            },
            "suggestions": {
                "night": night,
                "written": o.suggestions_this_night,
                "cap": ctx.max_suggestions,
            },
        }))
    }
}

struct CreateSuggestion;

#[async_trait::async_trait]
impl Tool for CreateSuggestion {
    fn name(&self) -> &'static str {
        "create_suggestion"
    }
    fn description(&self) -> &'static str {
        "Write a suggestion for the organisation's people {kind, title, message, document_id?, \
         proposed_action?}. kind: review_proposal | retry_failed | tag_documents | \
         rerun_extraction | other. One per kind and document (or per kind for the whole org) \
         per night: a repeat returns duplicate: true. proposed_action is an optional \
         {\"tool\": name, \"args\": {...}} a person can approve."
    }
    fn parameters(&self) -> Value {
        params(
            json!({
                "kind": {"type": "string", "enum": KINDS},
                "title": {"type": "string", "minLength": 1, "maxLength": 200},
                "message": {"type": "string", "minLength": 1, "maxLength": 4000},
                "document_id": {"type": "string",
                                "description": "The document it is about, if one."},
                "proposed_action": {
                    "type": "object",
                    "properties": {"tool": {"type": "string"}, "args": {"type": "object"}},
                    "required": ["tool"],
                },
            }),
            &["kind", "title", "message"],
        )
    }
    fn category(&self) -> Category {
        Category::Write
    }
    fn follow_up(&self, args: &Value, result: &Value) -> Option<super::FollowUp> {
        let action = args.get("proposed_action").filter(|a| a.is_object())?;
        if result["duplicate"].as_bool() == Some(true) {
            return None;
        }
        Some(super::FollowUp {
            tool: action["tool"].as_str().unwrap_or_default().to_string(),
            args: action.get("args").cloned().unwrap_or_else(|| json!({})),
            subject: super::Subject::Suggestion {
                document_id: super::scope::target_id(args, "document_id"),
            },
            suggestion_id: result["suggestion_id"]
                .as_str()
                .and_then(|s| uuid::Uuid::parse_str(s).ok()),
        })
    }
    async fn call(&self, ctx: &mut ToolCtx<'_>, args: Value) -> Result<Value, ToolError> {
        let kind = args["kind"].as_str().unwrap_or("");
        if !KINDS.contains(&kind) {
            return Err(ToolError::Invalid(format!(
                "kind must be one of {} (got {kind:?})",
                KINDS.join(", ")
            )));
        }
        let title = args["title"].as_str().unwrap_or("").trim();
        let message = args["message"].as_str().unwrap_or("").trim();
        if title.is_empty() || message.is_empty() {
            return Err(ToolError::Invalid(
                "title and message must not be empty".into(),
            ));
        }
        let document_id = opt_uuid(&args, "document_id")?;
        if let Some(d) = document_id {
            if !documents::exists(ctx.conn, ctx.org_id, d).await? {
                return Err(document_not_found(d));
            }
        }
        let proposed_action = args.get("proposed_action").filter(|a| !a.is_null());
        if let Some(a) = proposed_action {
            let tool = a.get("tool").and_then(Value::as_str).unwrap_or("");
            if super::builtin_registry().get(tool).is_none() {
                return Err(ToolError::Invalid(format!(
                    "proposed_action.tool must be the name of a tool (got {tool:?})"
                )));
            }
        }
        let night = ctx.night.unwrap_or_else(|| ctx.now.date_naive());
        let s = NewSuggestion {
            kind,
            subject: document_id.map(|d| d.to_string()).unwrap_or_default(),
            night,
            title,
            message,
            document_id,
            proposed_action,
        };
        match store::create(
            ctx.conn,
            ctx.org_id,
            &s,
            ctx.max_suggestions,
            ctx.run_id,
            ctx.now,
        )
        .await?
        {
            Created::New(id) => Ok(json!({"suggestion_id": id, "duplicate": false,
                                          "night": night})),
            Created::Duplicate(id) => Ok(json!({"suggestion_id": id, "duplicate": true,
                                                "night": night})),
            Created::Dismissed { at, reason } => Err(ToolError::Conflict(format!(
                "skipped: a person dismissed this kind of suggestion for this subject on {} ({}); \
                 do not suggest it again",
                at.date_naive(),
                reason.as_deref().unwrap_or("no reason given")
            ))),
            Created::CapReached { cap } => Err(ToolError::Conflict(format!(
                "cap reached: this organisation already has {cap} suggestion(s) for {night}; \
                 stop writing suggestions"
            ))),
        }
    }
}

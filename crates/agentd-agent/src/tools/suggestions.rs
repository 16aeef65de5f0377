//! Tools of the `suggestions` group: `org_overview` (the org's state as counts and signals,
//! computed in SQL) and `create_suggestion` (unique per org, kind, subject and night; capped
//! per org per night).

use super::documents::existing_document;
use super::suggestion_wording as wording;
use super::typed::tool;
use super::typed::{Id, any_object};
use super::{FollowUp, Subject, ToolCtx, ToolError, TypedTool};
use crate::store::documents;
use crate::store::suggestions::{self as store, Created, SuggestionFields};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

// The kinds of suggestion the nightly job may write (a `///` comment would become the
// description of `kind` in create_suggestion's schema).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum SuggestionKind {
    ReviewProposal,
    RetryFailed,
    TagDocuments,
    RerunExtraction,
    Other,
}

impl SuggestionKind {
    /// The stored value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReviewProposal => "review_proposal",
            Self::RetryFailed => "retry_failed",
            Self::TagDocuments => "tag_documents",
            Self::RerunExtraction => "rerun_extraction",
            Self::Other => "other",
        }
    }
}

/// The signals `org_overview` lists (its `signals` keys), each with the kind of suggestion it
/// asks for.
pub const SIGNALS: [(&str, SuggestionKind); 4] = [
    (
        "proposals_waiting_over_3_days",
        SuggestionKind::ReviewProposal,
    ),
    ("failed_auto_creates", SuggestionKind::RetryFailed),
    ("untagged_documents", SuggestionKind::TagDocuments),
    (
        "extractions_on_old_schema_version",
        SuggestionKind::RerunExtraction,
    ),
];

/// A proposal waiting longer than this many days is a signal.
pub const WAITING_AFTER_DAYS: i32 = 3;
/// Longest list per signal.
const SIGNAL_LIMIT: i64 = 20;

/// The org's overview for `night`, as `org_overview` shows it and `create_suggestion` words a
/// signal from it.
async fn overview(
    ctx: &mut ToolCtx<'_>,
    night: chrono::NaiveDate,
) -> sqlx::Result<store::Overview> {
    store::overview(
        ctx.conn,
        ctx.org_id,
        ctx.now,
        night,
        WAITING_AFTER_DAYS,
        SIGNAL_LIMIT,
    )
    .await
}

tool! {
    /// `org_overview` (no arguments).
    OrgOverview {} = Read "org_overview",
    "The organisation at a glance: document counts by \
    auto_create_status; signals worth a suggestion (proposals waiting more than 3 days → \
    review_proposal, failed auto-creates → retry_failed, untagged documents while tags \
    exist → tag_documents, extractions made with an older schema version → \
    rerun_extraction); and how many suggestions this night already has, against the cap."
}

impl TypedTool for OrgOverview {
    async fn run(self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        let night = ctx.night.unwrap_or_else(|| ctx.now.date_naive());
        let o = overview(ctx, night).await?;
        let lists = [
            json!(o.waiting_proposals),
            json!(o.failed_auto_creates),
            json!(o.untagged_documents),
            json!(o.outdated_extractions),
        ];
        let mut signals: Map<String, Value> = SIGNALS
            .iter()
            .zip(lists)
            .map(|((key, _), list)| (key.to_string(), list))
            .collect();
        signals.insert("untagged_documents_total".into(), json!(o.untagged_total));
        Ok(json!({
            "documents": {"total": o.documents_total, "by_status": o.documents_by_status},
            "tags": o.tags,
            "schemas": o.schemas,
            "prompts": o.prompts,
            "signals": signals,
            "suggestions": {
                "night": night,
                "written": o.suggestions_this_night,
                "cap": ctx.max_suggestions,
            },
        }))
    }
}

// An action a person can approve with the suggestion (a type comment would be its schema's
// description).
#[derive(Deserialize, Serialize, JsonSchema)]
#[schemars(inline)]
struct ProposedAction {
    tool: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    args: Option<Map<String, Value>>,
}

tool! {
    /// `create_suggestion`.
    CreateSuggestion {
        kind: SuggestionKind,
        /// Only for a suggestion no signal names (kind other): a signal's is written from it.
        #[schemars(length(min = 1, max = 200))]
        title: Option<String>,
        /// Only what the signal does not say; a signal's own facts are written from it.
        #[schemars(length(min = 1, max = 4000))]
        message: Option<String>,
        /// The document it is about, if one.
        document_id: Option<Id>,
        proposed_action: Option<ProposedAction>,
    } = Write "create_suggestion",
    "Write a suggestion for the organisation's people {kind, \
    document_id?, title?, message?, proposed_action?}. kind: review_proposal | retry_failed | \
    tag_documents | rerun_extraction | other. For a signal of org_overview (its kind, and one \
    of its documents or none for all of them) the title and message are written from the \
    signal: give a message only to add what it does not say. kind other needs a title and a \
    message. One per kind and document (or per kind for the whole org) per night: a repeat \
    returns duplicate: true. proposed_action is an optional {\"tool\": name, \"args\": \
    {...}} a person can approve."
}

impl TypedTool for CreateSuggestion {
    /// The proposed action becomes a pending approval of its own, on the suggestion's
    /// document, with the suggestion's message as the rationale (a repeat proposes nothing).
    fn follow_up(&self, result: &Value) -> Option<FollowUp> {
        let action = self.proposed_action.as_ref()?;
        if result["duplicate"].as_bool() == Some(true) {
            return None;
        }
        Some(FollowUp {
            tool: action.tool.clone(),
            args: Value::Object(action.args.clone().unwrap_or_default()),
            subject: Subject::Suggestion {
                document_id: Id::uuid(self.document_id),
            },
            suggestion_id: result["suggestion_id"]
                .as_str()
                .and_then(|s| uuid::Uuid::parse_str(s).ok()),
            // What was written (a signal's words, or the model's), as the approval's reason.
            rationale: result["message"]
                .as_str()
                .map(str::to_string)
                .or_else(|| self.message.clone()),
        })
    }
    async fn run(self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        let document_id = Id::uuid(self.document_id);
        if let Some(d) = document_id {
            if self.proposed_action.is_some() {
                // The proposal that follows locks the document (its snapshot) after the insert
                // below took a share lock on it through the foreign key: two runs suggesting an
                // action on one document (two nights) each held that share lock and waited for
                // the other's to lock the row — a deadlock (found by the chaos suite). Locking
                // it first makes the second wait for the first instead.
                if !documents::lock(ctx.conn, ctx.org_id, d).await? {
                    existing_document(ctx, d).await?;
                }
            } else {
                existing_document(ctx, d).await?;
            }
        }
        if let Some(a) = &self.proposed_action
            && super::builtin_registry().get(&a.tool).is_none()
        {
            return Err(ToolError::Invalid(format!(
                "proposed_action.tool must be the name of a tool (got {:?})",
                a.tool
            )));
        }
        let proposed_action = self.proposed_action.as_ref().map(|a| json!(a));
        let night = ctx.night.unwrap_or_else(|| ctx.now.date_naive());
        let given = |s: &Option<String>| {
            s.as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let overview = overview(ctx, night).await?;
        let (title, message) = match wording::from_signal(self.kind, document_id, &overview) {
            Some((title, built)) => {
                let message = wording::with_model_note(&title, &built, self.message.as_deref());
                (title, message)
            }
            None => match (given(&self.title), given(&self.message)) {
                (Some(t), Some(m)) => (
                    t.chars().take(wording::MAX_TITLE).collect(),
                    m.chars().take(wording::MAX_MESSAGE).collect(),
                ),
                _ => {
                    return Err(ToolError::Invalid(format!(
                        "title and message are needed: no signal of org_overview names this \
                         suggestion (kind {}{}), so its words are yours; or pick a signal's kind \
                         and one of its documents, and they are written from it",
                        self.kind.as_str(),
                        if document_id.is_some() {
                            " about a document that signal does not list"
                        } else {
                            ""
                        }
                    )));
                }
            },
        };
        let s = SuggestionFields {
            kind: self.kind.as_str().to_string(),
            subject: document_id.map(|d| d.to_string()).unwrap_or_default(),
            night,
            title: title.clone(),
            message: message.clone(),
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
                                          "night": night, "title": title, "message": message})),
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

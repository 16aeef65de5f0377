//! Tools the agent can call, and the registry: the one chokepoint every call goes through.
//! Each tool is a [`TypedTool`]: the type its arguments are parsed into (its JSON Schema is the
//! tool's parameters, see [`typed`]) with a name, a description, a category and a handler;
//! tools that can be proposed for approval also declare a `snapshot` of the data they depend
//! on. The loop, approvals and the registry see every tool through the object-safe [`Tool`]
//! (JSON in, JSON out), which [`Typed`] provides. Every handler filters by `ctx.org_id`: a
//! tool never sees another org's rows.

pub mod documents;
pub mod extraction;
mod extraction_model;
pub mod field_names;
pub mod help;
pub mod key_fields;
pub mod model_phase;
pub mod policy;
pub mod prompts;
pub mod registry;
pub mod schema_check;
pub mod schema_forms;
pub mod schema_reuse;
pub mod schemas;
pub mod scope;
pub mod strict;
pub mod suggestion_wording;
pub mod suggestions;
pub mod summary;
pub mod tags;
pub mod typed;
mod versioned;

use crate::llm::{CompletionRequest, CompletionResponse, SharedProvider};
use crate::store::versions::{self, Versioned};
use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

pub use registry::Registry;
pub use scope::{Subject, Target};
pub use typed::{Declaration, Id, Refines, Snapshot, Typed, TypedTool};

/// Every built-in tool.
pub fn builtin_registry() -> Registry {
    let mut r = Registry::new();
    r.add::<documents::GetDocument>();
    r.add::<documents::GetOcrText>();
    r.add::<documents::ListDocuments>();
    r.add::<documents::UpdateDocument>();
    r.add::<documents::DeleteDocument>();
    r.add::<schemas::GetSchema>();
    r.add::<schemas::ListSchemas>();
    r.add::<schemas::ValidateSchema>();
    r.add::<schemas::CreateSchema>();
    r.add::<schemas::UpdateSchema>();
    r.add::<schemas::DeleteSchema>();
    r.add::<prompts::GetPrompt>();
    r.add::<prompts::ListPrompts>();
    r.add::<prompts::CreatePrompt>();
    r.add::<prompts::UpdatePrompt>();
    r.add::<prompts::DeletePrompt>();
    r.add::<tags::ListTags>();
    r.add::<tags::CreateTag>();
    r.add::<tags::DeleteTag>();
    r.add::<extraction::GetExtractionResult>();
    r.add::<extraction::RunExtraction>();
    r.add::<extraction::UpdateExtractionField>();
    r.add::<suggestions::OrgOverview>();
    r.add::<suggestions::CreateSuggestion>();
    r.add::<help::HelpSchemas>();
    r.add::<help::HelpPrompts>();
    r
}

/// What a tool may do; the job's policy maps each category to auto, propose or deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Category {
    Read,
    Write,
    Destructive,
}

impl From<Category> for crate::store::audit::AuditCategory {
    /// A call's audit category is its tool's (the same name).
    fn from(c: Category) -> Self {
        match c {
            Category::Read => Self::Read,
            Category::Write => Self::Write,
            Category::Destructive => Self::Destructive,
        }
    }
}

impl Category {
    /// `read`, `write` or `destructive`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Category::Read => "read",
            Category::Write => "write",
            Category::Destructive => "destructive",
        }
    }
}

/// Everything a handler may use. The connection is inside the step's transaction: the tool's
/// side effects commit together with its audit row and the run checkpoint.
pub struct ToolCtx<'c> {
    /// The org the run belongs to; every query filters by it.
    pub org_id: Uuid,
    /// The run (None for a human decision outside a run).
    pub run_id: Option<Uuid>,
    /// `agent:<kind>` or `human:<who>`: recorded on audit rows.
    pub actor: String,
    /// The step transaction.
    pub conn: &'c mut PgConnection,
    /// For tools that call a model themselves (run_extraction).
    pub provider: SharedProvider,
    /// Model name for such calls.
    pub model: String,
    /// Characters of document text a tool may show or send (bounded excerpt).
    pub excerpt_chars: usize,
    /// "Now" from the Clock.
    pub now: DateTime<Utc>,
    /// The job's subject document, when there is one (auto_create): defaults for optional ids.
    pub document_id: Option<Uuid>,
    /// The night a proactive run works on.
    pub night: Option<NaiveDate>,
    /// Suggestions allowed per org per night.
    pub max_suggestions: Option<u32>,
    /// What this call may touch inside the org ([`scope::check`] enforces it).
    pub subject: Subject,
}

impl ToolCtx<'_> {
    /// Runs `f` on a savepoint of this context's transaction (an sqlx nested transaction): what
    /// `f` wrote is kept when it returns `Ok` and rolled back when it returns `Err`; the
    /// enclosing transaction (audit row, checkpoint) goes on either way.
    pub async fn savepoint<T, E>(
        &mut self,
        f: impl AsyncFnOnce(&mut ToolCtx<'_>) -> Result<T, E>,
    ) -> sqlx::Result<Result<T, E>> {
        let mut sp = sqlx::Acquire::begin(&mut *self.conn).await?;
        let mut inner = ToolCtx {
            org_id: self.org_id,
            run_id: self.run_id,
            actor: self.actor.clone(),
            conn: &mut sp,
            provider: self.provider.clone(),
            model: self.model.clone(),
            excerpt_chars: self.excerpt_chars,
            now: self.now,
            document_id: self.document_id,
            night: self.night,
            max_suggestions: self.max_suggestions,
            subject: self.subject,
        };
        let out = f(&mut inner).await;
        drop(inner);
        match out {
            Ok(_) => sp.commit().await?,
            Err(_) => sp.rollback().await?,
        }
        Ok(out)
    }
}

/// A model call a tool needs, built from inputs read in a short transaction.
#[derive(Debug, Clone)]
pub struct ModelCall {
    /// What to send.
    pub request: CompletionRequest,
    /// What [`Tool::apply`] needs besides the answer (ids and versions of the inputs).
    pub state: Value,
}

/// An action to propose after a call (see [`Tool::follow_up`]).
#[derive(Debug, Clone)]
pub struct FollowUp {
    /// The tool to propose.
    pub tool: String,
    /// Its arguments.
    pub args: Value,
    /// What its arguments may touch (the suggestion's document).
    pub subject: Subject,
    /// The suggestion it belongs to.
    pub suggestion_id: Option<Uuid>,
    /// Why, in the model's words (a suggestion's message), shown to the person deciding.
    pub rationale: Option<String>,
}

/// A tool failure. All but `Db` go back to the model as text it can act on.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// Arguments wrong: the message says what to fix.
    #[error("invalid arguments: {0}")]
    Invalid(String),
    /// The id does not exist in this org (another org's id looks exactly like this).
    #[error("not found: {0}")]
    NotFound(String),
    /// The action conflicts with the current state.
    #[error("conflict: {0}")]
    Conflict(String),
    /// A model call inside the tool failed.
    #[error("provider error: {0}")]
    Provider(String),
    /// The call touches something outside the run's subject.
    #[error("outside this run's subject: {0}")]
    OffSubject(String),
    /// The database failed: not the model's fault; the step is rolled back and retried.
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
}

/// A tool as the registry, the loop and approvals see it: JSON in, JSON out. Every tool is a
/// [`TypedTool`]; [`Typed`] provides this (no tool implements it by hand).
#[async_trait::async_trait]
pub trait Tool: Send + Sync {
    /// The name the model calls.
    fn name(&self) -> &'static str;
    /// What the model reads to decide when to call it.
    fn description(&self) -> &'static str;
    /// JSON Schema (Draft 7) of the arguments object; arguments are validated against it
    /// before the handler runs.
    fn parameters(&self) -> Value;
    /// The arguments a constrained call fills (`agent::constrain`, `llm.constrained_calls`):
    /// the parameters, or a narrower schema a tool declares for small models; `candidates` are
    /// the run's candidate field names (`analysis::names_in_brief`), for a tool that offers
    /// them.
    fn guided_parameters(&self, _candidates: &[String]) -> Value {
        self.parameters()
    }
    /// Read, write or destructive.
    fn category(&self) -> Category;
    /// Runs the tool.
    async fn call(&self, ctx: &mut ToolCtx<'_>, args: Value) -> Result<Value, ToolError>;
    /// What a call with `args` touches (checked against the run's subject before the
    /// handler runs); empty: nothing beyond the org (reads of shared lists, creations).
    fn targets(&self, args: &Value) -> Vec<Target>;
    /// True for tools that call a model themselves: the loop runs them as prepare → call with
    /// no transaction open → checkpoint the answer → apply.
    fn calls_model(&self) -> bool;
    /// An action a successful call asks to store as a pending approval (a suggestion's
    /// `proposed_action`); the caller checks it against the job's allow-list, policy and the
    /// follow-up's subject before proposing it.
    fn follow_up(&self, args: &Value, result: &Value) -> Option<FollowUp>;
    /// For tools that call a model themselves: reads the inputs (no writes) and builds the
    /// request, so the caller can commit, call the model with no transaction open, checkpoint
    /// the answer and then [`Tool::apply`] it. `None`: an ordinary tool.
    async fn prepare(&self, ctx: &mut ToolCtx<'_>, args: &Value) -> Declared<ModelCall>;
    /// Validates and stores a model answer obtained for [`Tool::prepare`]'s request: `answer`
    /// is the prepared state (checkpointed with the answer) and the model's response.
    async fn apply(
        &self,
        ctx: &mut ToolCtx<'_>,
        args: &Value,
        answer: (&Value, &CompletionResponse),
    ) -> Result<Value, ToolError>;
    /// The data the action depends on, read with the subject rows locked (`FOR UPDATE`) so a
    /// decision can compare and act atomically. `None`: this tool cannot be proposed.
    async fn snapshot(&self, ctx: &mut ToolCtx<'_>, args: &Value) -> Declared<Value>;
    /// Whether a successful call counts toward the run's refinements (`max_refinements`).
    fn refines(&self) -> Refines {
        Refines::Never
    }
    /// What a proposed call's snapshot is: the tool's own, or its document's row.
    fn snapshot_kind(&self) -> Snapshot {
        Snapshot::Own
    }
    /// The document a proposed call of `args` acts on, if it acts on one (decisions about
    /// it are scoped by it; with [`Snapshot::DocumentRow`], its row is the snapshot).
    fn document(&self, _args: &Value) -> Option<Uuid> {
        None
    }
    /// The one-line summary a reviewer reads of a proposed call of `args` in org `org_id`;
    /// `None`: the tool declares none (`approvals::summary` writes the generic one).
    async fn summary(
        &self,
        _conn: &mut PgConnection,
        _org_id: Uuid,
        _args: &Value,
    ) -> sqlx::Result<Option<String>> {
        Ok(None)
    }
}

/// The result of a part of a tool only some tools declare (a model phase, a snapshot): `None`
/// when this tool does not.
pub type Declared<R> = Option<Result<R, ToolError>>;

/// What is wrong with a revid that does not parse (after the field name).
pub(crate) fn revid_problem(s: &str) -> String {
    format!("must be \"<id>:<version>\", e.g. \"0190…:1\" (got {s:?})")
}

/// `"<uuid>:<version>"` split, if it is one.
pub(crate) fn split_revid(s: &str) -> Option<(Uuid, i32)> {
    let (id, v) = s.split_once(':')?;
    Some((Uuid::parse_str(id).ok()?, v.parse::<i32>().ok()?))
}

/// A reference to a versioned row (a schema, a prompt): `"<id>:<version>"`, or a bare id
/// meaning the latest version (`None`); `what` names the row kind in the error.
pub fn parse_rev_ref(s: &str, field: &str, what: &str) -> Result<(Uuid, Option<i32>), ToolError> {
    if s.contains(':') {
        return split_revid(s)
            .map(|(id, version)| (id, Some(version)))
            .ok_or_else(|| ToolError::Invalid(format!("{field} {}", revid_problem(s))));
    }
    Uuid::parse_str(s).map(|id| (id, None)).map_err(|_| {
        ToolError::Invalid(format!(
            "{field} must be \"<{what}_id>:<version>\" as returned by create_{what} (got {s:?})"
        ))
    })
}

/// A version of the org's versioned row `R` (a schema, a prompt) from `"<id>:<version>"` in
/// argument `field`, or the latest version from a bare id.
pub(crate) async fn resolve<R: Versioned>(
    ctx: &mut ToolCtx<'_>,
    s: &str,
    field: &str,
) -> Result<R, ToolError> {
    let (id, version) = parse_rev_ref(s, field, R::KIND)?;
    let row = versions::find(ctx.conn, ctx.org_id, id, version, false).await?;
    row.ok_or_else(|| not_in_org(R::KIND, s))
}

/// Formats a revid.
pub fn revid(id: Uuid, version: i32) -> String {
    format!("{id}:{version}")
}

/// `NotFound` for a `kind` (`document`, `schema`, …) `id` this org does not have (another org's
/// id reads the same); the model is sent to `list_<kind>s`.
pub(crate) fn not_in_org(kind: &str, id: impl std::fmt::Display) -> ToolError {
    ToolError::NotFound(format!(
        "no {kind} {id} in this organisation; call list_{kind}s"
    ))
}

/// A list tool's result: `{"count": n, "<key>": [one object per row]}`.
pub(crate) fn listing<T>(key: &str, rows: Vec<T>, row: impl FnMut(T) -> Value) -> Value {
    let items: Vec<Value> = rows.into_iter().map(row).collect();
    let mut out = serde_json::json!({ "count": items.len() });
    out[key] = Value::Array(items);
    out
}

/// A snapshot of a row that is missing (or another org's): `{"exists": false, "<key>": id}`.
pub(crate) fn missing(key: &str, id: Uuid) -> Value {
    let mut out = serde_json::json!({ "exists": false });
    out[key] = serde_json::json!(id);
    out
}

/// Text a model wrote, without a ```json (or ```) code fence around it.
pub(crate) fn unfenced(text: &str) -> &str {
    let t = text.trim();
    t.strip_prefix("```json")
        .or_else(|| t.strip_prefix("```"))
        .map(|s| s.trim_end().trim_end_matches("```").trim())
        .unwrap_or(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_tool_category_is_audited_under_its_own_name_and_audit_names_are_distinct() {
        use crate::store::audit::AuditCategory;
        for c in [Category::Read, Category::Write, Category::Destructive] {
            assert_eq!(AuditCategory::from(c).as_str(), c.as_str());
        }
        let mut names: Vec<&str> = AuditCategory::ALL.iter().map(|c| c.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), AuditCategory::ALL.len());
    }

    #[test]
    fn rev_refs_and_their_errors() {
        let id = Uuid::new_v4();
        assert_eq!(
            parse_rev_ref(&revid(id, 3), "f", "schema").unwrap(),
            (id, Some(3))
        );
        assert_eq!(
            parse_rev_ref(&id.to_string(), "f", "schema").unwrap(),
            (id, None)
        );
        let e = parse_rev_ref("abc:x", "schema_revid", "schema").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid arguments: schema_revid must be \"<id>:<version>\", e.g. \"0190…:1\" \
             (got \"abc:x\")"
        );
        let e = parse_rev_ref("abc", "prompt_revid", "prompt").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid arguments: prompt_revid must be \"<prompt_id>:<version>\" as returned by \
             create_prompt (got \"abc\")"
        );
    }

    #[test]
    fn shared_result_shapes() {
        let id = Uuid::new_v4();
        assert_eq!(
            not_in_org("tag", id).to_string(),
            format!("not found: no tag {id} in this organisation; call list_tags")
        );
        assert_eq!(
            listing("tags", vec![1, 2], |n| json!({"n": n})),
            json!({"count": 2, "tags": [{"n": 1}, {"n": 2}]})
        );
        assert_eq!(
            listing("tags", Vec::<i32>::new(), |n| json!(n)),
            json!({"count": 0, "tags": []})
        );
        assert_eq!(
            missing("prompt_id", id),
            json!({"exists": false, "prompt_id": id})
        );
    }

    #[test]
    fn fences_are_dropped() {
        assert_eq!(unfenced(" ```json\n{\"a\": 1}\n``` "), "{\"a\": 1}");
        assert_eq!(unfenced("```\n{}\n```"), "{}");
        assert_eq!(unfenced("  {} "), "{}");
    }
}

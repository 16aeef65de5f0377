//! Org-scoped reads for the HTTP API: keyset pages of any [`Listed`] row type (newest first,
//! `(created_at, id)` as the cursor) and which jobs an org may see. Every query
//! takes the org; "now" is a parameter.

use crate::kinds::JobKind;
use crate::queue::{JobRow, JobState};
use crate::store::approvals::ApprovalRow;
use crate::store::documents::DocumentSummary;
use crate::store::runs::RunRow;
use crate::store::states::{
    ApprovalStatus, ArtifactStatus, AutoCreateStatus, RunStatus, State, SuggestionStatus,
};
use crate::store::suggestions::SuggestionRow;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgExecutor;
use sqlx::postgres::PgRow;
use uuid::Uuid;

/// Where a page starts: strictly after this `(created_at, id)` in newest-first order.
pub type After = Option<(DateTime<Utc>, Uuid)>;

/// A row type the API lists in keyset pages: newest first by `(ORDER, id)`, optionally only
/// one state (and one kind).
pub trait Listed: for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin {
    /// `SELECT … FROM <table>`, whose rows have `org_id` and `id`.
    const SELECT: &'static str;
    /// The column of the state filter, and its type.
    const STATE: &'static str = "status";
    type State: State;
    /// The column of the kind filter (rows that have kinds).
    const KIND: Option<&'static str> = None;
    /// The time column of the order.
    const ORDER: &'static str = "created_at";
    /// Where the page after this row starts.
    fn key(&self) -> (DateTime<Utc>, Uuid);
}

/// A page of the org's `T`, newest first: `limit` rows after `after`, only `state` and `kind`
/// when given (`kind` only where `T` has a kind column).
pub async fn page<'e, T: Listed>(
    exec: impl PgExecutor<'e>,
    org_id: Uuid,
    state: Option<T::State>,
    kind: Option<&str>,
    after: After,
    limit: i64,
) -> sqlx::Result<Vec<T>> {
    let kind = kind.zip(T::KIND).map(|(k, column)| (column, k));
    page_where(exec, org_id, state, kind.as_slice(), after, limit).await
}

/// [`page`] with equality filters: each `(column, value)` (a column of `T`'s table, named by
/// the code, never by a request) must hold.
pub async fn page_where<'e, T: Listed>(
    exec: impl PgExecutor<'e>,
    org_id: Uuid,
    state: Option<T::State>,
    filters: &[(&'static str, &str)],
    after: After,
    limit: i64,
) -> sqlx::Result<Vec<T>> {
    let mut q = sqlx::QueryBuilder::new(T::SELECT);
    q.push(" WHERE org_id = ").push_bind(org_id);
    if let Some(state) = state {
        q.push(format_args!(" AND {} = ", T::STATE));
        q.push_bind(state.as_str());
    }
    for (column, value) in filters {
        q.push(format_args!(" AND {column} = ")).push_bind(*value);
    }
    if let Some((at, id)) = after {
        q.push(format_args!(" AND ({}, id) < (", T::ORDER));
        q.push_bind(at).push(", ").push_bind(id).push(")");
    }
    q.push(format_args!(" ORDER BY {} DESC, id DESC LIMIT ", T::ORDER));
    q.push_bind(limit);
    q.build_query_as().fetch_all(exec).await
}

impl Listed for DocumentSummary {
    const SELECT: &'static str =
        "SELECT id, name, tag_ids, auto_create_status, created_at, updated_at FROM documents";
    const STATE: &'static str = "auto_create_status";
    type State = AutoCreateStatus;
    fn key(&self) -> (DateTime<Utc>, Uuid) {
        (self.created_at, self.id)
    }
}

/// A schema of the org as `GET /v1/schemas` lists it: its latest version.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct SchemaItem {
    /// The schema's id (what an upload's `schema_id` names).
    pub id: Uuid,
    pub name: String,
    /// The latest version (an upload that names the schema starts from it).
    pub version: i32,
    pub status: ArtifactStatus,
    /// When the latest version was made.
    pub created_at: DateTime<Utc>,
}

/// The latest version of each schema. `DISTINCT ON (org_id, …)`: the org filter [`page`] adds
/// is pushed into the subquery (a filter on a `DISTINCT ON` column may be), so one org's rows
/// are read, by `schemas_org_idx`.
impl Listed for SchemaItem {
    const SELECT: &'static str = "SELECT * FROM (SELECT DISTINCT ON (org_id, schema_id)
            schema_id AS id, org_id, name, version, status, created_at
          FROM schemas ORDER BY org_id, schema_id, version DESC) latest";
    type State = ArtifactStatus;
    fn key(&self) -> (DateTime<Utc>, Uuid) {
        (self.created_at, self.id)
    }
}

/// A prompt of the org as `GET /v1/prompts` lists it: its latest version.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct PromptItem {
    /// The prompt's id (what an upload's `prompt_id` names).
    pub id: Uuid,
    pub name: String,
    /// The latest version (an upload that names the prompt starts from it).
    pub version: i32,
    pub status: ArtifactStatus,
    /// The schema the prompt extracts, and its version.
    pub schema_id: Uuid,
    pub schema_version: i32,
    /// The prompt's tags.
    pub tag_ids: Vec<Uuid>,
    /// When the latest version was made.
    pub created_at: DateTime<Utc>,
}

/// The latest version of each prompt (as [`SchemaItem`]).
impl Listed for PromptItem {
    const SELECT: &'static str = "SELECT * FROM (SELECT DISTINCT ON (org_id, prompt_id)
            prompt_id AS id, org_id, name, version, status, schema_id, schema_version, tag_ids,
            created_at
          FROM prompts ORDER BY org_id, prompt_id, version DESC) latest";
    type State = ArtifactStatus;
    fn key(&self) -> (DateTime<Utc>, Uuid) {
        (self.created_at, self.id)
    }
}

/// A tag of the org as `GET /v1/tags` lists it.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct TagItem {
    /// The tag's id (what an upload's `tag_ids` name).
    pub id: Uuid,
    pub name: String,
    pub color: String,
    pub created_at: DateTime<Utc>,
}

/// Tags have no state: `GET /v1/tags` never filters by one (`State` only fills the trait).
impl Listed for TagItem {
    const SELECT: &'static str = "SELECT id, org_id, name, color, created_at FROM tags";
    type State = ArtifactStatus;
    fn key(&self) -> (DateTime<Utc>, Uuid) {
        (self.created_at, self.id)
    }
}

impl Listed for ApprovalRow {
    const SELECT: &'static str = "SELECT * FROM pending_approvals";
    type State = ApprovalStatus;
    fn key(&self) -> (DateTime<Utc>, Uuid) {
        (self.created_at, self.id)
    }
}

impl Listed for RunRow {
    const SELECT: &'static str = "SELECT * FROM agent_runs";
    type State = RunStatus;
    const KIND: Option<&'static str> = Some("kind");
    const ORDER: &'static str = "started_at";
    fn key(&self) -> (DateTime<Utc>, Uuid) {
        (self.started_at, self.id)
    }
}

/// A suggestion as the API lists it: the row as stored and what the list adds (`Suggestion`
/// in the OpenAPI document).
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
#[schema(as = Suggestion)]
pub struct SuggestionItem {
    #[serde(flatten)]
    #[sqlx(flatten)]
    pub row: SuggestionRow,
    /// The same as `status` (the name of the shared API contract).
    pub state: SuggestionStatus,
    pub status_changed_at: Option<DateTime<Utc>>,
    /// The suggestion's latest approval, if its action was proposed.
    pub approval_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

impl Listed for SuggestionItem {
    const SELECT: &'static str =
        "SELECT id, kind, subject, night, title, message, document_id, proposed_action, status,
                status AS state, status_reason, status_changed_at,
                (SELECT p.id FROM pending_approvals p
                  WHERE p.org_id = suggestions.org_id AND p.suggestion_id = suggestions.id
                  ORDER BY p.created_at DESC LIMIT 1) AS approval_id,
                run_id, created_at
           FROM suggestions";
    type State = SuggestionStatus;
    fn key(&self) -> (DateTime<Utc>, Uuid) {
        (self.created_at, self.row.id)
    }
}

/// The SQL condition "job `j` belongs to org `$1`": its payload names the org. Every job made
/// for one org does (an org's approval sweep and re-proposals too since review D1; migration
/// 0091 wrote it into the older ones), and the condition matches the expression index of
/// migration 0066, so an org's reads cost its own jobs, whatever other orgs enqueue (review N8).
pub(crate) const JOB_OF_ORG: &str = "(j.payload ? 'org_id' AND j.payload->>'org_id' = $1::text)";

/// A job of this org by id.
pub async fn job<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    id: i64,
) -> sqlx::Result<Option<JobRow>> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT j.* FROM agentd_jobs j WHERE j.id = $2 AND {JOB_OF_ORG}"
    )))
    .bind(org_id)
    .bind(id)
    .fetch_optional(exec)
    .await
}

/// What `GET /v1/jobs` and `agentd jobs list` filter by: every filter given must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    pub kind: Option<String>,
    pub state: Option<JobState>,
    /// Created at or after this time.
    pub created_after: Option<DateTime<Utc>>,
    /// Created before this time (`[created_after, created_before)`: windows side by side
    /// list each job once).
    pub created_before: Option<DateTime<Utc>>,
    /// Jobs whose payload names this document: `auto_create` jobs, the one kind whose payload
    /// has a `document_id` (refines are `auto_create` jobs too).
    pub document: Option<Uuid>,
}

/// Where a page of jobs starts: strictly after this `(created_at, id)` in newest-first order.
pub type JobAfter = Option<(DateTime<Utc>, i64)>;

/// A page of jobs, newest first by `(created_at, id)`: `limit` jobs after `after` that match
/// `filter`, of the org `org` (of every org when `None`: the operator's `agentd jobs list`).
/// The org is `$1` of [`JOB_OF_ORG`], as in `status.rs`, and the order is that of the index of
/// migration 0098, so a page reads its own rows however many jobs the org or others have.
pub async fn jobs_page<'e>(
    exec: impl PgExecutor<'e>,
    org: Option<Uuid>,
    filter: &JobFilter,
    after: JobAfter,
    limit: i64,
) -> sqlx::Result<Vec<JobRow>> {
    let mut q = sqlx::QueryBuilder::new("SELECT j.* FROM agentd_jobs j WHERE (");
    q.push_bind(org);
    q.push(format_args!("::uuid IS NULL OR {JOB_OF_ORG})"));
    if let Some(kind) = &filter.kind {
        q.push(" AND j.kind = ").push_bind(kind.as_str());
    }
    if let Some(state) = filter.state {
        q.push(" AND j.state = ").push_bind(state.as_str());
    }
    if let Some(at) = filter.created_after {
        q.push(" AND j.created_at >= ").push_bind(at);
    }
    if let Some(at) = filter.created_before {
        q.push(" AND j.created_at < ").push_bind(at);
    }
    if let Some(doc) = filter.document {
        // The kind as a constant: it lets the planner take the partial index of a document's
        // jobs (migration 0015, `WHERE kind = 'auto_create'`).
        let kind = crate::kinds::AutoCreate::NAME;
        q.push(format_args!(" AND j.kind = '{kind}'"));
        q.push(" AND j.payload->>'document_id' = ")
            .push_bind(doc.to_string());
    }
    if let Some((at, id)) = after {
        q.push(" AND (j.created_at, j.id) < (").push_bind(at);
        q.push(", ").push_bind(id).push(")");
    }
    q.push(" ORDER BY j.created_at DESC, j.id DESC LIMIT ")
        .push_bind(limit);
    q.build_query_as().fetch_all(exec).await
}

/// The id of the job holding `unique_key`, if any (the answer to a deduplicated enqueue): the
/// waiting or running one, else the newest (a key that binds only while its job waits or runs
/// may also be on finished jobs).
pub async fn job_id_by_unique_key<'e, E: PgExecutor<'e>>(
    exec: E,
    unique_key: &str,
) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar(
        "SELECT id FROM agentd_jobs WHERE unique_key = $1
          ORDER BY state IN ('available', 'running') DESC, id DESC LIMIT 1",
    )
    .bind(unique_key)
    .fetch_optional(exec)
    .await
}

/// The org's pending approval ids (at most `limit`).
pub async fn pending_approval_ids<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    limit: i64,
) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar(
        "SELECT id FROM pending_approvals WHERE org_id = $1 AND status = 'pending'
          ORDER BY id LIMIT $2",
    )
    .bind(org_id)
    .bind(limit)
    .fetch_all(exec)
    .await
}

/// Which of `ids` are approvals of this org.
pub async fn approvals_of_org<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    ids: &[Uuid],
) -> sqlx::Result<Vec<Uuid>> {
    let of_org = "SELECT id FROM pending_approvals WHERE org_id = $1 AND id = ANY($2)";
    super::sql::scalar(of_org, org_id, ids)
        .fetch_all(exec)
        .await
}

/// Which of `ids` are approvals of an org other than this one (ids of no approval are in
/// neither list).
pub async fn approvals_of_other_orgs<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    ids: &[Uuid],
) -> sqlx::Result<Vec<Uuid>> {
    let of_others = "SELECT id FROM pending_approvals WHERE org_id <> $1 AND id = ANY($2)";
    super::sql::scalar(of_others, org_id, ids)
        .fetch_all(exec)
        .await
}

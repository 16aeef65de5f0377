//! SQL for the events outbox (`agentd_events`, migration 0040): events are written on the
//! connection of the transaction that causes them, and read by cursor per org. "Now" is always
//! a parameter.
//!
//! Reading is gap-free: a row is returned only once every transaction that could still write an
//! earlier row has ended (see the migration), in `(tx, id)` order. So an event id is a cursor,
//! but ids in the stream are not always increasing: dedupe and resume by id, never by `max(id)`.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

/// The kinds of event (issue 15). The wire name is `EventType::as_str`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum EventType {
    ProposalReady,
    AutoCreateFailed,
    ApprovalCreated,
    ApprovalExpiring,
    ApprovalExpired,
    ApprovalStale,
    ApprovalDecided,
    SuggestionCreated,
    BudgetThreshold,
    RunFailed,
    ProposalAccepted,
    ProposalRejected,
    AdminChanged,
    RunStarted,
    RunStep,
    RunFinished,
    ExtractionFlagged,
    JobDead,
    SuggestionDismissed,
}

impl EventType {
    /// Every type, for validation of webhook subscriptions and docs.
    pub const ALL: [EventType; 19] = [
        EventType::ProposalReady,
        EventType::AutoCreateFailed,
        EventType::ApprovalCreated,
        EventType::ApprovalExpiring,
        EventType::ApprovalExpired,
        EventType::ApprovalStale,
        EventType::ApprovalDecided,
        EventType::SuggestionCreated,
        EventType::BudgetThreshold,
        EventType::RunFailed,
        EventType::ProposalAccepted,
        EventType::ProposalRejected,
        EventType::AdminChanged,
        EventType::RunStarted,
        EventType::RunStep,
        EventType::RunFinished,
        EventType::ExtractionFlagged,
        EventType::JobDead,
        EventType::SuggestionDismissed,
    ];

    /// The name consumers see, e.g. `approval.decided`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::ProposalReady => "proposal.ready",
            EventType::AutoCreateFailed => "auto_create.failed",
            EventType::ApprovalCreated => "approval.created",
            EventType::ApprovalExpiring => "approval.expiring",
            EventType::ApprovalExpired => "approval.expired",
            EventType::ApprovalStale => "approval.stale",
            EventType::ApprovalDecided => "approval.decided",
            EventType::SuggestionCreated => "suggestion.created",
            EventType::BudgetThreshold => "budget.threshold",
            EventType::RunFailed => "run.failed",
            EventType::ProposalAccepted => "proposal.accepted",
            EventType::ProposalRejected => "proposal.rejected",
            EventType::AdminChanged => "admin.changed",
            EventType::RunStarted => "run.started",
            EventType::RunStep => "run.step",
            EventType::RunFinished => "run.finished",
            EventType::ExtractionFlagged => "extraction.flagged",
            EventType::JobDead => "job.dead",
            EventType::SuggestionDismissed => "suggestion.dismissed",
        }
    }

    /// The type named `name`, if there is one.
    pub fn parse(name: &str) -> Option<EventType> {
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }
}

/// An event to write.
#[derive(Debug, Clone)]
pub struct NewEvent<'a> {
    pub org_id: Uuid,
    pub kind: EventType,
    /// What the event is about (an approval, run, document or suggestion id).
    pub subject_id: Option<Uuid>,
    pub occurred_at: DateTime<Utc>,
    /// Small: ids, states, counts. Never document text or tool arguments (personal data).
    pub payload: &'a Value,
    /// Same key twice → written once (a reclaimed attempt repeating its cause).
    pub dedupe_key: Option<&'a str>,
}

/// In the OpenAPI document: a string, one of the wire names of [`EventType::ALL`].
impl utoipa::PartialSchema for EventType {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .description(Some("The kind of event, e.g. `approval.decided`."))
            .enum_values(Some(Self::ALL.iter().map(|t| t.as_str())))
            .into()
    }
}

impl utoipa::ToSchema for EventType {}

/// A stored event.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct EventRow {
    pub id: i64,
    pub org_id: Uuid,
    #[sqlx(rename = "type")]
    #[serde(rename = "type")]
    pub kind: String,
    pub subject_id: Option<Uuid>,
    pub occurred_at: DateTime<Utc>,
    pub payload: Value,
}

/// Writes an event on `conn` (the cause's transaction). `None` when its dedupe key was taken.
pub async fn emit(conn: &mut PgConnection, e: &NewEvent<'_>) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar(
        "INSERT INTO agentd_events (org_id, type, subject_id, occurred_at, payload, dedupe_key)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (dedupe_key) DO NOTHING RETURNING id",
    )
    .bind(e.org_id)
    .bind(e.kind.as_str())
    .bind(e.subject_id)
    .bind(e.occurred_at)
    .bind(e.payload)
    .bind(e.dedupe_key)
    .fetch_optional(conn)
    .await
}

/// Writes one event per `(org, subject, payload)` in one statement; the dedupe key of each is
/// `{type}:{subject}`. Returns how many were written.
pub async fn emit_many(
    conn: &mut PgConnection,
    kind: EventType,
    rows: &[(Uuid, Uuid, Value)],
    now: DateTime<Utc>,
) -> sqlx::Result<u64> {
    if rows.is_empty() {
        return Ok(0);
    }
    let orgs: Vec<Uuid> = rows.iter().map(|r| r.0).collect();
    let subjects: Vec<Uuid> = rows.iter().map(|r| r.1).collect();
    let payloads: Vec<&Value> = rows.iter().map(|r| &r.2).collect();
    let done = sqlx::query(
        "INSERT INTO agentd_events (org_id, type, subject_id, occurred_at, payload, dedupe_key)
         SELECT o, $4, s, $5, p, $4 || ':' || s
           FROM unnest($1::uuid[], $2::uuid[], $3::jsonb[]) AS x(o, s, p)
         ON CONFLICT (dedupe_key) DO NOTHING",
    )
    .bind(&orgs)
    .bind(&subjects)
    .bind(&payloads)
    .bind(kind.as_str())
    .bind(now)
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Why a cursor read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The cursor names no event of this org (never existed, another org's, or purged).
    #[error("cursor {0} names no event of this organisation; restart from 0")]
    UnknownCursor(i64),
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
}

/// The org's readable events after a cursor ($1 org, $2 cursor, $3 types, $4 limit).
const LIST_AFTER: &str =
    "WITH cur AS (SELECT tx, id FROM agentd_events WHERE id = $2 AND org_id = $1)
     SELECT (SELECT count(*) FROM cur) = 1 OR $2 = 0 AS known, e.id, e.org_id, e.type,
            e.subject_id, e.occurred_at, e.payload
       FROM (SELECT 1) one
       LEFT JOIN LATERAL (
         SELECT * FROM agentd_events e
          WHERE e.org_id = $1
            AND e.tx < pg_snapshot_xmin(pg_current_snapshot())
            AND ($2 = 0 OR (e.tx, e.id) > (SELECT tx, id FROM cur))
            AND (cardinality($3::text[]) = 0 OR e.type = ANY($3))
          ORDER BY e.tx, e.id LIMIT $4) e ON true";

/// [`LIST_AFTER`] about $5: its subject, or the document or run its payload names (the indexes
/// of migration 0104).
const LIST_AFTER_ABOUT: &str =
    "WITH cur AS (SELECT tx, id FROM agentd_events WHERE id = $2 AND org_id = $1)
     SELECT (SELECT count(*) FROM cur) = 1 OR $2 = 0 AS known, e.id, e.org_id, e.type,
            e.subject_id, e.occurred_at, e.payload
       FROM (SELECT 1) one
       LEFT JOIN LATERAL (
         SELECT * FROM agentd_events e
          WHERE e.org_id = $1
            AND e.tx < pg_snapshot_xmin(pg_current_snapshot())
            AND ($2 = 0 OR (e.tx, e.id) > (SELECT tx, id FROM cur))
            AND (cardinality($3::text[]) = 0 OR e.type = ANY($3))
            AND (e.subject_id = $5 OR e.payload->>'document_id' = $5::text
                 OR e.payload->>'run_id' = $5::text)
          ORDER BY e.tx, e.id LIMIT $4) e ON true";

/// Up to `limit` events of `org_id` after the event `after` (0: from the start) in stream order,
/// only those no running transaction can precede. `types`: only these (empty: all).
pub async fn list_after<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    after: i64,
    types: &[&str],
    limit: i64,
) -> Result<Vec<EventRow>, ReadError> {
    list_after_about(exec, org_id, after, types, None, limit).await
}

/// As [`list_after`], only the events about `subject` (`None`: all): those whose subject it is,
/// or whose payload names it as its `document_id` or `run_id` — so a document id gives its
/// auto-create runs' events too (`run.*`, `extraction.flagged`, `job.dead`), and a run id its
/// approvals'. The cursor is still any of the org's events.
pub async fn list_after_about<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    after: i64,
    types: &[&str],
    subject: Option<Uuid>,
    limit: i64,
) -> Result<Vec<EventRow>, ReadError> {
    // Two statements, not one with `$5 IS NULL OR …`: a prepared statement's generic plan
    // could then use neither the position index nor the subject's.
    let q = match subject {
        None => sqlx::query(LIST_AFTER),
        Some(_) => sqlx::query(LIST_AFTER_ABOUT),
    }
    .bind(org_id)
    .bind(after)
    .bind(types)
    .bind(limit);
    let q = match subject {
        Some(s) => q.bind(s),
        None => q,
    };
    let rows: Vec<(bool, Option<EventRow>)> = q
        .try_map(|row: sqlx::postgres::PgRow| {
            use sqlx::Row;
            let known: bool = row.try_get("known")?;
            let id: Option<i64> = row.try_get("id")?;
            let event = match id {
                Some(id) => Some(EventRow {
                    id,
                    org_id: row.try_get("org_id")?,
                    kind: row.try_get("type")?,
                    subject_id: row.try_get("subject_id")?,
                    occurred_at: row.try_get("occurred_at")?,
                    payload: row.try_get("payload")?,
                }),
                None => None,
            };
            Ok((known, event))
        })
        .fetch_all(exec)
        .await?;
    if !rows.first().is_some_and(|r| r.0) {
        return Err(ReadError::UnknownCursor(after));
    }
    Ok(rows.into_iter().filter_map(|r| r.1).collect())
}

/// One event of `org_id` by id (visible or not to a cursor yet).
pub async fn get<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    id: i64,
) -> sqlx::Result<Option<EventRow>> {
    sqlx::query_as(
        "SELECT id, org_id, type, subject_id, occurred_at, payload FROM agentd_events
          WHERE org_id = $1 AND id = $2",
    )
    .bind(org_id)
    .bind(id)
    .fetch_optional(exec)
    .await
}

/// How many events the org has, readable by a cursor yet or not.
pub async fn count_written<'e, E: PgExecutor<'e>>(exec: E, org_id: Uuid) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM agentd_events WHERE org_id = $1")
        .bind(org_id)
        .fetch_one(exec)
        .await
}

/// The id of the org's last readable event in stream order (0: none): a stream that starts
/// "from now" starts after it.
pub async fn stream_end<'e, E: PgExecutor<'e>>(exec: E, org_id: Uuid) -> sqlx::Result<i64> {
    let id: Option<i64> = sqlx::query_scalar(
        "SELECT id FROM agentd_events
          WHERE org_id = $1 AND tx < pg_snapshot_xmin(pg_current_snapshot())
          ORDER BY tx DESC, id DESC LIMIT 1",
    )
    .bind(org_id)
    .fetch_optional(exec)
    .await?;
    Ok(id.unwrap_or(0))
}

//! SQL for `suggestions` and for the org overview the nightly job reads before writing them.
//! A suggestion is unique per (org, kind, subject, night), and an org gets at most a capped
//! number per night; both are decided under a per-(org, night) advisory lock, so two
//! concurrent runs cannot overshoot the cap.

use super::documents::{clean_json, clean_text};
use super::sql;
pub use super::states::SuggestionStatus;
use chrono::{DateTime, NaiveDate, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgConnection;
use std::collections::BTreeMap;
use uuid::Uuid;

/// What a suggestion says: what it is about (kind, subject and night: one per org), its text
/// and the action it proposes. A new suggestion is written from these.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct SuggestionFields {
    pub kind: String,
    /// A document id, or '' for the org as a whole.
    pub subject: String,
    pub night: NaiveDate,
    pub title: String,
    pub message: String,
    pub document_id: Option<Uuid>,
    #[schema(value_type = Option<Object>)]
    pub proposed_action: Option<Value>,
}

/// What `create` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// A new suggestion.
    New(Uuid),
    /// One with the same (kind, subject, night) exists; nothing was written.
    Duplicate(Uuid),
    /// The org already has `cap` suggestions this night; nothing was written.
    CapReached { cap: u32 },
    /// A person dismissed this kind of suggestion for this subject recently
    /// ([`DISMISSED_DAYS`]); nothing was written.
    Dismissed {
        at: DateTime<Utc>,
        reason: Option<String>,
    },
}

/// A dismissed suggestion keeps the nightly run from suggesting the same kind for the same
/// subject for this many days.
pub const DISMISSED_DAYS: i64 = 14;

/// Writes a suggestion, `pending`, unless it duplicates one or the night's cap is reached.
pub async fn create(
    conn: &mut PgConnection,
    org_id: Uuid,
    s: &SuggestionFields,
    cap: Option<u32>,
    run_id: Option<Uuid>,
    now: DateTime<Utc>,
) -> sqlx::Result<Created> {
    // Serialises the duplicate and cap checks per (org, night) until the transaction ends.
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1::text || '/' || $2::text, 77))")
        .bind(org_id)
        .bind(s.night)
        .execute(&mut *conn)
        .await?;
    let subject = clean_text(&s.subject).into_owned();
    if let Some(id) = find(conn, org_id, &s.kind, &subject, s.night).await? {
        return Ok(Created::Duplicate(id));
    }
    let since = now - chrono::Duration::days(DISMISSED_DAYS);
    if let Some((at, reason)) = recently_dismissed(conn, org_id, &s.kind, &subject, since).await? {
        return Ok(Created::Dismissed { at, reason });
    }
    if let Some(cap) = cap {
        let n = count_for_night(conn, org_id, s.night).await?;
        if n >= i64::from(cap) {
            return Ok(Created::CapReached { cap });
        }
    }
    let id: Option<Uuid> = sqlx::query_scalar(
        "INSERT INTO suggestions (id, org_id, kind, subject, night, title, message, document_id,
                                  proposed_action, status, run_id, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'pending', $10, $11)
         ON CONFLICT (org_id, kind, subject, night) DO NOTHING
      RETURNING id",
    )
    .bind(Uuid::now_v7())
    .bind(org_id)
    .bind(clean_text(&s.kind))
    .bind(&subject)
    .bind(s.night)
    .bind(clean_text(&s.title))
    .bind(clean_text(&s.message))
    .bind(s.document_id)
    .bind(s.proposed_action.as_ref().map(clean_json))
    .bind(run_id)
    .bind(now)
    .fetch_optional(&mut *conn)
    .await?;
    match id {
        Some(id) => {
            let payload = serde_json::json!({
                "suggestion_id": id, "kind": s.kind, "document_id": s.document_id,
                "run_id": run_id, "night": s.night,
                "has_action": s.proposed_action.is_some(),
            });
            let key = format!("suggestion.created:{id}");
            super::events::emit(
                conn,
                &super::events::NewEvent {
                    org_id,
                    kind: super::events::EventType::SuggestionCreated,
                    subject_id: Some(id),
                    occurred_at: now,
                    payload: &payload,
                    dedupe_key: Some(&key),
                },
            )
            .await?;
            Ok(Created::New(id))
        }
        None => find(conn, org_id, &s.kind, &subject, s.night)
            .await?
            .map(Created::Duplicate)
            .ok_or(sqlx::Error::RowNotFound),
    }
}

async fn find(
    conn: &mut PgConnection,
    org_id: Uuid,
    kind: &str,
    subject: &str,
    night: NaiveDate,
) -> sqlx::Result<Option<Uuid>> {
    sqlx::query_scalar(
        "SELECT id FROM suggestions
          WHERE org_id = $1 AND kind = $2 AND subject = $3 AND night = $4",
    )
    .bind(org_id)
    .bind(clean_text(kind))
    .bind(subject)
    .bind(night)
    .fetch_optional(conn)
    .await
}

/// Suggestions this org has for `night`.
pub async fn count_for_night(
    conn: &mut PgConnection,
    org_id: Uuid,
    night: NaiveDate,
) -> sqlx::Result<i64> {
    let count = "SELECT count(*) FROM suggestions WHERE org_id = $1 AND night = $2";
    sql::scalar(count, org_id, night).fetch_one(conn).await
}

/// A suggestion as stored: what it says, and where it is in its life.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct SuggestionRow {
    pub id: Uuid,
    #[serde(flatten)]
    #[sqlx(flatten)]
    pub fields: SuggestionFields,
    pub status: SuggestionStatus,
    pub run_id: Option<Uuid>,
    pub status_reason: Option<String>,
}

/// Read whole, as [`super::prompts::PromptRow`] is: fields are taken by column name.
impl sql::Table for SuggestionRow {
    const SELECT: &'static str = "SELECT * FROM suggestions";
}

/// A document waiting on a human: proposed for longer than the threshold.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct WaitingProposal {
    pub id: Uuid,
    pub name: String,
    /// Whole days since the document last changed (when it became `proposed`).
    pub age_days: i32,
}

/// A document whose auto-create failed.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct FailedDocument {
    pub id: Uuid,
    pub name: String,
    pub error: Option<String>,
}

/// A document by id and name.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct DocumentRef {
    pub id: Uuid,
    pub name: String,
}

/// A document's latest extraction, made with an older version of its schema.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct OutdatedExtraction {
    pub id: Uuid,
    pub document_id: Uuid,
    pub document_name: String,
    pub schema_id: Uuid,
    pub schema_version: i32,
    pub latest_schema_version: i32,
}

/// The org's state in numbers and signals, computed in SQL.
#[derive(Debug, Clone, Serialize)]
pub struct Overview {
    pub documents_total: i64,
    pub documents_by_status: BTreeMap<String, i64>,
    pub tags: i64,
    pub schemas: i64,
    pub prompts: i64,
    pub waiting_proposals: Vec<WaitingProposal>,
    pub failed_auto_creates: Vec<FailedDocument>,
    /// Untagged documents while the org has tags (0 when it has none).
    pub untagged_total: i64,
    pub untagged_documents: Vec<DocumentRef>,
    pub outdated_extractions: Vec<OutdatedExtraction>,
    pub suggestions_this_night: i64,
}

impl Overview {
    /// Something worth a suggestion: a proposal waiting, a failed auto-create, untagged
    /// documents while tags exist, or an extraction on an old schema version.
    pub fn has_signals(&self) -> bool {
        !self.waiting_proposals.is_empty()
            || !self.failed_auto_creates.is_empty()
            || self.untagged_total > 0
            || !self.outdated_extractions.is_empty()
    }
}

/// Computes the overview of one org. `waiting_after_days`: how long a proposal may wait before
/// it is a signal; `now` comes from the Clock; lists are capped at `limit`.
pub async fn overview(
    conn: &mut PgConnection,
    org_id: Uuid,
    now: DateTime<Utc>,
    night: NaiveDate,
    waiting_after_days: i32,
    limit: i64,
) -> sqlx::Result<Overview> {
    let by_status: Vec<(String, i64)> = sqlx::query_as(
        "SELECT auto_create_status, count(*) FROM documents WHERE org_id = $1
          GROUP BY 1 ORDER BY 1",
    )
    .bind(org_id)
    .fetch_all(&mut *conn)
    .await?;
    let (tags, schemas, prompts, suggestions_this_night): (i64, i64, i64, i64) = sql::bound(
        "SELECT (SELECT count(*) FROM tags WHERE org_id = $1),
                (SELECT count(DISTINCT schema_id) FROM schemas WHERE org_id = $1),
                (SELECT count(DISTINCT prompt_id) FROM prompts WHERE org_id = $1),
                (SELECT count(*) FROM suggestions WHERE org_id = $1 AND night = $2)",
        org_id,
        night,
    )
    .fetch_one(&mut *conn)
    .await?;
    let waiting_proposals = sqlx::query_as::<_, WaitingProposal>(
        "SELECT id, name, floor(extract(epoch FROM ($2 - updated_at)) / 86400)::int AS age_days
           FROM documents
          WHERE org_id = $1 AND auto_create_status = 'proposed'
            AND updated_at < $2 - $3 * interval '1 day'
          ORDER BY updated_at, id
          LIMIT $4",
    )
    .bind(org_id)
    .bind(now)
    .bind(waiting_after_days)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?;
    let failed_auto_creates = sql::bound::<FailedDocument>(
        "SELECT id, name, auto_create_error AS error FROM documents
          WHERE org_id = $1 AND auto_create_status = 'failed'
          ORDER BY updated_at DESC, id
          LIMIT $2",
        org_id,
        limit,
    )
    .fetch_all(&mut *conn)
    .await?;
    let untagged: Vec<(Uuid, String, i64)> = sql::bound(
        "SELECT id, name, count(*) OVER () FROM documents
          WHERE org_id = $1 AND cardinality(tag_ids) = 0
            AND EXISTS (SELECT 1 FROM tags WHERE org_id = $1)
          ORDER BY created_at DESC, id
          LIMIT $2",
        org_id,
        limit,
    )
    .fetch_all(&mut *conn)
    .await?;
    let outdated_extractions = sql::bound::<OutdatedExtraction>(
        "SELECT e.id, e.document_id, d.name AS document_name, e.schema_id, e.schema_version,
                s.latest_version AS latest_schema_version
           FROM (SELECT DISTINCT ON (document_id) id, document_id, schema_id, schema_version, seq
                   FROM extractions WHERE org_id = $1
                  ORDER BY document_id, seq DESC) e
           JOIN (SELECT schema_id, max(version) AS latest_version FROM schemas
                  WHERE org_id = $1 GROUP BY schema_id) s ON s.schema_id = e.schema_id
           JOIN documents d ON d.id = e.document_id AND d.org_id = $1
          WHERE e.schema_version < s.latest_version
          ORDER BY e.seq DESC
          LIMIT $2",
        org_id,
        limit,
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(Overview {
        documents_total: by_status.iter().map(|(_, n)| n).sum(),
        documents_by_status: by_status.into_iter().collect(),
        tags,
        schemas,
        prompts,
        waiting_proposals,
        failed_auto_creates,
        untagged_total: untagged.first().map(|r| r.2).unwrap_or(0),
        untagged_documents: untagged
            .into_iter()
            .map(|(id, name, _)| DocumentRef { id, name })
            .collect(),
        outdated_extractions,
        suggestions_this_night,
    })
}

/// Marks a suggestion `acted` (its approval executed), unless it was dismissed or expired.
pub async fn mark_acted(
    conn: &mut PgConnection,
    org_id: Uuid,
    id: Uuid,
    by: &str,
    now: DateTime<Utc>,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE suggestions SET status = 'acted', status_changed_at = $3, status_by = $4
          WHERE org_id = $1 AND id = $2 AND status IN ('pending', 'shown')",
    )
    .bind(org_id)
    .bind(id)
    .bind(now)
    .bind(by)
    .execute(conn)
    .await?;
    Ok(())
}

/// What a person's transition did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// The suggestion moved (its state now).
    Done(SuggestionStatus),
    /// It is already in a state the transition cannot leave (that state).
    Refused(SuggestionStatus),
    NotFound,
}

/// `pending → shown` (shown again: no change), or `pending|shown → dismissed` with a reason.
pub async fn transition(
    conn: &mut PgConnection,
    org_id: Uuid,
    id: Uuid,
    to: SuggestionStatus,
    reason: Option<&str>,
    by: &str,
    now: DateTime<Utc>,
) -> sqlx::Result<Transition> {
    let current = "SELECT status FROM suggestions WHERE org_id = $1 AND id = $2 FOR UPDATE";
    let current = sql::scalar(current, org_id, id);
    let Some(current): Option<SuggestionStatus> = current.fetch_optional(&mut *conn).await? else {
        return Ok(Transition::NotFound);
    };
    let from = to.reachable_from();
    if current == to && !from.is_empty() {
        return Ok(Transition::Done(current));
    }
    if !from.contains(&current) {
        return Ok(Transition::Refused(current));
    }
    sqlx::query(
        "UPDATE suggestions SET status = $3, status_reason = $4, status_changed_at = $5,
                status_by = $6
          WHERE org_id = $1 AND id = $2",
    )
    .bind(org_id)
    .bind(id)
    .bind(to)
    .bind(reason.map(clean_text))
    .bind(now)
    .bind(by)
    .execute(conn)
    .await?;
    Ok(Transition::Done(to))
}

/// Suggestions still `pending` or `shown` whose approval expired, or (without an approval)
/// older than `max_age`, become `expired`. Returns how many.
pub async fn expire(
    conn: &mut PgConnection,
    now: DateTime<Utc>,
    max_age: chrono::Duration,
) -> sqlx::Result<u64> {
    let done = sqlx::query(
        "UPDATE suggestions s SET status = 'expired', status_changed_at = $1,
                status_by = 'system:approval_expiry'
          WHERE s.status IN ('pending', 'shown')
            AND (EXISTS (SELECT 1 FROM pending_approvals p
                          WHERE p.org_id = s.org_id AND p.suggestion_id = s.id
                            AND p.status IN ('expired', 'stale')
                            AND p.reproposed_as IS NULL
                            AND NOT EXISTS (SELECT 1 FROM pending_approvals q
                                             WHERE q.org_id = s.org_id AND q.suggestion_id = s.id
                                               AND q.status = 'pending'))
                 OR (s.created_at < $1 - $2::interval
                     AND NOT EXISTS (SELECT 1 FROM pending_approvals p
                                      WHERE p.org_id = s.org_id AND p.suggestion_id = s.id
                                        AND p.status = 'pending')))",
    )
    .bind(now)
    .bind(max_age)
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// A dismissal of the same kind and subject since `since`: `(when, reason)`.
pub async fn recently_dismissed(
    conn: &mut PgConnection,
    org_id: Uuid,
    kind: &str,
    subject: &str,
    since: DateTime<Utc>,
) -> sqlx::Result<Option<(DateTime<Utc>, Option<String>)>> {
    sqlx::query_as(
        "SELECT status_changed_at, status_reason FROM suggestions
          WHERE org_id = $1 AND kind = $2 AND subject = $3 AND status = 'dismissed'
            AND status_changed_at >= $4
          ORDER BY status_changed_at DESC LIMIT 1",
    )
    .bind(org_id)
    .bind(kind)
    .bind(subject)
    .bind(since)
    .fetch_optional(conn)
    .await
}

/// How many suggestions run `run_id` made for people (the nightly goal, `agent::goals`): its
/// `create_suggestion` calls that ran without an error — a suggestion the night already had
/// (`duplicate: true`) counts, it is there — and the actions it proposed for approval.
pub async fn made_by_run(conn: &mut PgConnection, org_id: Uuid, run_id: Uuid) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "SELECT count(*) FROM audit_events WHERE org_id = $1 AND run_id = $2 AND NOT is_error
            AND (decision = 'proposed'
                 OR (tool = 'create_suggestion' AND decision = 'auto_approved'))",
    )
    .bind(org_id)
    .bind(run_id)
    .fetch_one(conn)
    .await
}

/// Whether run `run_id` read the org's overview (`org_overview` ran without an error).
pub async fn overview_read(
    conn: &mut PgConnection,
    org_id: Uuid,
    run_id: Uuid,
) -> sqlx::Result<bool> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM audit_events WHERE org_id = $1 AND run_id = $2
                          AND tool = 'org_overview' AND NOT is_error
                          AND decision = 'auto_approved')",
    )
    .bind(org_id)
    .bind(run_id)
    .fetch_one(conn)
    .await
}

//! SQL for `documents`, and the text boundary every store file uses: PostgreSQL `text` and
//! `jsonb` cannot hold NUL, so whatever is written goes through [`clean_text`] /
//! [`clean_json`] first. Reads of document text are bounded in SQL (`left(text, n)`), so a
//! 5 MB document never crosses the wire whole for an excerpt.

use super::sql;
pub use super::states::AutoCreateStatus;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgConnection;
use std::borrow::Cow;
use uuid::Uuid;

/// `s` without NUL characters (PostgreSQL text cannot store them).
pub fn clean_text(s: &str) -> Cow<'_, str> {
    if s.contains('\0') {
        Cow::Owned(s.replace('\0', ""))
    } else {
        Cow::Borrowed(s)
    }
}

/// Bytes from outside (a file, an upload) as storable text: invalid UTF-8 becomes U+FFFD and
/// NUL bytes are dropped.
pub fn text_from_bytes(bytes: &[u8]) -> String {
    clean_text(&String::from_utf8_lossy(bytes)).into_owned()
}

/// Most characters of an error message stored anywhere.
pub const MAX_ERROR_CHARS: usize = 2_000;

/// Error text as stored anywhere (runs, documents, audit, approvals): NUL removed, at most
/// [`MAX_ERROR_CHARS`] characters.
pub fn bounded_error(msg: &str) -> String {
    let clean = clean_text(msg);
    if clean.chars().count() <= MAX_ERROR_CHARS {
        return clean.into_owned();
    }
    let cut: String = clean.chars().take(MAX_ERROR_CHARS).collect();
    format!("{cut}… [truncated]")
}

/// `v` with NUL removed from every string and key (jsonb rejects `\u0000`).
pub fn clean_json(v: &Value) -> Value {
    match v {
        Value::String(s) => Value::String(clean_text(s).into_owned()),
        Value::Array(a) => Value::Array(a.iter().map(clean_json).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| (clean_text(k).into_owned(), clean_json(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Clamps a character budget to what SQL's `left()` takes.
fn chars_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// One document with a bounded excerpt of its text.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct DocumentView {
    pub id: Uuid,
    pub name: String,
    pub metadata: Value,
    pub tag_ids: Vec<Uuid>,
    pub auto_create_status: AutoCreateStatus,
    pub auto_create_error: Option<String>,
    #[serde(flatten)]
    #[sqlx(flatten)]
    pub proposed: super::auto_create::Proposed,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// At most the requested number of characters.
    pub text: String,
    /// Length of the whole text, in characters.
    pub text_chars: i64,
    /// Form-feed separated pages (an empty text is one empty page).
    pub page_count: i64,
}

/// A document of this org with the first `excerpt_chars` characters of its text.
pub async fn get(
    conn: &mut PgConnection,
    org_id: Uuid,
    id: Uuid,
    excerpt_chars: usize,
) -> sqlx::Result<Option<DocumentView>> {
    sqlx::query_as::<_, DocumentView>(
        "SELECT id, name, metadata, tag_ids, auto_create_status, auto_create_error,
                proposed_schema_id, proposed_schema_version, proposed_prompt_id,
                proposed_prompt_version, proposed_extraction_id, created_at, updated_at,
                left(t, $3) AS text,
                char_length(t)::bigint AS text_chars,
                (length(t) - length(replace(t, E'\\f', '')) + 1)::bigint AS page_count
           FROM (SELECT *, COALESCE(text, '') AS t FROM documents
                  WHERE org_id = $1 AND id = $2) d",
    )
    .bind(org_id)
    .bind(id)
    .bind(chars_i32(excerpt_chars))
    .fetch_optional(conn)
    .await
}

/// One page (or the whole text) of a document, bounded.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct PageView {
    pub id: Uuid,
    pub page_count: i64,
    /// At most the requested number of characters of the page.
    pub text: String,
    /// Length of the whole page, in characters.
    pub text_chars: i64,
}

/// Page `page` (1-based, pages split on form feed `\x0c`) of a document of this org, or the
/// whole text when `page` is None; a page past the end comes back empty (check `page_count`).
pub async fn get_page(
    conn: &mut PgConnection,
    org_id: Uuid,
    id: Uuid,
    page: Option<i32>,
    excerpt_chars: usize,
) -> sqlx::Result<Option<PageView>> {
    sqlx::query_as::<_, PageView>(
        "SELECT d.id, x.page_count, left(x.p, $4) AS text, char_length(x.p)::bigint AS text_chars
           FROM (SELECT id, COALESCE(text, '') AS t FROM documents
                  WHERE org_id = $1 AND id = $2) d
          CROSS JOIN LATERAL (
                SELECT CASE WHEN $3::int IS NULL THEN d.t ELSE split_part(d.t, E'\\f', $3::int) END AS p,
                       (length(d.t) - length(replace(d.t, E'\\f', '')) + 1)::bigint AS page_count) x",
    )
    .bind(org_id)
    .bind(id)
    .bind(page)
    .bind(chars_i32(excerpt_chars))
    .fetch_optional(conn)
    .await
}

/// A row of the document list (`list`, and `GET /v1/documents` as `DocumentItem`): no text.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
#[schema(as = DocumentItem)]
pub struct DocumentSummary {
    pub id: Uuid,
    pub name: String,
    pub tag_ids: Vec<Uuid>,
    pub auto_create_status: AutoCreateStatus,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Filters of `list`; None means "any".
#[derive(Debug, Clone, Default)]
pub struct DocumentFilter {
    /// Case-insensitive substring of the name.
    pub name_search: Option<String>,
    /// Documents carrying all of these tags.
    pub tag_ids: Option<Vec<Uuid>>,
    /// `auto_create_status`.
    pub status: Option<AutoCreateStatus>,
    pub limit: i64,
}

/// This org's documents, newest first.
pub async fn list(
    conn: &mut PgConnection,
    org_id: Uuid,
    filter: &DocumentFilter,
) -> sqlx::Result<Vec<DocumentSummary>> {
    sqlx::query_as::<_, DocumentSummary>(
        "SELECT id, name, tag_ids, auto_create_status, created_at, updated_at
           FROM documents
          WHERE org_id = $1
            AND ($2::text IS NULL OR strpos(lower(name), lower($2::text)) > 0)
            AND ($3::uuid[] IS NULL OR tag_ids @> $3::uuid[])
            AND ($4::text IS NULL OR auto_create_status = $4::text)
          ORDER BY created_at DESC, id DESC
          LIMIT $5",
    )
    .bind(org_id)
    .bind(filter.name_search.as_deref().map(clean_text))
    .bind(filter.tag_ids.as_deref())
    .bind(filter.status.map(AutoCreateStatus::as_str))
    .bind(filter.limit)
    .fetch_all(conn)
    .await
}

/// Inserts a document (text and name cleaned of NUL); returns its id.
pub async fn insert(
    conn: &mut PgConnection,
    org_id: Uuid,
    name: &str,
    text: Option<&str>,
    metadata: &Value,
    now: DateTime<Utc>,
) -> sqlx::Result<Uuid> {
    let id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO documents (id, org_id, name, text, metadata, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $6)",
    )
    .bind(id)
    .bind(org_id)
    .bind(clean_text(name))
    .bind(text.map(clean_text))
    .bind(clean_json(metadata))
    .bind(now)
    .execute(conn)
    .await?;
    Ok(id)
}

/// Sets `tag_ids` (when given, replacing the set) and merges `metadata_patch` into the
/// metadata (top-level keys; a `null` value removes the key). Bumps `updated_at` strictly,
/// even under a frozen clock, so approvals' snapshots see the change. None: no such document.
pub async fn update(
    conn: &mut PgConnection,
    org_id: Uuid,
    id: Uuid,
    tag_ids: Option<&[Uuid]>,
    metadata_patch: Option<&Value>,
    now: DateTime<Utc>,
) -> sqlx::Result<Option<DocumentSummary>> {
    sqlx::query_as::<_, DocumentSummary>(
        "UPDATE documents SET
                tag_ids = COALESCE($3::uuid[], tag_ids),
                metadata = CASE WHEN $4::jsonb IS NULL THEN metadata ELSE (
                    SELECT COALESCE(jsonb_object_agg(key, value), '{}'::jsonb)
                      FROM jsonb_each((CASE WHEN jsonb_typeof(metadata) = 'object'
                                            THEN metadata ELSE '{}'::jsonb END) || $4::jsonb)
                     WHERE value <> 'null'::jsonb) END,
                updated_at = GREATEST($5, updated_at + interval '1 microsecond')
          WHERE org_id = $1 AND id = $2
      RETURNING id, name, tag_ids, auto_create_status, created_at, updated_at",
    )
    .bind(org_id)
    .bind(id)
    .bind(tag_ids)
    .bind(metadata_patch.map(clean_json))
    .bind(now)
    .fetch_optional(conn)
    .await
}

/// Deletes a document of this org (its extractions go with it) and erases its text from the
/// transcripts that carried it. False: no such document.
pub async fn delete(conn: &mut PgConnection, org_id: Uuid, id: Uuid) -> sqlx::Result<bool> {
    if !exists(&mut *conn, org_id, id).await? {
        return Ok(false);
    }
    crate::pii::retention::erase_document(&mut *conn, org_id, id).await?;
    let delete = "DELETE FROM documents WHERE org_id = $1 AND id = $2";
    Ok(sql::affected(conn, delete, org_id, id).await? > 0)
}

/// The snapshot of an action on this org's document `id` (what an approval's hash covers),
/// with its row locked until the transaction ends; `{"exists": false, "document_id": id}` when
/// the document is missing or another org's. Defined once, in SQL (migration 0090's
/// `document_snapshot`), which the set-based expiry sweep compares stored snapshots with.
pub async fn snapshot(conn: &mut PgConnection, org_id: Uuid, id: Uuid) -> sqlx::Result<Value> {
    sqlx::query_scalar(include_str!("sql/document_snapshot.sql"))
        .bind(org_id)
        .bind(id)
        .fetch_one(conn)
        .await
}

/// [`snapshot`] of many documents `(org_id, id)` in one statement, in id order, one for each
/// key; with `lock` their rows are locked (in id order). The expiry sweep re-validates a batch
/// of document approvals this way.
pub async fn snapshots(
    conn: &mut PgConnection,
    keys: &[(Uuid, Uuid)],
    lock: bool,
) -> sqlx::Result<Vec<(Uuid, Uuid, Value)>> {
    let sql = if lock {
        include_str!("sql/document_snapshots_locked.sql")
    } else {
        include_str!("sql/document_snapshots.sql")
    };
    let (orgs, ids): (Vec<Uuid>, Vec<Uuid>) = keys.iter().copied().unzip();
    sqlx::query_as(sql)
        .bind(&orgs)
        .bind(&ids)
        .fetch_all(conn)
        .await
}

/// Locks this org's document `id` until the transaction ends; false: no such document.
pub async fn lock(conn: &mut PgConnection, org_id: Uuid, id: Uuid) -> sqlx::Result<bool> {
    let lock = "SELECT id FROM documents WHERE org_id = $1 AND id = $2 FOR UPDATE";
    let locked: Option<Uuid> = sql::scalar(lock, org_id, id).fetch_optional(conn).await?;
    Ok(locked.is_some())
}

/// The document's version (migration 0061: a new number for every row version), if it exists.
pub async fn version(conn: &mut PgConnection, org_id: Uuid, id: Uuid) -> sqlx::Result<Option<i64>> {
    let version = "SELECT version FROM documents WHERE org_id = $1 AND id = $2";
    sql::scalar(version, org_id, id).fetch_optional(conn).await
}

/// The auto-create state of this org's document with this id; None: no such document.
pub async fn auto_create_status(
    conn: &mut PgConnection,
    org_id: Uuid,
    id: Uuid,
) -> sqlx::Result<Option<AutoCreateStatus>> {
    let status = "SELECT auto_create_status FROM documents WHERE org_id = $1 AND id = $2";
    sql::scalar(status, org_id, id).fetch_optional(conn).await
}

/// True if this org has a document with this id.
pub async fn exists(conn: &mut PgConnection, org_id: Uuid, id: Uuid) -> sqlx::Result<bool> {
    let exists = "SELECT EXISTS (SELECT 1 FROM documents WHERE org_id = $1 AND id = $2)";
    sql::scalar(exists, org_id, id).fetch_one(conn).await
}

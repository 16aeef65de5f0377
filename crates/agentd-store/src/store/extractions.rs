//! SQL for `extractions`: the structured result of running a prompt version (and its schema
//! version) over a document. "Latest" is by insertion order (`seq`), not by the Clock.

use super::documents::clean_json;
use super::sql::{self, Table};
pub use super::states::ExtractionStatus;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

/// An extraction.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct ExtractionRow {
    pub id: Uuid,
    pub document_id: Uuid,
    pub prompt_id: Uuid,
    pub prompt_version: i32,
    pub schema_id: Uuid,
    pub schema_version: i32,
    pub result: Value,
    pub status: ExtractionStatus,
    pub run_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    /// JSON pointers of values the document's text does not contain (migration 0068;
    /// [`crate::analysis::ground`]).
    pub ungrounded: Vec<String>,
}

impl Table for ExtractionRow {
    const SELECT: &'static str = "SELECT * FROM extractions";
}

/// What a new extraction was made from.
#[derive(Debug, Clone, Copy)]
pub struct ExtractionSource {
    pub document_id: Uuid,
    pub prompt_id: Uuid,
    pub prompt_version: i32,
    pub schema_id: Uuid,
    pub schema_version: i32,
}

/// Stores an extraction, status `proposed`, with the pointers of its values the document
/// does not contain.
#[allow(clippy::too_many_arguments)]
pub async fn insert(
    conn: &mut PgConnection,
    org_id: Uuid,
    src: ExtractionSource,
    result: &Value,
    ungrounded: &[String],
    run_id: Option<Uuid>,
    now: DateTime<Utc>,
) -> sqlx::Result<ExtractionRow> {
    sqlx::query_as(
        "INSERT INTO extractions (id, org_id, document_id, prompt_id, prompt_version, schema_id,
                                  schema_version, result, status, run_id, created_at, ungrounded)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'proposed', $9, $10, $11)
      RETURNING *",
    )
    .bind(Uuid::now_v7())
    .bind(org_id)
    .bind(src.document_id)
    .bind(src.prompt_id)
    .bind(src.prompt_version)
    .bind(src.schema_id)
    .bind(src.schema_version)
    .bind(clean_json(result))
    .bind(run_id)
    .bind(now)
    .bind(ungrounded)
    .fetch_one(conn)
    .await
}

/// The latest extraction of a document of this org; `lock` takes `FOR UPDATE`.
pub async fn latest_for_document(
    conn: &mut PgConnection,
    org_id: Uuid,
    document_id: Uuid,
    lock: bool,
) -> sqlx::Result<Option<ExtractionRow>> {
    let cond = "document_id = $2 ORDER BY seq DESC LIMIT 1";
    sql::rows(org_id, cond, document_id, lock)
        .fetch_optional(conn)
        .await
}

/// Replaces the result of a `proposed` extraction of this org, and its ungrounded pointers.
/// None: no such proposed extraction (missing, another org's, or already accepted).
pub async fn update_result(
    conn: &mut PgConnection,
    org_id: Uuid,
    id: Uuid,
    result: &Value,
    ungrounded: &[String],
) -> sqlx::Result<Option<ExtractionRow>> {
    sqlx::query_as(
        "UPDATE extractions SET result = $3, ungrounded = $4
          WHERE org_id = $1 AND id = $2 AND status = 'proposed'
      RETURNING *",
    )
    .bind(org_id)
    .bind(id)
    .bind(clean_json(result))
    .bind(ungrounded)
    .fetch_optional(conn)
    .await
}

/// What deleting a document of this org would remove of its extractions, as a fingerprint for
/// `delete_document`'s snapshot: how many there are and SHA-256 (hex) over their ids and results.
/// Not their status: accepting the document's proposal changes nothing a deletion removes.
pub async fn fingerprint(
    conn: &mut PgConnection,
    org_id: Uuid,
    document_id: Uuid,
) -> sqlx::Result<Value> {
    let (count, sha256): (i64, String) = sqlx::query_as(
        "SELECT count(*),
                encode(sha256(convert_to(COALESCE(
                    string_agg(id::text || ':' || result::text, ',' ORDER BY id), ''), 'UTF8')),
                       'hex')
           FROM extractions WHERE org_id = $1 AND document_id = $2",
    )
    .bind(org_id)
    .bind(document_id)
    .fetch_one(conn)
    .await?;
    Ok(serde_json::json!({"count": count, "sha256": sha256}))
}

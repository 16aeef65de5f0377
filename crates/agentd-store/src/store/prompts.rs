//! SQL for `prompts`. Like schemas, prompts are versioned: `(prompt_id, version)` is a
//! revision, an update inserts version + 1, and each version points at one schema version.

use super::documents::clean_text;
use super::sql;
use super::versions;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

/// What a prompt version says; a new version is made from these.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct PromptFields {
    pub name: String,
    pub content: String,
    pub schema_id: Uuid,
    pub schema_version: i32,
    pub model: Option<String>,
    pub tag_ids: Vec<Uuid>,
}

/// One version of a prompt: its identity, what it says, and its state.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct PromptRow {
    pub prompt_id: Uuid,
    pub version: i32,
    #[serde(flatten)]
    #[sqlx(flatten)]
    pub fields: PromptFields,
    pub status: String,
    pub run_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

/// Read whole (`*`): `FromRow` takes each field, the flattened ones too, by its column's name,
/// so no list of columns can drift from the struct.
impl sql::Table for PromptRow {
    const SELECT: &'static str = "SELECT * FROM prompts";
}

versions::versioned!(PromptRow in "prompts", prompt_id, "prompt");

/// The prompt version this run wrote last (run_extraction's default prompt).
pub async fn latest_in_run(
    conn: &mut PgConnection,
    org_id: Uuid,
    run_id: Uuid,
) -> sqlx::Result<Option<PromptRow>> {
    let cond = "run_id = $2 ORDER BY seq DESC LIMIT 1";
    sql::rows(org_id, cond, run_id, false)
        .fetch_optional(conn)
        .await
}

/// Inserts a prompt version, status `proposed`.
/// The caller has checked that the schema version and tags belong to this org.
async fn insert(
    conn: &mut PgConnection,
    org_id: Uuid,
    prompt_id: Uuid,
    version: i32,
    f: &PromptFields,
    run_id: Option<Uuid>,
    now: DateTime<Utc>,
) -> sqlx::Result<PromptRow> {
    sqlx::query_as(
        "INSERT INTO prompts (prompt_id, version, org_id, name, content, schema_id,
                              schema_version, model, tag_ids, status, run_id, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'proposed', $10, $11)
      RETURNING *",
    )
    .bind(prompt_id)
    .bind(version)
    .bind(org_id)
    .bind(clean_text(&f.name))
    .bind(clean_text(&f.content))
    .bind(f.schema_id)
    .bind(f.schema_version)
    .bind(f.model.as_deref().map(clean_text))
    .bind(&f.tag_ids)
    .bind(run_id)
    .bind(now)
    .fetch_one(conn)
    .await
}

/// Creates version 1 of a new prompt.
pub async fn create(
    conn: &mut PgConnection,
    org_id: Uuid,
    f: &PromptFields,
    run_id: Option<Uuid>,
    now: DateTime<Utc>,
) -> sqlx::Result<PromptRow> {
    insert(conn, org_id, Uuid::now_v7(), 1, f, run_id, now).await
}

/// Inserts version `prev.version + 1` of `prev`'s prompt with the given fields. The caller
/// read `prev` with `latest(.., lock = true)`.
pub async fn create_version(
    conn: &mut PgConnection,
    org_id: Uuid,
    prev: &PromptRow,
    f: &PromptFields,
    run_id: Option<Uuid>,
    now: DateTime<Utc>,
) -> sqlx::Result<PromptRow> {
    insert(
        conn,
        org_id,
        prev.prompt_id,
        prev.version + 1,
        f,
        run_id,
        now,
    )
    .await
}

//! SQL for `prompts`. Like schemas, prompts are versioned: `(prompt_id, version)` is a
//! revision, an update inserts version + 1, and each version points at one schema version.

use super::documents::clean_text;
use super::sql::{self, row};
use super::versions;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

row! {
    /// One version of a prompt.
    #[derive(Debug, Clone, Serialize, sqlx::FromRow)]
    pub struct PromptRow in "prompts" {
        pub prompt_id: Uuid,
        pub version: i32,
        pub name: String,
        pub content: String,
        pub schema_id: Uuid,
        pub schema_version: i32,
        pub model: Option<String>,
        pub tag_ids: Vec<Uuid>,
        pub status: String,
        pub run_id: Option<Uuid>,
        pub created_at: DateTime<Utc>,
    }
}

versions::versioned!(PromptRow in "prompts", prompt_id, "prompt");

/// The fields of a new prompt version.
#[derive(Debug, Clone)]
pub struct PromptFields {
    pub name: String,
    pub content: String,
    pub schema_id: Uuid,
    pub schema_version: i32,
    pub model: Option<String>,
    pub tag_ids: Vec<Uuid>,
}

impl From<&PromptRow> for PromptFields {
    fn from(p: &PromptRow) -> Self {
        Self {
            name: p.name.clone(),
            content: p.content.clone(),
            schema_id: p.schema_id,
            schema_version: p.schema_version,
            model: p.model.clone(),
            tag_ids: p.tag_ids.clone(),
        }
    }
}

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
    sqlx::query_as(concat!(
        "INSERT INTO prompts (prompt_id, version, org_id, name, content, schema_id,
                              schema_version, model, tag_ids, status, run_id, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'proposed', $10, $11)
      RETURNING ",
        columns!()
    ))
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

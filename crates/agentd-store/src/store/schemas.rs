//! SQL for `schemas`. A schema is versioned: `(schema_id, version)` is a revision, and an
//! update inserts version + 1. Versions are immutable once written.

use super::documents::{clean_json, clean_text};
use super::sql::{self, Table};
use super::versions;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

/// One version of a schema.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct SchemaRow {
    pub schema_id: Uuid,
    pub version: i32,
    pub name: String,
    /// OpenAI structured-output `response_format`.
    pub response_format: Value,
    pub status: String,
    pub run_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

impl Table for SchemaRow {
    const SELECT: &'static str = "SELECT * FROM schemas";
}

// Deleting one (`versions::delete`): the caller checks for dependent prompts first (the
// foreign key would cascade to them).
versions::versioned!(SchemaRow in "schemas", schema_id, "schema");

/// Inserts version 1 of a new schema, status `proposed`.
pub async fn create(
    conn: &mut PgConnection,
    org_id: Uuid,
    name: &str,
    response_format: &Value,
    run_id: Option<Uuid>,
    now: DateTime<Utc>,
) -> sqlx::Result<SchemaRow> {
    insert(
        conn,
        org_id,
        Uuid::now_v7(),
        1,
        name,
        response_format,
        run_id,
        now,
    )
    .await
}

/// Inserts the next version of a schema of this org (same name), status `proposed`, with the
/// latest version locked. None: no such schema.
pub async fn create_version(
    conn: &mut PgConnection,
    org_id: Uuid,
    schema_id: Uuid,
    response_format: &Value,
    run_id: Option<Uuid>,
    now: DateTime<Utc>,
) -> sqlx::Result<Option<SchemaRow>> {
    let Some(prev) = versions::latest::<SchemaRow>(conn, org_id, schema_id, true).await? else {
        return Ok(None);
    };
    let version = prev.version + 1;
    let new = insert(
        conn,
        org_id,
        schema_id,
        version,
        &prev.name,
        response_format,
        run_id,
        now,
    );
    new.await.map(Some)
}

/// Inserts a schema version, status `proposed`.
#[allow(clippy::too_many_arguments)]
async fn insert(
    conn: &mut PgConnection,
    org_id: Uuid,
    schema_id: Uuid,
    version: i32,
    name: &str,
    response_format: &Value,
    run_id: Option<Uuid>,
    now: DateTime<Utc>,
) -> sqlx::Result<SchemaRow> {
    sqlx::query_as(
        "INSERT INTO schemas (schema_id, version, org_id, name, response_format, status, run_id,
                              created_at)
         VALUES ($1, $2, $3, $4, $5, 'proposed', $6, $7)
      RETURNING *",
    )
    .bind(schema_id)
    .bind(version)
    .bind(org_id)
    .bind(clean_text(name))
    .bind(clean_json(response_format))
    .bind(run_id)
    .bind(now)
    .fetch_one(conn)
    .await
}

/// Revids (`id:version`) of this org's prompt versions that reference the schema: what keeps
/// it from being deleted.
pub async fn dependent_prompts(
    conn: &mut PgConnection,
    org_id: Uuid,
    schema_id: Uuid,
) -> sqlx::Result<Vec<String>> {
    sql::scalar(
        "SELECT prompt_id::text || ':' || version FROM prompts
          WHERE org_id = $1 AND schema_id = $2
          ORDER BY prompt_id, version",
        org_id,
        schema_id,
    )
    .fetch_all(conn)
    .await
}

/// A schema `create_schema` may reuse: its latest version and the kind of document it was
/// made for (migration 0088).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ReuseCandidate {
    #[sqlx(flatten)]
    pub row: SchemaRow,
    pub document_kind: Option<String>,
}

/// Records the kind of document (`invoice`) a schema version was made for.
pub async fn set_document_kind(
    conn: &mut PgConnection,
    org_id: Uuid,
    schema_id: Uuid,
    version: i32,
    kind: &str,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE schemas SET document_kind = $4
          WHERE org_id = $1 AND schema_id = $2 AND version = $3",
    )
    .bind(org_id)
    .bind(schema_id)
    .bind(version)
    .bind(clean_text(kind))
    .execute(conn)
    .await?;
    Ok(())
}

/// The latest version of each of the org's schemas, newest first, at most `limit`, leaving out
/// the schemas of which run `run_id` made a version: what `create_schema` compares a new
/// schema with before adding one (`tools::schema_reuse`).
pub async fn reuse_candidates(
    conn: &mut PgConnection,
    org_id: Uuid,
    run_id: Uuid,
    limit: i64,
) -> sqlx::Result<Vec<ReuseCandidate>> {
    sqlx::query_as(
        "SELECT * FROM (SELECT DISTINCT ON (schema_id) * FROM schemas
                         WHERE org_id = $1 ORDER BY schema_id, version DESC) v
          WHERE NOT EXISTS (SELECT 1 FROM schemas o WHERE o.org_id = $1
                               AND o.schema_id = v.schema_id AND o.run_id = $2)
          ORDER BY created_at DESC, schema_id LIMIT $3",
    )
    .bind(org_id)
    .bind(run_id)
    .bind(limit)
    .fetch_all(conn)
    .await
}

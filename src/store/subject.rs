//! SQL behind the subject check: who created a schema or prompt, which document an extraction
//! belongs to. Every query filters by org, so another org's id reads as missing.

use super::sql;
use sqlx::PgConnection;
use uuid::Uuid;

/// The run that created `schema_id` (its first version): `None` when the schema does not exist
/// in `org_id`, `Some(None)` when a person (no run) created it.
pub async fn schema_creator(
    conn: &mut PgConnection,
    org_id: Uuid,
    schema_id: Uuid,
) -> Result<Option<Option<Uuid>>, sqlx::Error> {
    let first = "SELECT run_id FROM schemas WHERE org_id = $1 AND schema_id = $2
                  ORDER BY version LIMIT 1";
    sql::scalar(first, org_id, schema_id)
        .fetch_optional(conn)
        .await
}

/// The run that created `prompt_id` (its first version); as [`schema_creator`].
pub async fn prompt_creator(
    conn: &mut PgConnection,
    org_id: Uuid,
    prompt_id: Uuid,
) -> Result<Option<Option<Uuid>>, sqlx::Error> {
    let first = "SELECT run_id FROM prompts WHERE org_id = $1 AND prompt_id = $2
                  ORDER BY version LIMIT 1";
    sql::scalar(first, org_id, prompt_id)
        .fetch_optional(conn)
        .await
}

/// The document an extraction of `org_id` belongs to (`None`: no such extraction).
pub async fn extraction_document(
    conn: &mut PgConnection,
    org_id: Uuid,
    extraction_id: Uuid,
) -> Result<Option<Uuid>, sqlx::Error> {
    let document = "SELECT document_id FROM extractions WHERE org_id = $1 AND id = $2";
    sql::scalar(document, org_id, extraction_id)
        .fetch_optional(conn)
        .await
}

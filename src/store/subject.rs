//! SQL behind the subject check: who created a schema or prompt, which document an extraction
//! belongs to. Every query filters by org, so another org's id reads as missing.

use super::prompts::PromptRow;
use super::schemas::SchemaRow;
use super::{sql, versions};
use sqlx::PgConnection;
use uuid::Uuid;

/// The run that created `schema_id` (its first version): `None` when the schema does not exist
/// in `org_id`, `Some(None)` when a person (no run) created it.
pub async fn schema_creator(
    conn: &mut PgConnection,
    org_id: Uuid,
    schema_id: Uuid,
) -> Result<Option<Option<Uuid>>, sqlx::Error> {
    versions::creator::<SchemaRow>(conn, org_id, schema_id).await
}

/// The run that created `prompt_id` (its first version); as [`schema_creator`].
pub async fn prompt_creator(
    conn: &mut PgConnection,
    org_id: Uuid,
    prompt_id: Uuid,
) -> Result<Option<Option<Uuid>>, sqlx::Error> {
    versions::creator::<PromptRow>(conn, org_id, prompt_id).await
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

//! SQL behind the subject check: which document an extraction belongs to (who created a
//! schema or prompt is `versions::creator`). Every query filters by org, so
//! another org's id reads as missing.

use super::sql;
use sqlx::PgConnection;
use uuid::Uuid;

/// The document an extraction of `org_id` belongs to (`None`: no such extraction).
pub async fn extraction_document(
    conn: &mut PgConnection,
    org_id: Uuid,
    extraction_id: Uuid,
) -> sqlx::Result<Option<Uuid>> {
    let document = "SELECT document_id FROM extractions WHERE org_id = $1 AND id = $2";
    sql::scalar(document, org_id, extraction_id)
        .fetch_optional(conn)
        .await
}

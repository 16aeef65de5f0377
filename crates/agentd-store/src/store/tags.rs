//! SQL for `tags`. Tag names are unique per org; a tag created again by name (ignoring case)
//! is the existing one. Deleting a tag also removes it from this org's documents and prompts.

use super::documents::clean_text;
use super::sql::{self, Table};
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

/// A tag.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct TagRow {
    pub id: Uuid,
    pub name: String,
    pub color: String,
    pub run_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

impl Table for TagRow {
    const SELECT: &'static str = "SELECT * FROM tags";
}

/// A tag with how many of the org's documents carry it.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct TagWithCount {
    pub id: Uuid,
    pub name: String,
    pub color: String,
    pub document_count: i64,
}

/// This org's tags by name, with document counts.
pub async fn list(conn: &mut PgConnection, org_id: Uuid) -> sqlx::Result<Vec<TagWithCount>> {
    sqlx::query_as::<_, TagWithCount>(
        "SELECT t.id, t.name, t.color,
                (SELECT count(*) FROM documents d
                  WHERE d.org_id = t.org_id AND t.id = ANY(d.tag_ids)) AS document_count
           FROM tags t
          WHERE t.org_id = $1
          ORDER BY t.name, t.id",
    )
    .bind(org_id)
    .fetch_all(conn)
    .await
}

/// The tag of this org called `name`, ignoring case (the exact spelling first); `lock` takes
/// `FOR UPDATE` on it.
async fn by_name(
    conn: &mut PgConnection,
    org_id: Uuid,
    name: &str,
    lock: bool,
) -> sqlx::Result<Option<TagRow>> {
    let cond = "lower(name) = lower($2) ORDER BY name = $2 DESC, created_at LIMIT 1";
    let name = clean_text(name);
    sql::rows(org_id, cond, name, lock)
        .fetch_optional(conn)
        .await
}

/// Creates a tag, or returns the existing one of that name (`true` = existing). Idempotent.
pub async fn create(
    conn: &mut PgConnection,
    org_id: Uuid,
    name: &str,
    color: &str,
    run_id: Option<Uuid>,
    now: DateTime<Utc>,
) -> sqlx::Result<(TagRow, bool)> {
    if let Some(t) = by_name(conn, org_id, name, false).await? {
        return Ok((t, true));
    }
    let inserted = sqlx::query_as::<_, TagRow>(
        "INSERT INTO tags (id, org_id, name, color, run_id, created_at)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (org_id, lower(name)) DO NOTHING
      RETURNING id, name, color, run_id, created_at",
    )
    .bind(Uuid::now_v7())
    .bind(org_id)
    .bind(clean_text(name))
    .bind(clean_text(color))
    .bind(run_id)
    .bind(now)
    .fetch_optional(&mut *conn)
    .await?;
    match inserted {
        Some(t) => Ok((t, false)),
        // A concurrent transaction created it (in any case) between the lookup and the insert:
        // the unique index on `lower(name)` (migration 0083) made the insert wait for it.
        None => by_name(conn, org_id, name, false)
            .await?
            .map(|t| (t, true))
            .ok_or(sqlx::Error::RowNotFound),
    }
}

/// The ids in `ids` that are not tags of this org (another org's tag counts as missing). The
/// tags that exist are locked `FOR SHARE` until the caller's transaction ends, so a concurrent
/// `delete_tag` cannot remove one between this check and the caller's write (review #14a).
pub async fn missing(
    conn: &mut PgConnection,
    org_id: Uuid,
    ids: &[Uuid],
) -> sqlx::Result<Vec<Uuid>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let present = "SELECT id FROM tags WHERE org_id = $1 AND id = ANY($2) ORDER BY id FOR SHARE";
    let found: Vec<Uuid> = sql::scalar(present, org_id, ids).fetch_all(conn).await?;
    Ok(ids.iter().filter(|i| !found.contains(i)).copied().collect())
}

/// What deleting a tag did.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TagDeleted {
    pub documents_updated: u64,
    pub prompts_updated: u64,
}

/// Deletes a tag of this org and removes it from the org's documents (bumping `updated_at`)
/// and prompts. None: no such tag.
pub async fn delete(
    conn: &mut PgConnection,
    org_id: Uuid,
    id: Uuid,
    now: DateTime<Utc>,
) -> sqlx::Result<Option<TagDeleted>> {
    let delete = "DELETE FROM tags WHERE org_id = $1 AND id = $2";
    if sql::affected(&mut *conn, delete, org_id, id).await? == 0 {
        return Ok(None);
    }
    let docs = sqlx::query(
        "UPDATE documents
            SET tag_ids = array_remove(tag_ids, $2),
                updated_at = GREATEST($3, updated_at + interval '1 microsecond')
          WHERE org_id = $1 AND $2 = ANY(tag_ids)",
    )
    .bind(org_id)
    .bind(id)
    .bind(now)
    .execute(&mut *conn)
    .await?;
    let untag = "UPDATE prompts SET tag_ids = array_remove(tag_ids, $2)
                  WHERE org_id = $1 AND $2 = ANY(tag_ids)";
    let prompts_updated = sql::affected(conn, untag, org_id, id).await?;
    Ok(Some(TagDeleted {
        documents_updated: docs.rows_affected(),
        prompts_updated,
    }))
}

/// A tag locked for a decision, with the documents and prompts that carry it (also locked):
/// everything deleting it changes (review #14c).
#[derive(Debug, Clone, Serialize)]
pub struct TagLock {
    pub tag: TagRow,
    pub document_ids: Vec<Uuid>,
    pub prompt_ids: Vec<Uuid>,
}

/// Locks a tag of this org by id (`FOR UPDATE`) and the documents carrying it.
pub async fn lock(
    conn: &mut PgConnection,
    org_id: Uuid,
    id: Uuid,
) -> sqlx::Result<Option<TagLock>> {
    let tag = sql::rows(org_id, "id = $2", id, true);
    let Some(tag) = tag.fetch_optional(&mut *conn).await? else {
        return Ok(None);
    };
    let carrying = "SELECT id FROM documents WHERE org_id = $1 AND $2 = ANY(tag_ids)
                     ORDER BY id FOR UPDATE";
    let document_ids = sql::scalar(carrying, org_id, id)
        .fetch_all(&mut *conn)
        .await?;
    let prompts = "SELECT DISTINCT prompt_id FROM prompts WHERE org_id = $1 AND $2 = ANY(tag_ids)
                    ORDER BY prompt_id";
    let prompt_ids: Vec<Uuid> = sql::scalar(prompts, org_id, id)
        .fetch_all(&mut *conn)
        .await?;
    sqlx::query("SELECT 1 FROM prompts WHERE org_id = $1 AND $2 = ANY(tag_ids) FOR UPDATE")
        .bind(org_id)
        .bind(id)
        .execute(conn)
        .await?;
    Ok(Some(TagLock {
        tag,
        document_ids,
        prompt_ids,
    }))
}

/// Locks the tag of this org called `name` (ignoring case), if there is one.
pub async fn lock_by_name(
    conn: &mut PgConnection,
    org_id: Uuid,
    name: &str,
) -> sqlx::Result<Option<TagRow>> {
    by_name(conn, org_id, name, true).await
}

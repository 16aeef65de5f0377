//! What prompts and schemas share: both are versioned (`(<id>, version)` is a revision, an
//! update inserts version + 1, versions are immutable), so reading one version, the latest,
//! the latest of each, locking or deleting every version and finding the run that made the
//! first are written once here, for any [`Versioned`] row type (declared by [`versioned!`]).

use super::sql::{self, Table};
use sqlx::PgConnection;
use uuid::Uuid;

/// A versioned row type: its table and id column (the table has `org_id`, `version`,
/// `run_id` and `created_at`). [`versioned!`] implements it.
pub trait Versioned: Table {
    const TABLE: &'static str;
    /// `prompt_id`, `schema_id`.
    const ID: &'static str;
    /// `prompt`, `schema`: the row kind in messages.
    const KIND: &'static str;
    /// The row's id and version: its revision.
    fn revision(&self) -> (Uuid, i32);
}

/// Version `version` of the org's `id`, or its latest version with `None`; `lock` takes
/// `FOR UPDATE` on it.
pub async fn find<T: Versioned>(
    conn: &mut PgConnection,
    org_id: Uuid,
    id: Uuid,
    version: Option<i32>,
    lock: bool,
) -> sqlx::Result<Option<T>> {
    let which = match version {
        Some(_) => "AND version = $3",
        None => "ORDER BY version DESC LIMIT 1",
    };
    let rows = sql::rows(org_id, &format!("{} = $2 {which}", T::ID), id, lock);
    match version {
        Some(v) => rows.bind(v),
        None => rows,
    }
    .fetch_optional(conn)
    .await
}

/// The latest version of the org's `id`; `lock` takes `FOR UPDATE` on it.
///
/// Locked, it is the latest once the lock is held: `FOR UPDATE` that waited for a concurrent
/// writer keeps the row it picked before waiting (READ COMMITTED does not redo the `ORDER BY
/// version DESC LIMIT 1`), so the version that writer committed was missed and `version + 1`
/// conflicted (review #23). A new statement sees it; the lock is taken again until the locked
/// row is the newest. Every writer of a new version holds this lock, so none can slip in after.
pub async fn latest<T: Versioned>(
    conn: &mut PgConnection,
    org_id: Uuid,
    id: Uuid,
    lock: bool,
) -> sqlx::Result<Option<T>> {
    loop {
        let Some(row) = find::<T>(&mut *conn, org_id, id, None, lock).await? else {
            return Ok(None);
        };
        if !lock {
            return Ok(Some(row));
        }
        let newest = format!(
            "SELECT max(version) FROM {} WHERE org_id = $1 AND {} = $2",
            T::TABLE,
            T::ID
        );
        let newest: Option<i32> = sql::scalar(sqlx::AssertSqlSafe(newest), org_id, id)
            .fetch_one(&mut *conn)
            .await?;
        if newest.is_none_or(|v| v <= row.revision().1) {
            return Ok(Some(row));
        }
    }
}

/// The latest version of each of the org's ids, newest first.
pub async fn list_latest<T: Versioned>(
    conn: &mut PgConnection,
    org_id: Uuid,
) -> sqlx::Result<Vec<T>> {
    let (select, id) = (T::SELECT, T::ID);
    let each = select.replacen("SELECT ", &format!("SELECT DISTINCT ON ({id}) "), 1);
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT * FROM ({each} WHERE org_id = $1 ORDER BY {id}, version DESC) v
          ORDER BY created_at DESC, {id}"
    )))
    .bind(org_id)
    .fetch_all(conn)
    .await
}

/// Every version of the org's `id`, oldest first, locked (`FOR UPDATE`).
pub async fn lock_all<T: Versioned>(
    conn: &mut PgConnection,
    org_id: Uuid,
    id: Uuid,
) -> sqlx::Result<Vec<T>> {
    let cond = format!("{} = $2 ORDER BY version", T::ID);
    sql::rows(org_id, &cond, id, true).fetch_all(conn).await
}

/// Deletes every version of the org's `id`; returns how many went.
pub async fn delete<T: Versioned>(
    conn: &mut PgConnection,
    org_id: Uuid,
    id: Uuid,
) -> sqlx::Result<u64> {
    let delete = format!(
        "DELETE FROM {} WHERE org_id = $1 AND {} = $2",
        T::TABLE,
        T::ID
    );
    sql::affected(conn, sqlx::AssertSqlSafe(delete), org_id, id).await
}

/// The run that created the org's `id` (its first version): `None` when there is no such id
/// in the org, `Some(None)` when a person (no run) created it.
pub async fn creator<T: Versioned>(
    conn: &mut PgConnection,
    org_id: Uuid,
    id: Uuid,
) -> sqlx::Result<Option<Option<Uuid>>> {
    let first = format!(
        "SELECT run_id FROM {} WHERE org_id = $1 AND {} = $2 ORDER BY version LIMIT 1",
        T::TABLE,
        T::ID
    );
    sql::scalar(sqlx::AssertSqlSafe(first), org_id, id)
        .fetch_optional(conn)
        .await
}

/// Makes `$row` (a row of `$table`, of kind `$what`, identified by `$id` and `version`) a
/// [`Versioned`] row type, with the one function its store module offers by name: `get`, for
/// callers outside the store that read a version of that kind. The functions above serve it
/// generically (`versions::latest::<SchemaRow>`).
macro_rules! versioned {
    ($row:ident in $table:literal, $id:ident, $what:literal) => {
        impl $crate::store::versions::Versioned for $row {
            const TABLE: &'static str = $table;
            const ID: &'static str = stringify!($id);
            const KIND: &'static str = $what;
            fn revision(&self) -> (uuid::Uuid, i32) {
                (self.$id, self.version)
            }
        }

        #[doc = concat!("Version `version` of a ", $what, " of this org.")]
        pub async fn get(
            conn: &mut sqlx::PgConnection,
            org_id: uuid::Uuid,
            id: uuid::Uuid,
            version: i32,
        ) -> sqlx::Result<Option<$row>> {
            $crate::store::versions::find(conn, org_id, id, Some(version), false).await
        }
    };
}
pub(crate) use versioned;

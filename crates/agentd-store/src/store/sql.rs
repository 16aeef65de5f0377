//! The shapes of query the store files share, written once: a row type's `SELECT` of an org's
//! rows (locked with `FOR UPDATE` when asked), a value read or a statement run with the org as
//! `$1` and one key as `$2`.

use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::{QueryAs, QueryScalar};
use sqlx::{AssertSqlSafe, Encode, FromRow, PgConnection, PgExecutor, Postgres, SqlSafeStr, Type};
use uuid::Uuid;

/// A value a statement binds.
pub trait Arg<'q>: 'q + Encode<'q, Postgres> + Type<Postgres> + Send {}

impl<'q, T: 'q + Encode<'q, Postgres> + Type<Postgres> + Send> Arg<'q> for T {}

/// A row type and where it is read from.
pub trait Table: for<'r> FromRow<'r, PgRow> + Send + Unpin {
    /// `SELECT <its columns> FROM <its table>` (no `WHERE`); the table has `org_id`.
    const SELECT: &'static str;
}

/// `T`'s select of the org's rows (`org_id = $1`) where `cond` holds, locked (`FOR UPDATE`)
/// with `lock`.
pub fn select<T: Table>(cond: &str, lock: bool) -> AssertSqlSafe<String> {
    let lock = if lock { " FOR UPDATE" } else { "" };
    AssertSqlSafe(format!("{} WHERE org_id = $1 AND {cond}{lock}", T::SELECT))
}

/// The org's rows of `T` where `cond` holds for `key` (`$2`); fetch one, some or all.
pub fn rows<'q, T: Table>(
    org_id: Uuid,
    cond: &str,
    key: impl Arg<'q>,
    lock: bool,
) -> QueryAs<'q, Postgres, T, PgArguments> {
    bound(select::<T>(cond, lock), org_id, key)
}

/// The org's `T` with this id, locked (`FOR UPDATE`) with `lock`: the one read by id of every
/// row type (another org's id is `None`, as a missing one).
pub async fn by_id<T: Table>(
    conn: &mut PgConnection,
    org_id: Uuid,
    id: Uuid,
    lock: bool,
) -> sqlx::Result<Option<T>> {
    rows(org_id, "id = $2", id, lock).fetch_optional(conn).await
}

/// The rows `sql` reads with the org as `$1` and `key` as `$2`.
pub fn bound<'q, T>(
    sql: impl SqlSafeStr,
    org_id: Uuid,
    key: impl Arg<'q>,
) -> QueryAs<'q, Postgres, T, PgArguments>
where
    T: for<'r> FromRow<'r, PgRow>,
{
    sqlx::query_as(sql).bind(org_id).bind(key)
}

/// The first column `sql` reads with the org as `$1` and `key` as `$2`.
pub fn scalar<'q, V>(
    sql: impl SqlSafeStr,
    org_id: Uuid,
    key: impl Arg<'q>,
) -> QueryScalar<'q, Postgres, V, PgArguments>
where
    (V,): for<'r> FromRow<'r, PgRow>,
{
    sqlx::query_scalar(sql).bind(org_id).bind(key)
}

/// How many rows `sql` changed, run with `key` as `$1`: a statement about one row or one
/// owner (its callers scope it).
pub async fn execute<'e, 'q: 'e>(
    exec: impl PgExecutor<'e>,
    sql: impl SqlSafeStr,
    key: impl Arg<'q>,
) -> sqlx::Result<u64> {
    Ok(sqlx::query(sql)
        .bind(key)
        .execute(exec)
        .await?
        .rows_affected())
}

/// How many rows `sql` changed, run with the org as `$1` and `key` as `$2`.
pub async fn affected<'e, 'q: 'e>(
    exec: impl PgExecutor<'e>,
    sql: impl SqlSafeStr,
    org_id: Uuid,
    key: impl Arg<'q>,
) -> sqlx::Result<u64> {
    let done = sqlx::query(sql)
        .bind(org_id)
        .bind(key)
        .execute(exec)
        .await?;
    Ok(done.rows_affected())
}

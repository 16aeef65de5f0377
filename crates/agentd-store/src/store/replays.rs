//! SQL of replays (issue 50, item 3): the rows of its org a stored run found when it started —
//! read as JSON for its transcript's export — and their writing into the scratch database a
//! replay runs in. Rows the run made itself are left out (the replay makes them again), and so
//! is what was made after it started. A row is read as it is now: a document the run worked on
//! is written back as it was before any auto-create (`auto_create_status = 'none'`, no
//! proposal), which is how the job found it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

/// One row of a table, as `to_jsonb` gives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedRow {
    /// One of [`TABLES`].
    pub table: String,
    pub row: Value,
}

/// The tables a replay's scratch database gets, in an order their keys allow.
pub const TABLES: [&str; 8] = [
    "orgs",
    "tags",
    "schemas",
    "prompts",
    "documents",
    "extractions",
    "pending_approvals",
    "suggestions",
];

/// Reads of each table, each from the same parameters `p`: the org, the run, when it started,
/// and the only document (an auto_create run's subject; `NULL`: every document of the org).
const READS: [(&str, &str); 8] = [
    ("orgs", "WITH p AS (SELECT $1::uuid AS org, $2::uuid AS run, $3::timestamptz AS started, $4::uuid AS doc)
              SELECT to_jsonb(t) FROM orgs t, p WHERE t.id = p.org"),
    ("tags", "WITH p AS (SELECT $1::uuid AS org, $2::uuid AS run, $3::timestamptz AS started, $4::uuid AS doc)
              SELECT to_jsonb(t) FROM tags t, p
               WHERE t.org_id = p.org AND t.run_id IS DISTINCT FROM p.run AND t.created_at <= p.started
               ORDER BY t.created_at, t.id"),
    ("schemas", "WITH p AS (SELECT $1::uuid AS org, $2::uuid AS run, $3::timestamptz AS started, $4::uuid AS doc)
                 SELECT to_jsonb(t) FROM schemas t, p
                  WHERE t.org_id = p.org AND t.run_id IS DISTINCT FROM p.run AND t.created_at <= p.started
                  ORDER BY t.created_at, t.schema_id, t.version"),
    ("prompts", "WITH p AS (SELECT $1::uuid AS org, $2::uuid AS run, $3::timestamptz AS started, $4::uuid AS doc)
                 SELECT to_jsonb(t) FROM prompts t, p
                  WHERE t.org_id = p.org AND t.run_id IS DISTINCT FROM p.run AND t.created_at <= p.started
                  ORDER BY t.seq"),
    // The run's own document as the job found it: no proposal yet.
    ("documents", "WITH p AS (SELECT $1::uuid AS org, $2::uuid AS run, $3::timestamptz AS started, $4::uuid AS doc)
                   SELECT to_jsonb(t) || CASE WHEN t.id = p.doc THEN jsonb_build_object(
                              'auto_create_status', 'none', 'proposed_schema_id', NULL,
                              'proposed_schema_version', NULL, 'proposed_prompt_id', NULL,
                              'proposed_prompt_version', NULL, 'proposed_extraction_id', NULL,
                              'auto_create_run_id', NULL, 'auto_create_error', NULL)
                          ELSE '{}'::jsonb END
                     FROM documents t, p
                    WHERE t.org_id = p.org AND t.created_at <= p.started AND (p.doc IS NULL OR t.id = p.doc)
                    ORDER BY t.created_at, t.id"),
    ("extractions", "WITH p AS (SELECT $1::uuid AS org, $2::uuid AS run, $3::timestamptz AS started, $4::uuid AS doc)
                     SELECT to_jsonb(t) FROM extractions t, p
                      WHERE t.org_id = p.org AND t.run_id IS DISTINCT FROM p.run AND t.created_at <= p.started
                        AND (p.doc IS NULL OR t.document_id = p.doc)
                      ORDER BY t.created_at, t.id"),
    ("pending_approvals", "WITH p AS (SELECT $1::uuid AS org, $2::uuid AS run, $3::timestamptz AS started, $4::uuid AS doc)
                           SELECT to_jsonb(t) FROM pending_approvals t, p
                            WHERE t.org_id = p.org AND t.run_id IS DISTINCT FROM p.run AND t.created_at <= p.started
                              AND (p.doc IS NULL OR t.document_id = p.doc)
                            ORDER BY t.created_at, t.id"),
    ("suggestions", "WITH p AS (SELECT $1::uuid AS org, $2::uuid AS run, $3::timestamptz AS started, $4::uuid AS doc)
                     SELECT to_jsonb(t) FROM suggestions t, p
                      WHERE t.org_id = p.org AND t.run_id IS DISTINCT FROM p.run AND t.created_at <= p.started
                        AND (p.doc IS NULL OR t.document_id = p.doc)
                      ORDER BY t.created_at, t.id"),
];

/// The rows of `org_id` run `run_id` (started at `started_at`) found, in [`TABLES`] order;
/// `document`: only that document's rows (an auto_create run).
pub async fn seed_rows(
    conn: &mut PgConnection,
    org_id: Uuid,
    run_id: Uuid,
    started_at: DateTime<Utc>,
    document: Option<Uuid>,
) -> sqlx::Result<Vec<SeedRow>> {
    let mut out = Vec::new();
    for (table, sql) in READS {
        let rows: Vec<Value> = sqlx::query_scalar(sql)
            .bind(org_id)
            .bind(run_id)
            .bind(started_at)
            .bind(document)
            .fetch_all(&mut *conn)
            .await?;
        out.extend(rows.into_iter().map(|row| SeedRow {
            table: table.to_string(),
            row,
        }));
    }
    Ok(out)
}

/// Why a seed row was not written.
#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    #[error("seed row {index}: unknown table {table:?} (known: {known})")]
    Table {
        index: usize,
        table: String,
        known: String,
    },
    #[error("seed row {index} ({table}): {source}")]
    Db {
        index: usize,
        table: String,
        source: sqlx::Error,
    },
}

/// Writes `rows` (as [`seed_rows`] read them) into the database of `conn`, in their order:
/// every column the row has but the generated ones, identity columns as stored.
pub async fn write_seed(conn: &mut PgConnection, rows: &[SeedRow]) -> Result<(), SeedError> {
    let mut columns: std::collections::HashMap<&'static str, String> = Default::default();
    for (index, r) in rows.iter().enumerate() {
        let Some(table) = TABLES.iter().copied().find(|t| *t == r.table) else {
            return Err(SeedError::Table {
                index,
                table: r.table.clone(),
                known: TABLES.join(", "),
            });
        };
        let db = |source| SeedError::Db {
            index,
            table: r.table.clone(),
            source,
        };
        if !columns.contains_key(table) {
            let list: String = sqlx::query_scalar(
                "SELECT string_agg(quote_ident(column_name), ', ' ORDER BY ordinal_position)
                   FROM information_schema.columns
                  WHERE table_schema = current_schema() AND table_name = $1 AND is_generated = 'NEVER'",
            )
            .bind(table)
            .fetch_one(&mut *conn)
            .await
            .map_err(db)?;
            columns.insert(table, list);
        }
        let list = &columns[table];
        // checked: `table` is one of TABLES, the columns are the catalog's, each quote_ident'ed
        let sql = format!(
            "INSERT INTO {table} ({list}) OVERRIDING SYSTEM VALUE
             SELECT {list} FROM jsonb_populate_record(NULL::{table}, $1)"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(&r.row)
            .execute(&mut *conn)
            .await
            .map_err(db)?;
    }
    Ok(())
}

/// `name` if it is a scratch database's: `agentd_replay_` and lowercase letters, digits, `_`.
fn scratch_name(name: &str) -> sqlx::Result<&str> {
    let valid = name.starts_with("agentd_replay_")
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    match valid {
        true => Ok(name),
        false => Err(sqlx::Error::Protocol(format!(
            "not a scratch database name: {name:?}"
        ))),
    }
}

/// Creates the empty database `name` (`agentd_replay_<hex>`, made by the caller) on the server
/// of `pool`'s database, for a replay; the role needs `CREATEDB`.
pub async fn create_scratch(pool: &sqlx::PgPool, name: &str) -> sqlx::Result<()> {
    scratch_name(name)?;
    // checked: `scratch_name` allows `agentd_replay_` and lowercase letters, digits and `_`
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(pool)
        .await?;
    Ok(())
}

/// Drops scratch database `name` (see [`create_scratch`]), whoever is still connected to it.
pub async fn drop_scratch(pool: &sqlx::PgPool, name: &str) -> sqlx::Result<()> {
    scratch_name(name)?;
    // checked: `scratch_name`, as in `create_scratch`
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )))
    .execute(pool)
    .await?;
    Ok(())
}

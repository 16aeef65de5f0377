//! What a tool's approval summary reads ([`super::TypedTool::summary`]): the call's arguments
//! as given, and the names of the documents they point at, looked up in the org. The summary
//! itself is declared on each tool; `approvals::summary` bounds it and writes the generic one
//! for a tool that declares none.

use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

/// A proposed call, as its summary reads it.
pub struct Summary<'a> {
    conn: &'a mut PgConnection,
    org_id: Uuid,
    args: &'a Value,
}

impl<'a> Summary<'a> {
    /// The call of `args` in org `org_id`.
    pub fn new(conn: &'a mut PgConnection, org_id: Uuid, args: &'a Value) -> Self {
        Self { conn, org_id, args }
    }

    /// The arguments as given (ids as the caller wrote them).
    pub fn args(&self) -> &Value {
        self.args
    }

    /// String argument `key`, as given.
    pub fn str(&self, key: &str) -> Option<&str> {
        self.args.get(key).and_then(Value::as_str)
    }

    /// The document `args.document_id` names: `document 'invoice.txt'`; `document <id>` when
    /// the org has none of that id; `a document` without one.
    pub async fn document(&mut self) -> sqlx::Result<String> {
        let Some(id) = self
            .str("document_id")
            .and_then(|d| Uuid::parse_str(d).ok())
        else {
            return Ok("a document".into());
        };
        let name: Option<String> =
            sqlx::query_scalar("SELECT name FROM documents WHERE org_id = $1 AND id = $2")
                .bind(self.org_id)
                .bind(id)
                .fetch_optional(&mut *self.conn)
                .await?;
        Ok(match name {
            Some(n) => format!("document {}", quoted(Some(&n))),
            None => format!("document {id}"),
        })
    }
}

/// `'value'` with at most 60 characters of it; `'?'` without one.
pub fn quoted(v: Option<&str>) -> String {
    format!(
        "'{}'",
        v.unwrap_or("?").chars().take(60).collect::<String>()
    )
}

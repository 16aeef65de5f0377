//! The one-line summary of a proposed action, in words a reviewer reads before the JSON:
//! "Create tag 'urgent' (red)", "Delete document 'invoice.txt'", "Set tags of document 'a.txt'
//! to …". Each tool declares its own ([`crate::tools::TypedTool::summary`]); a tool that
//! declares none gets "Call `tool` with key=value, …". At most [`MAX`] characters.

use crate::tools::Tool;
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

/// Longest summary (characters).
pub const MAX: usize = 200;

/// The summary of `tool(args)` in org `org_id`.
pub async fn summarize(
    conn: &mut PgConnection,
    org_id: Uuid,
    tool: &dyn Tool,
    args: &Value,
) -> sqlx::Result<String> {
    let line = match tool.summary(conn, org_id, args).await? {
        Some(line) => line,
        None => {
            let pairs: Vec<String> = args
                .as_object()
                .map(|o| o.iter().map(|(k, v)| format!("{k}={v}")).collect())
                .unwrap_or_default();
            format!("Call `{}` with {}", tool.name(), pairs.join(", "))
        }
    };
    Ok(truncate(&line))
}

fn truncate(line: &str) -> String {
    let line = line.replace(['\n', '\r'], " ");
    if line.chars().count() <= MAX {
        return line;
    }
    let mut t: String = line.chars().take(MAX - 1).collect();
    t.push('…');
    t
}

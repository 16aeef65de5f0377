//! The one-line summary of a proposed action, in words a reviewer reads before the JSON:
//! "Create tag 'urgent' (red)", "Delete document 'invoice.txt'", "Set tags of document 'a.txt'
//! to …". Names of the documents the arguments point at are looked up in the org; an unknown
//! tool gets "Call `tool` with key=value, …". At most [`MAX`] characters.

use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

/// Longest summary (characters).
pub const MAX: usize = 200;

fn s<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

fn quoted(v: Option<&str>) -> String {
    format!(
        "'{}'",
        v.unwrap_or("?").chars().take(60).collect::<String>()
    )
}

async fn doc_name(conn: &mut PgConnection, org_id: Uuid, args: &Value) -> sqlx::Result<String> {
    let Some(id) = s(args, "document_id").and_then(|d| Uuid::parse_str(d).ok()) else {
        return Ok("a document".into());
    };
    let name: Option<String> =
        sqlx::query_scalar("SELECT name FROM documents WHERE org_id = $1 AND id = $2")
            .bind(org_id)
            .bind(id)
            .fetch_optional(conn)
            .await?;
    Ok(match name {
        Some(n) => format!("document {}", quoted(Some(&n))),
        None => format!("document {id}"),
    })
}

/// The summary of `tool(args)` in org `org_id`.
pub async fn summarize(
    conn: &mut PgConnection,
    org_id: Uuid,
    tool: &str,
    args: &Value,
) -> sqlx::Result<String> {
    let line = match tool {
        "create_tag" => format!(
            "Create tag {}{}",
            quoted(s(args, "name")),
            s(args, "color")
                .map(|c| format!(" ({c})"))
                .unwrap_or_default()
        ),
        "delete_tag" => format!(
            "Delete tag {}",
            quoted(s(args, "tag_id").or(s(args, "name")))
        ),
        "delete_document" => format!("Delete {}", doc_name(conn, org_id, args).await?),
        "update_document" => {
            let doc = doc_name(conn, org_id, args).await?;
            let keys: Vec<&str> = args
                .as_object()
                .map(|o| {
                    o.iter()
                        .filter(|(k, v)| *k != "document_id" && !v.is_null())
                        .map(|(k, _)| k.as_str())
                        .collect()
                })
                .unwrap_or_default();
            format!("Update {doc}: {}", keys.join(", "))
        }
        "run_extraction" => format!(
            "Run the extraction on {}",
            doc_name(conn, org_id, args).await?
        ),
        "update_extraction_field" => format!(
            "Set field {} of an extraction to {}",
            quoted(s(args, "path")),
            args.get("value").map(Value::to_string).unwrap_or_default()
        ),
        "create_schema" | "update_schema" | "delete_schema" | "create_prompt" | "update_prompt"
        | "delete_prompt" => {
            let (verb, what) = tool.split_once('_').unwrap_or((tool, ""));
            let mut verb = verb.to_string();
            verb[..1].make_ascii_uppercase();
            let name = s(args, "name")
                .map(|n| format!(" {}", quoted(Some(n))))
                .or_else(|| s(args, &format!("{what}_id")).map(|i| format!(" {i}")))
                .unwrap_or_default();
            format!("{verb} {what}{name}")
        }
        _ => {
            let pairs: Vec<String> = args
                .as_object()
                .map(|o| o.iter().map(|(k, v)| format!("{k}={v}")).collect())
                .unwrap_or_default();
            format!("Call `{tool}` with {}", pairs.join(", "))
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

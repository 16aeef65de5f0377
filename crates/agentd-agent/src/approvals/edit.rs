//! Approving with edited arguments: the edit is validated against the tool's schema, must stay
//! on the approval's document, gets a fresh snapshot and hash (locked like any decision), and an
//! audit row `edited` records the arguments before and after. The caller then executes the
//! approval as usual, in the same transaction.

use super::{DecideError, ToolEnv, snapshot_hash, summary};
use crate::store::approvals::{self as store, ApprovalRow};
use crate::store::runs::{self, AuditDecision, NewAudit};
use crate::tools::{Registry, Tool, ToolError};
use serde_json::{Value, json};
use sqlx::PgConnection;

/// Replaces `row`'s action with `edited` (the caller holds the row lock); returns the new row.
pub(super) async fn apply(
    conn: &mut PgConnection,
    env: &ToolEnv,
    mut row: ApprovalRow,
    tool: &dyn Tool,
    edited: &Value,
    actor: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<ApprovalRow, DecideError> {
    let mut args = crate::store::documents::clean_json(edited);
    let Some(obj) = args.as_object_mut() else {
        return Err(DecideError::InvalidEdit(
            "arguments must be a JSON object".into(),
        ));
    };
    // The approval's document stays its document: absent → the original one, another → refused.
    let original_doc = row
        .action
        .args
        .get("document_id")
        .filter(|v| !v.is_null())
        .cloned();
    if let Some(doc) = &original_doc {
        match obj.get("document_id") {
            None | Some(Value::Null) => {
                obj.insert("document_id".into(), doc.clone());
            }
            Some(d) if d == doc => {}
            Some(_) => {
                return Err(DecideError::InvalidEdit(
                    "arguments.document_id: an edit cannot move the action to another document"
                        .into(),
                ));
            }
        }
    }
    Registry::validate(tool, &args)
        .map_err(|e| DecideError::InvalidEdit(format!("arguments: {e}")))?;
    let mut ctx = env.ctx(conn, row.org_id, row.run_id, actor.to_string(), now);
    let data = match tool.snapshot(&mut ctx, &args).await {
        Some(Ok(v)) => v,
        Some(Err(ToolError::Db(e))) => return Err(e.into()),
        Some(Err(e)) => return Err(DecideError::InvalidEdit(format!("arguments: {e}"))),
        None => Value::Null,
    };
    let hash = snapshot_hash(&row.action.tool, &args, &data);
    let line = summary::summarize(conn, row.org_id, tool, &args).await?;
    store::set_edited(conn, row.id, &args, &data, &hash, &line).await?;
    // The outcome is stored as a summary (ids, counts, a hash: never a string value).
    let outcome =
        json!({"before": row.action.args, "before_hash": row.snapshot_hash, "after_hash": hash});
    let call_id = format!("approval:{}", row.id);
    let audit = NewAudit {
        args: Some(&args),
        outcome: Some(&outcome),
        ..super::decision_audit(&row, &call_id, actor, AuditDecision::Edited, now)
    };
    runs::insert_audit(&mut *conn, &audit).await?;
    row.action.args = args;
    row.snapshot = data;
    row.snapshot_hash = hash;
    row.summary = Some(line);
    row.edited = true;
    Ok(row)
}

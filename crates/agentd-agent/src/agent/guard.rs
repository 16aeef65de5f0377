//! The repeat guard and argument repair, applied to each pending call before it runs.
//!
//! A call identical to an earlier one (same tool, same canonical arguments) with no successful
//! write in between cannot give a different answer: it is refused with a tool error that points
//! to the earlier result and names the next step, and checkpointed with decision `repeated`
//! (the repeat cap counts those). Arguments are repaired where that is unambiguous
//! (`llm::repair`); the repaired call is what runs, and the repair notes are shown with its
//! result.

use super::step::{Decided, finish_step};
use super::transcript::{CallRecord, ToolCall, Transcript};
use super::{Engine, RunError, RunSpec, Written};
use crate::llm::{Block, Message, Role, repair};
use crate::store::runs::{AuditCategory, AuditDecision};
use crate::tools::{Category, Registry};
use serde_json::{Value, json};
use uuid::Uuid;

/// `raw` parsed and re-serialized with sorted keys; the trimmed text when it is not JSON.
pub fn canonical(raw: &str) -> String {
    fn sort(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                Value::Object(keys.into_iter().map(|k| (k.clone(), sort(&m[k]))).collect())
            }
            Value::Array(a) => Value::Array(a.iter().map(sort).collect()),
            other => other.clone(),
        }
    }
    match serde_json::from_str::<Value>(raw.trim()) {
        Ok(Value::Object(m)) if m.is_empty() => "{}".into(),
        Ok(v) => sort(&v).to_string(),
        Err(_) if raw.trim().is_empty() => "{}".into(),
        Err(_) => raw.trim().to_string(),
    }
}

/// The earlier call that `(tool, raw)` repeats, if nothing that could change its answer
/// (a successful call of a write tool) happened since. A tool whose answer comes from a model
/// ([`crate::tools::Tool::calls_model`]) repeats nothing: the same call may answer differently
/// (its own caps, refinements and `agent.max_failed_extractions`, bound it).
pub fn repeat_of<'t>(
    t: &'t Transcript,
    registry: &Registry,
    tool: &str,
    raw: &str,
) -> Option<&'t CallRecord> {
    if registry.get(tool).is_some_and(|t| t.calls_model()) {
        return None;
    }
    let key = canonical(raw);
    for rec in t.history.iter().rev() {
        if rec.tool == tool
            && rec.decision != AuditDecision::Repeated
            && canonical(&rec.raw_args) == key
        {
            return Some(rec);
        }
        let writes = registry
            .get(&rec.tool)
            .is_some_and(|x| x.category() != Category::Read);
        if writes && !rec.is_error && rec.decision != AuditDecision::Repeated {
            return None;
        }
    }
    None
}

/// One line saying what a result was: the tool, ok/error, and the ids it returned.
pub fn one_line(rec: &CallRecord) -> String {
    if rec.is_error {
        let msg: String = rec.content.chars().take(160).collect();
        return format!("{} error: {msg}", rec.tool);
    }
    let ids = serde_json::from_str::<Value>(&rec.content)
        .ok()
        .and_then(|v| v.as_object().cloned())
        .map(|m| {
            m.iter()
                .filter(|(k, v)| {
                    (k.ends_with("_id") || k.ends_with("revid") || k.as_str() == "status")
                        && (v.is_string() || v.is_number())
                })
                .map(|(k, v)| {
                    format!(
                        "{k}={}",
                        v.as_str().map(str::to_string).unwrap_or(v.to_string())
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    if ids.is_empty() {
        format!("{} ok", rec.tool)
    } else {
        format!("{} ok: {ids}", rec.tool)
    }
}

/// Refuses a repeated call: audit row, `repeated` checkpoint and the call count, in one
/// transaction.
pub async fn refuse(
    engine: &Engine,
    spec: &RunSpec,
    run_id: Uuid,
    seq: i32,
    call: &ToolCall,
    earlier: &CallRecord,
    next_step: &str,
) -> Result<Written, RunError> {
    let ToolCall {
        id: call_id,
        name,
        args: raw,
    } = call;
    let msg = format!(
        "repeated call: `{name}` already ran with these arguments (call {}: {}); calling it again \
         gives the same answer. Next: {next_step}.",
        earlier.call_id,
        one_line(earlier)
    );
    let now = engine.clock.now();
    // Only the audit row and the checkpoint: one statement, no transaction around it.
    let tx = super::step_conn::StepConn::open(&engine.pool, false).await?;
    let args = serde_json::from_str::<Value>(raw).unwrap_or_else(|_| json!({"raw": raw}));
    let outcome = json!({"error": msg, "repeats": earlier.call_id});
    let decided = Decided {
        category: AuditCategory::Guard,
        decision: AuditDecision::Repeated,
        content: msg,
        is_error: true,
        outcome,
    };
    let call = (call_id.as_str(), name.as_str(), &args);
    let vault = engine.vault.as_deref();
    let written = finish_step(tx, vault, spec, (run_id, seq), call, decided, (0, 0), now).await?;
    let label = super::step::tool_label(&engine.env.registry, name);
    metrics::counter!("agentd_tool_calls_total", "tool" => label, "decision" => AuditDecision::Repeated.as_str())
        .increment(1);
    Ok(written)
}

/// The call with its arguments repaired against the tool's schema, and the repair notes.
pub fn repaired(registry: &Registry, call: &ToolCall) -> (ToolCall, Vec<String>) {
    let Some(tool) = registry.get(&call.name) else {
        return (call.clone(), Vec::new());
    };
    let r = repair::repair(&call.args, &tool.parameters());
    let args = r.raw;
    (
        ToolCall {
            args,
            ..call.clone()
        },
        r.notes,
    )
}

/// Shows repairs in the rebuilt transcript: the assistant's calls carry the repaired
/// arguments and each repaired call's result starts with what was repaired. Deterministic, so
/// a resumed run sends the same messages.
pub fn annotate_repairs(t: &mut Transcript, registry: &Registry) {
    let mut notes: std::collections::HashMap<String, String> = Default::default();
    for m in t.messages.iter_mut() {
        for b in m.content.iter_mut() {
            match b {
                Block::ToolUse {
                    id,
                    name,
                    arguments,
                } => {
                    let call = ToolCall::new(id.clone(), name.clone(), arguments.clone());
                    let (fixed, n) = repaired(registry, &call);
                    if !n.is_empty() {
                        *arguments = fixed.args;
                        notes.insert(id.clone(), n.join("; "));
                    }
                }
                Block::ToolResult {
                    call_id, content, ..
                } => {
                    if let Some(n) = notes.get(call_id) {
                        *content = format!("[repaired: {n}] {content}");
                    }
                }
                Block::Text { .. } => {}
            }
        }
    }
}

/// A user message for the end of a request (the working-state block).
pub fn state_message(text: String) -> Message {
    Message::text(Role::User, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_ignores_key_order_and_whitespace() {
        assert_eq!(
            canonical(r#"{"b": 1, "a": {"d": 2, "c": 3}}"#),
            canonical(r#"{"a":{"c":3,"d":2},"b":1}"#)
        );
        assert_eq!(canonical(""), canonical("{}"));
        assert_ne!(canonical(r#"{"a": 1}"#), canonical(r#"{"a": 2}"#));
    }
}

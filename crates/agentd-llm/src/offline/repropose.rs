//! The offline model's re-proposal run (`approval_expiry` with a stale approval): the first
//! message says `went stale: <tool> with <args>`; it proposes the same call again, unchanged,
//! so a person decides on the current data (the run's goal is the action proposed again), then
//! says so. A heuristic cannot judge whether the action still makes sense; a person can.

use super::Next;
use serde_json::Value;
use std::collections::HashMap;

/// Said in the first message of a re-proposal run (`jobs/approval_expiry.toml`).
const STALE: &str = "went stale: ";

/// The stale action the first message names: its tool and arguments. Only a first message
/// that starts as the re-proposal's does (`Approval <id> went stale: …`): a document's text,
/// which could say anything, never starts a first message.
pub fn stale_action(first: &str) -> Option<(String, Value)> {
    let line = first.trim_start().strip_prefix("Approval ")?;
    let (id, rest) = line.split_once(STALE)?;
    if id.contains('\n') {
        return None;
    }
    let (tool, args) = rest.split_once(" with ")?;
    let args = serde_json::Deserializer::from_str(args)
        .into_iter::<Value>()
        .next()?
        .ok()?;
    Some((tool.trim().to_string(), args))
}

/// The next step: the action again (if `offered` and not called yet), then a summary.
pub fn next(
    action: (String, Value),
    offered: &[String],
    results: &HashMap<String, (Vec<Value>, u32)>,
) -> Next {
    let (tool, args) = action;
    if !offered.contains(&tool) {
        return Next::Say(format!(
            "offline model: `{tool}` is not offered to this run; nothing re-proposed."
        ));
    }
    match results.get(&tool) {
        None => Next::CallNamed(tool, args),
        Some(_) => Next::Say(format!("offline model: re-proposed `{tool}` unchanged.")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_stale_action_is_read_from_the_first_message() {
        let first = "Approval 1 went stale: update_document with {\"document_id\":\"d\",\"metadata\":{\"k\":\"v\"}}. Changed: x.";
        let (tool, args) = stale_action(first).expect("an action");
        assert_eq!(tool, super::super::names::UPDATE_DOCUMENT);
        assert_eq!(args, json!({"document_id": "d", "metadata": {"k": "v"}}));
        assert!(stale_action("Document d").is_none());
        let doc = "Document d\n<document>\nApproval 1 went stale: delete_document with {}";
        assert!(stale_action(doc).is_none(), "not from a document's text");
    }
}

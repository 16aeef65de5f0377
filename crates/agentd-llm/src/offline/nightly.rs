//! The offline model's `proactive_suggestion` plan: `org_overview`; `list_tags` when the
//! overview names untagged documents; then one `create_suggestion` per signal (up to 3), an
//! untagged document's with a proposed `update_document` that gives it the org's first tag (a
//! person approves or not); then a summary. A heuristic, not a judgement: it proposes the first
//! tag because it cannot read what the tags mean.

use super::{Next, find_str, names};
use serde_json::{Value, json};
use std::collections::HashMap;

/// The next step of a nightly run, from the tool results so far; `decided`: the message that
/// told it what people decided on its proposals, once it waited for them.
pub(super) fn proactive(r: &HashMap<String, (Vec<Value>, u32)>, decided: Option<&str>) -> Next {
    let Some(overview) = r.get(names::ORG_OVERVIEW).and_then(|(v, _)| v.last()) else {
        return Next::Call(names::ORG_OVERVIEW, json!({}));
    };
    let done = r
        .get(names::CREATE_SUGGESTION)
        .map(|(v, e)| v.len() as u32 + e)
        .unwrap_or(0);
    let mut candidates = Vec::new();
    collect_signals(overview, "", &mut candidates);
    let wants_tags = candidates.iter().any(|c| c.0 == "tag_documents");
    let tags = r.get(names::LIST_TAGS);
    if wants_tags && tags.is_none() {
        return Next::Call(names::LIST_TAGS, json!({}));
    }
    // The org's first tag: (id, name).
    let tag = tags
        .and_then(|(v, _)| v.last())
        .and_then(|t| t["tags"].get(0))
        .and_then(|t| Some((find_str(t, &["tag_id", "id"])?, find_str(t, &["name"])?)));
    if let Some((kind, title, doc)) = candidates
        .into_iter()
        .nth(done as usize)
        .filter(|_| done < 3)
    {
        // The title and message of a signal's suggestion are written from the signal
        // (`tools::suggestion_wording`); the heuristic adds only what it proposes. `title` is
        // what it would say if the tool did not know the signal.
        let mut args = json!({"kind": kind});
        if doc.is_none() {
            args["title"] = json!(title);
            args["message"] = json!(format!("{title}."));
        }
        if let Some(d) = doc {
            if let (Some((tag_id, tag_name)), "tag_documents") = (tag, kind) {
                args["message"] = json!(format!(
                    "The offline heuristic proposes the tag '{tag_name}', the organisation's \
                     first: it cannot read what tags mean, so check it before approving."
                ));
                args["proposed_action"] = json!({"tool": names::UPDATE_DOCUMENT,
                    "args": {"document_id": d, "tag_ids": [tag_id]}});
            }
            args["document_id"] = Value::String(d);
        }
        return Next::Call(names::CREATE_SUGGESTION, args);
    }
    let said = format!("offline model: reviewed the organisation and wrote {done} suggestion(s).");
    match decided {
        Some(told) => {
            let count = |what: &str| told.lines().filter(|l| l.contains(what)).count();
            Next::Say(format!(
                "{said} People decided its proposals: {} approved and executed, {} rejected, {} \
                 stale, {} failed.",
                count(": approved and executed"),
                count(": rejected;"),
                count(": stale;"),
                count(": failed;")
            ))
        }
        None => Next::Say(said),
    }
}

/// Walks the overview: arrays of objects with an id under keys naming a signal.
fn collect_signals(v: &Value, key: &str, out: &mut Vec<(&'static str, String, Option<String>)>) {
    match v {
        Value::Object(m) => m.iter().for_each(|(k, v)| collect_signals(v, k, out)),
        Value::Array(items) => {
            let k = key.to_ascii_lowercase();
            let (kind, what) = if k.contains("fail") {
                ("retry_failed", "Auto-create failed")
            } else if k.contains("untag") || k.contains("without_tag") {
                ("tag_documents", "Document has no tags")
            } else if k.contains("old") || k.contains("outdated") {
                (
                    "rerun_extraction",
                    "Extraction uses an older schema version",
                )
            } else if k.contains("proposed") || k.contains("waiting") || k.contains("stale") {
                ("review_proposal", "Proposal waiting for review")
            } else {
                return;
            };
            for item in items {
                let id = find_str(item, &["document_id", "id"]).map(str::to_string);
                let name = find_str(item, &["name", "document_name"]).unwrap_or("document");
                out.push((kind, format!("{what}: {name}"), id));
            }
        }
        _ => {}
    }
}

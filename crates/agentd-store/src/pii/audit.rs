//! What an audit row keeps of a tool call: enough to prove what happened, never a copy of the
//! data. Arguments are redacted (personal values become tokens of a throw-away table); the
//! outcome becomes a summary — ids, counts, flags, status and error text (redacted, bounded) —
//! plus `sha256`, the SHA-256 of the RFC 8785 canonical form of the full result, so a result
//! kept elsewhere can be matched against the trail.

use super::Vault;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

/// Longest string kept in a summary (error texts are cut there).
const MAX_TEXT: usize = 300;

/// Keys whose short string values are kept as they are (states, decisions, kinds).
const KEPT_STRINGS: &[&str] = &["status", "decision", "kind", "tool", "stop_reason", "role"];

/// The summary of a tool result stored on an audit row.
pub fn summarise(outcome: &Value) -> Value {
    let digest = serde_jcs::to_vec(outcome)
        .map(|b| hex::encode(Sha256::digest(b)))
        .unwrap_or_default();
    let vault = Vault::in_memory(Vec::new());
    let mut s = match summarise_value(outcome, &vault, 0) {
        Value::Object(m) => m,
        other => {
            let mut m = Map::new();
            m.insert("value".into(), other);
            m
        }
    };
    s.insert("sha256".into(), json!(digest));
    Value::Object(s)
}

/// What an audit row keeps of arguments that may hold real personal values: the SHA-256 of their
/// RFC 8785 canonical form and their top-level keys (sorted), never a value (review D3).
pub fn digest(args: &Value) -> Value {
    let digest = serde_jcs::to_vec(args)
        .map(|b| hex::encode(Sha256::digest(b)))
        .unwrap_or_default();
    let mut keys: Vec<&String> = args
        .as_object()
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    keys.sort();
    json!({"sha256": digest, "keys": keys})
}

/// Tool arguments with personal values replaced by tokens.
pub fn redact_args(args: &Value) -> Value {
    Vault::in_memory(Vec::new()).redact_json(args)
}

fn is_id_key(k: &str) -> bool {
    k == "id" || k.ends_with("_id") || k.ends_with("_ids") || k.ends_with("revid")
}

fn bounded(vault: &Vault, s: &str) -> Value {
    let r = vault.redact(s);
    if r.chars().count() <= MAX_TEXT {
        return json!(r);
    }
    let cut: String = r.chars().take(MAX_TEXT).collect();
    json!(format!("{cut}… [cut]"))
}

fn summarise_value(v: &Value, vault: &Vault, depth: usize) -> Value {
    match v {
        Value::Object(o) => {
            let mut out = Map::new();
            for (k, x) in o {
                let kept = match x {
                    Value::Null | Value::Bool(_) | Value::Number(_) => Some(x.clone()),
                    Value::String(s) if is_id_key(k) && s.len() <= 100 => Some(x.clone()),
                    Value::String(s) if k == "error" || k.ends_with("_error") => {
                        Some(bounded(vault, s))
                    }
                    Value::String(s) if KEPT_STRINGS.contains(&k.as_str()) && s.len() <= 64 => {
                        Some(x.clone())
                    }
                    Value::String(_) => None,
                    Value::Array(a) if is_id_key(k) && a.iter().all(Value::is_string) => {
                        Some(x.clone())
                    }
                    Value::Array(a) => Some(json!({"count": a.len()})),
                    Value::Object(_) if depth < 2 => Some(summarise_value(x, vault, depth + 1)),
                    Value::Object(m) => Some(json!({"keys": m.len()})),
                };
                if let Some(kept) = kept {
                    out.insert(k.clone(), kept);
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => json!({"count": a.len()}),
        Value::String(s) => bounded(vault, s),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_keeps_the_hash_and_the_keys_never_a_value() {
        let args = json!({"document_id": "d1", "metadata": {"signed_by": "Jane Doe"}});
        let d = digest(&args);
        assert!(!d.to_string().contains("Jane"), "{d}");
        assert_eq!(d["keys"], json!(["document_id", "metadata"]));
        let other = json!({"document_id": "d1", "metadata": {"signed_by": "John Roe"}});
        assert_ne!(digest(&other)["sha256"], d["sha256"]);
        assert_eq!(d["sha256"].as_str().map(str::len), Some(64));
    }

    #[test]
    fn keeps_ids_counts_and_errors_never_text() {
        let full = json!({
            "document_id": "0190-1", "name": "jane_doe.pdf", "truncated": false,
            "text": "Bill to: Jane Doe\nEmail: jane@example.com", "tag_ids": ["t1"],
            "lines": [1, 2, 3], "usage": {"input_tokens": 5},
            "error": "could not reach jane@example.com"
        });
        let s = summarise(&full);
        let text = s.to_string();
        assert!(!text.contains("Jane") && !text.contains("jane"), "{text}");
        assert_eq!(s["document_id"], "0190-1");
        assert_eq!(s["tag_ids"], json!(["t1"]));
        assert_eq!(s["lines"], json!({"count": 3}));
        assert_eq!(s["usage"]["input_tokens"], 5);
        assert_eq!(s["truncated"], false);
        assert_eq!(s["error"], "could not reach EMAIL_1");
        assert_eq!(s["sha256"].as_str().map(str::len), Some(64));
        // Same content, other key order: same hash.
        let again: Value = serde_json::from_str(&full.to_string()).unwrap();
        assert_eq!(summarise(&again)["sha256"], s["sha256"]);
    }
}

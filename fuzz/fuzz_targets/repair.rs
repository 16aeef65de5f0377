//! Argument repair and the closing of cut calls, on any text against a few tool schemas:
//! - no panic, bounded time and memory (`-timeout`, `-rss_limit_mb`);
//! - arguments that are already a JSON object the schema has no complaint about come back
//!   untouched, with no note;
//! - whatever was repaired beyond removing a fence parses as JSON (a cut call: as an object);
//! - repair is idempotent: repaired arguments need no further repair.
#![no_main]

use agentd::llm::repair::repair;
use agentd::llm::textcalls::CUT_MARK;
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use std::sync::LazyLock;

static SCHEMAS: LazyLock<Vec<Value>> = LazyLock::new(|| {
    vec![
        json!({"type": "object"}),
        json!({"type": "object", "properties": {}, "additionalProperties": false}),
        json!({"type": "object", "additionalProperties": false, "properties": {
            "name": {"type": "string"},
            "fields": {"type": ["object", "array", "string"]},
            "response_format": {"type": ["object", "string"]},
            "tags": {"type": "array", "items": {"type": "object", "properties": {
                "ids": {"type": "array", "items": {"type": "string"}}}}}
        }}),
    ]
});

const FENCE_NOTE: &str = "removed the code fence around the arguments";

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let schema = &SCHEMAS[pick as usize % SCHEMAS.len()];
    let mut raw = String::from_utf8_lossy(rest).into_owned();
    if pick & 0x80 != 0 {
        raw.push_str(CUT_MARK);
    }
    let r = repair(&raw, schema);
    if r.notes.is_empty() {
        assert_eq!(r.raw, raw, "nothing repaired, yet changed");
    }
    let parsed = serde_json::from_str::<Value>(&r.raw);
    if r.notes.iter().any(|n| n != FENCE_NOTE) {
        let v = parsed
            .as_ref()
            .unwrap_or_else(|e| panic!("repaired {:?} is not JSON: {e}", r.raw));
        if r.notes.iter().any(|n| n.contains("cut off")) {
            assert!(v.is_object(), "a closed cut call is an object: {v}");
        }
    }
    if let Ok(v) = &parsed {
        // Repaired (or valid) arguments need nothing more, and keep their value.
        let again = repair(&r.raw, schema);
        let v2: Value = serde_json::from_str(&again.raw).expect("still JSON");
        assert_eq!(
            &v2, v,
            "a second repair of {:?} changed it: {:?}",
            r.raw, again.notes
        );
    }
});

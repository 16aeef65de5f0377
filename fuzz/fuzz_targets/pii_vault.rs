//! Redaction and rehydration: `rehydrate(redact(x)) == x` for text and JSON, and the redacted
//! text holds none of the values that were detected (each is a token now).
//!
//! Precondition: `x` holds no token-shaped word of its own (`EMAIL_3`): such a literal is
//! rehydrated to the run's value of that token (review 2026-11-26, L1, open) — the round trip
//! cannot hold for it, so such inputs are skipped.
#![no_main]

use agentd::pii::{Vault, detect};
use libfuzzer_sys::fuzz_target;
use std::sync::LazyLock;

static TOKEN: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(r"(EMAIL|PHONE|IBAN|CARD|ID|PERSON)_[0-9]").unwrap());

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let text = text.as_ref();
    if TOKEN.is_match(text) {
        return;
    }
    let vault = Vault::in_memory(Vec::new());
    let redacted = vault.redact(text);
    assert_eq!(
        vault.rehydrate(&redacted),
        text,
        "round trip of {text:?} via {redacted:?}"
    );
    // With every token cut out (a noncharacter in its place, which the input may not hold),
    // no detected value is left.
    if !text.contains('\u{FFFF}') {
        let rest = TOKEN_WORD.replace_all(&redacted, "\u{FFFF}");
        for f in detect(text, &[]) {
            let value = &text[f.start..f.end];
            assert!(!rest.contains(value), "{value:?} is still in {redacted:?}");
        }
    }
    // The same text again, redacted by the same vault: the same tokens.
    assert_eq!(vault.redact(text), redacted);
    // As JSON: the text as a value under a personal key and under an ordinary one.
    let json = serde_json::json!({"customer_name": text, "note": text, "list": [text]});
    let r = vault.redact_json(&json);
    assert_eq!(vault.rehydrate_json(&r), json, "json round trip via {r}");
    let args = r.to_string();
    let back: serde_json::Value =
        serde_json::from_str(&vault.rehydrate_arguments(&args)).expect("arguments stay JSON");
    assert_eq!(back, json);
});

static TOKEN_WORD: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(r"(EMAIL|PHONE|IBAN|CARD|ID|PERSON)_[0-9]{1,6}").unwrap());

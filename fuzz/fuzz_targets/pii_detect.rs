//! Personal-data detection on any UTF-8 text: no panic, and every finding is a non-empty range of
//! the text on character boundaries, in order, not overlapping, passing its checksum where the
//! kind has one (unless found by its JSON key); detection is deterministic.
#![no_main]

use agentd::pii::detect::{Kind, card_valid, detect, iban_valid};
use libfuzzer_sys::fuzz_target;
use std::sync::LazyLock;

/// A configured national-id pattern, as `[pii] national_id_patterns` holds them.
static EXTRA: LazyLock<Vec<regex::Regex>> =
    LazyLock::new(|| vec![regex::Regex::new(r"\b[A-Z]{2}[0-9]{6}\b").unwrap()]);

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let text = text.as_ref();
    let found = detect(text, &EXTRA);
    let mut last_end = 0;
    for f in &found {
        assert!(f.start < f.end, "empty finding {f:?}");
        assert!(f.start >= last_end, "overlap or disorder at {f:?}");
        last_end = f.end;
        let value = text
            .get(f.start..f.end)
            .unwrap_or_else(|| panic!("{f:?} is not a char range of the text"));
        // A value under a personal JSON key (`"iban": "…"`) is personal by its key, with no
        // checksum; the shape rules' IBANs and cards pass theirs.
        let by_key = text.get(..f.start).is_some_and(|t| t.ends_with('"'));
        match f.kind {
            _ if by_key => {}
            Kind::Iban => assert!(iban_valid(value), "{value:?}"),
            Kind::Card => assert!(card_valid(value), "{value:?}"),
            _ => {}
        }
    }
    assert_eq!(found, detect(text, &EXTRA), "not deterministic");
});

//! The document analysis (`agentd::analysis`) reads every uploaded document's text, in any
//! language and layout, OCR damage included: whatever the bytes, `analyse` returns, and the
//! brief it renders for a model parses back (`parse_brief`, `names_in_brief`) without a panic,
//! as do those readers on the raw text. No property beyond "no panic" is checked here.
#![no_main]

use agentd::analysis::{analyse, brief, names_in_brief, parse_brief};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Documents are stored as text: invalid UTF-8 is replaced as an upload's would be.
    let text = String::from_utf8_lossy(data);
    let a = analyse(&text);
    let b = brief(&a);
    let _ = parse_brief(&b);
    let _ = names_in_brief(&b);
    let _ = parse_brief(&text);
    let _ = names_in_brief(&text);
});

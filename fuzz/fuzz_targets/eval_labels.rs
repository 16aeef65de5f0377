//! Eval label files, on any text: no panic; a file that parses labels at least one field, each
//! named as in `[fields]`, with a scalar value; an error names the file.
#![no_main]

use agentd::eval::labels::parse_labels;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let file = Path::new("samples/eval/x.labels.toml");
    match parse_labels(file, &text) {
        Ok((_, fields)) => {
            assert!(!fields.is_empty());
            let table: toml::Table = text.parse().expect("it parsed once");
            let names = table["fields"].as_table().expect("[fields]");
            for f in &fields {
                assert!(names.contains_key(&f.name), "{}", f.name);
                assert!(!f.value.is_array() && !f.value.is_object() && !f.value.is_null());
            }
        }
        Err(e) => assert_eq!(e.file, file.display().to_string()),
    }
});

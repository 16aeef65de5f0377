//! Eval label files, on any text: no panic; a file that parses labels at least one expected field,
//! each named as in `[fields]` (acceptable ones as in `[acceptable]`), with a scalar value, and no
//! acceptable name repeats an expected one; an error names the file.
#![no_main]

use agentd::eval::labels::parse_labels;
use agentd::eval::score::norm_name;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let file = Path::new("samples/eval/x.labels.toml");
    match parse_labels(file, &text) {
        Ok((_, fields)) => {
            assert!(!fields.expected.is_empty());
            let table: toml::Table = text.parse().expect("it parsed once");
            for (section, list) in [("fields", &fields.expected), ("acceptable", &fields.acceptable)] {
                for f in list {
                    let names = table[section].as_table().expect("a table");
                    assert!(names.contains_key(&f.name), "{section}.{}", f.name);
                    assert!(!f.value.is_array() && !f.value.is_object() && !f.value.is_null());
                }
            }
            for a in &fields.acceptable {
                for e in &fields.expected {
                    assert_ne!(norm_name(&a.name), norm_name(&e.name));
                }
            }
        }
        Err(e) => assert_eq!(e.file, file.display().to_string()),
    }
});

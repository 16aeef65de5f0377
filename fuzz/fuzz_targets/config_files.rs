//! Config and job-file parsing, on any text:
//! - no panic in `Config::load_text` (a config file, or `AGENTD_*` variables) or
//!   `catalog::parse` (a job file of each kind);
//! - a config that loads passes its own validation, and an error names its source;
//! - a job file that parses is of the kind its name says, and an error names the file.
#![no_main]

use agentd::catalog;
use agentd::config::Config;
use libfuzzer_sys::fuzz_target;

const KINDS: [&str; 4] = [
    "auto_create",
    "proactive_suggestion",
    "approval_expiry",
    "webhook_delivery",
];

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    match mode % 3 {
        0 => match Config::load_text(Some(("agentd.toml", &text)), std::iter::empty()) {
            Ok(c) => assert!(c.validate().is_ok()),
            Err(e) => assert_eq!(e.file, "agentd.toml", "{e}"),
        },
        1 => {
            // `KEY=value` lines as environment variables.
            let env = text.lines().filter_map(|l| {
                let (k, v) = l.split_once('=')?;
                Some((format!("AGENTD_{k}"), v.to_string()))
            });
            match Config::load_text(None, env) {
                Ok(c) => assert!(c.validate().is_ok()),
                Err(e) => assert!(
                    e.file.contains("AGENTD_") || e.file.contains("default"),
                    "{e}"
                ),
            }
        }
        _ => {
            let kind = KINDS[rest.first().copied().unwrap_or(0) as usize % KINDS.len()];
            let tools = agentd::known_tool_names();
            let file = format!("jobs/{kind}.toml");
            match catalog::parse(&file, kind, &text, &tools) {
                Ok(spec) => assert_eq!(spec.kind, kind),
                Err(e) => assert_eq!(e.file, file, "{e}"),
            }
        }
    }
});

//! Nothing from outside can panic the code that parses it (issue 29, item 3), made checkable:
//! the modules that read model output, documents, requests, webhook URLs and headers, config and
//! job files, eval labels and the agent loop (`crates/agentd-agent/src/agent/**`) hold, outside `#[cfg(test)]`, no `.unwrap()`, no `.expect(` and no
//! range index (`s[..n]`, `s[a..b]`, `v[i..]`) — the byte slicing of a string that panics inside a
//! character (review 2026-11-26, N1). A line that needs one says why it cannot fail with a
//! `// checked: …` comment on that line or on a comment line right above it.
//!
//! The scan is textual: string and char literals and comments are blanked first, then the
//! `#[cfg(test)]` items are cut. It cannot tell a `&str` from a slice, so a range index of a
//! vector or array needs the comment too (or `get`, `take`, `split_once`, `strip_prefix`).

use std::path::Path;

/// The parsing modules this test holds to the rule.
const PARSERS: &[&str] = &[
    // Personal data in documents, names, arguments and answers.
    "crates/agentd-store/src/pii/detect.rs",
    "crates/agentd-store/src/pii/vault.rs",
    // Model output.
    "crates/agentd-llm/src/textcalls.rs",
    "crates/agentd-llm/src/repair.rs",
    "crates/agentd-llm/src/openai/response.rs",
    "crates/agentd-llm/src/openai/failure.rs",
    "crates/agentd-llm/src/anthropic/request.rs",
    "crates/agentd-llm/src/anthropic/response.rs",
    "crates/agentd-llm/src/anthropic/failure.rs",
    "crates/agentd-llm/src/anthropic/transport.rs",
    "crates/agentd-llm/src/offline.rs",
    "crates/agentd-agent/src/tools/schema_forms.rs",
    "crates/agentd-agent/src/tools/strict.rs",
    "crates/agentd-agent/src/tools/schema_check.rs",
    "crates/agentd-agent/src/tools/field_names.rs",
    "crates/agentd-agent/src/tools/extraction.rs",
    "crates/agentd-agent/src/tools/tags.rs",
    // Requests, webhook URLs and signature headers, org provider keys.
    "crates/agentd-api/src/api/extract.rs",
    "crates/agentd-llm/src/org_keys.rs",
    "crates/agentd-worker/src/webhooks/guard.rs",
    "crates/agentd-worker/src/webhooks/mod.rs",
    // Trace context from request headers and job rows.
    "crates/agentd-base/src/telemetry/propagation.rs",
    // Operator files.
    "crates/agentd-base/src/config.rs",
    "crates/agentd-base/src/config/choices.rs",
    "crates/agentd-base/src/config/duration.rs",
    "crates/agentd-base/src/config/invalid.rs",
    "crates/agentd-base/src/config/layering.rs",
    "crates/agentd-base/src/config/otel.rs",
    "crates/agentd-base/src/config/providers.rs",
    "crates/agentd-base/src/catalog.rs",
    "src/eval/labels.rs",
];

/// Directories whose every `.rs` file is held to the rule: the agent loop reads model answers,
/// tool arguments and results, checkpoints and decisions.
const PARSER_DIRS: &[&str] = &["crates/agentd-agent/src/agent"];

/// The `.rs` files under `dir` (relative to `root`), sorted.
fn rust_files(root: &Path, dir: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![root.join(dir)];
    while let Some(d) = todo.pop() {
        let entries = std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        for entry in entries {
            let path = entry
                .unwrap_or_else(|e| panic!("{}: {e}", d.display()))
                .path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                let rel = path.strip_prefix(root).unwrap_or(&path);
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    out
}

/// `src` with the contents of string and char literals and all comments replaced by spaces
/// (line breaks kept, so line numbers stay).
fn blank(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let spaces = |out: &mut String, s: &[char]| {
        out.extend(s.iter().map(|&ch| if ch == '\n' { '\n' } else { ' ' }))
    };
    let find =
        |from: usize, pat: &[char]| (from..c.len()).find(|&j| c.get(j..j + pat.len()) == Some(pat));
    let mut i = 0;
    while i < c.len() {
        let at = |k: usize| c.get(i + k).copied();
        let starts = |p: &str| p.chars().enumerate().all(|(k, ch)| at(k) == Some(ch));
        if starts("//") {
            let end = find(i, &['\n']).unwrap_or(c.len());
            spaces(&mut out, &c[i..end]);
            i = end;
            continue;
        }
        if starts("/*") {
            let end = find(i + 2, &['*', '/']).map_or(c.len(), |j| j + 2);
            spaces(&mut out, &c[i..end]);
            i = end;
            continue;
        }
        // Raw strings: r"…", r#"…"#, br"…".
        let prev_ident = i > 0 && ident(c[i - 1]);
        let r_at = if at(0) == Some('b') && at(1) == Some('r') {
            Some(1)
        } else if at(0) == Some('r') {
            Some(0)
        } else {
            None
        };
        if let Some(r) = r_at.filter(|_| !prev_ident) {
            let hashes = (i + r + 1..c.len()).take_while(|&j| c[j] == '#').count();
            if c.get(i + r + 1 + hashes) == Some(&'"') {
                let open = i + r + 2 + hashes;
                let mut close = vec!['"'];
                close.extend(std::iter::repeat_n('#', hashes));
                let end = find(open, &close).unwrap_or(c.len());
                out.extend(&c[i..open]);
                spaces(&mut out, &c[open..end]);
                out.extend(&close);
                i = (end + close.len()).min(c.len());
                continue;
            }
        }
        if at(0) == Some('"') {
            let mut j = i + 1;
            while j < c.len() && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            out.push('"');
            spaces(&mut out, &c[i + 1..j.min(c.len())]);
            out.push('"');
            i = j + 1;
            continue;
        }
        if at(0) == Some('\'') {
            // A char literal ('x', '\n', '\u{2026}'); otherwise a lifetime.
            if at(1) == Some('\\') {
                // From after the escaped character: `'\''` ends at its second quote.
                let end = find(i + 3, &['\'']).unwrap_or(c.len());
                out.push_str("' '");
                i = end + 1;
                continue;
            }
            if at(2) == Some('\'') {
                out.push_str("' '");
                i += 3;
                continue;
            }
        }
        out.push(c[i]);
        i += 1;
    }
    out
}

/// `code` with every `#[cfg(test)]` item (a module, function or `use`) blanked.
fn without_tests(code: &str) -> String {
    let mut c: Vec<char> = code.chars().collect();
    let mark: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut from = 0;
    while let Some(k) = (from..c.len()).find(|&j| c.get(j..j + mark.len()) == Some(&mark[..])) {
        let brace = (k..c.len()).find(|&j| c[j] == '{');
        let semi = (k..c.len()).find(|&j| c[j] == ';');
        let end = match (brace, semi) {
            (_, Some(s)) if brace.is_none_or(|b| s < b) => s + 1,
            (Some(b), _) => {
                let mut depth = 0usize;
                let mut j = b;
                while j < c.len() {
                    match c[j] {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                }
                (j + 1).min(c.len())
            }
            _ => c.len(),
        };
        for ch in &mut c[k..end] {
            if *ch != '\n' {
                *ch = ' ';
            }
        }
        from = end;
    }
    c.into_iter().collect()
}

/// A range index: `[…..…]` right after an expression (a name, `)` or `]`), not an array literal
/// or a slice pattern.
fn range_index(line: &str) -> bool {
    let c: Vec<char> = line.chars().collect();
    (1..c.len()).any(|i| {
        let prev = c[i - 1];
        if c[i] != '[' || !(prev.is_alphanumeric() || prev == '_' || prev == ')' || prev == ']') {
            return false;
        }
        let inner: String = c[i + 1..]
            .iter()
            .take_while(|&&ch| ch != ']' && ch != '[')
            .collect();
        inner.contains("..") && c.get(i + 1 + inner.chars().count()) == Some(&']')
    })
}

/// Every violation in `src` (named `file`): `file:line: what: the line`.
fn violations(file: &str, src: &str) -> Vec<String> {
    let code = without_tests(&blank(src));
    let original: Vec<&str> = src.lines().collect();
    let justified = |n: usize| {
        original.get(n).is_some_and(|l| l.contains("// checked:"))
            || (n > 0
                && original
                    .get(n - 1)
                    .is_some_and(|l| l.trim_start().starts_with("// checked:")))
    };
    let mut out = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let what = if line.contains(".unwrap()") {
            "unwrap"
        } else if line.contains(".expect(") {
            "expect"
        } else if range_index(line) {
            "range index"
        } else {
            continue;
        };
        if !justified(n) {
            out.push(format!(
                "{file}:{}: {what}: {}",
                n + 1,
                original.get(n).map_or("", |l| l.trim())
            ));
        }
    }
    out
}

#[test]
fn parsers_of_outside_data_neither_unwrap_nor_slice_by_byte_index() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    let mut files: Vec<String> = PARSERS.iter().map(|f| f.to_string()).collect();
    for dir in PARSER_DIRS {
        let under = rust_files(root, dir);
        assert!(
            !under.is_empty(),
            "{dir} has no .rs file (update PARSER_DIRS)"
        );
        files.extend(under);
    }
    for file in &files {
        let src = std::fs::read_to_string(root.join(file))
            .unwrap_or_else(|e| panic!("{file}: {e} (update PARSERS when a module moves)"));
        found.extend(violations(file, &src));
    }
    assert!(
        found.is_empty(),
        "code that parses outside data may panic here; use get/split_once/strip_prefix/`?`, \
         or say why it cannot fail with a `// checked: …` comment:\n{}",
        found.join("\n")
    );
}

/// The scan finds what it is meant to, and only that.
#[test]
fn the_scan_finds_unwraps_expects_and_range_indexes_outside_tests() {
    let src = r##"
fn a(s: &str) -> &str { &s[..4] }
fn b(v: &[u8], i: usize) -> &[u8] { &v[i..] }
fn c(x: Option<u8>) -> u8 { x.unwrap() }
fn d(x: Option<u8>) -> u8 { x.expect("set") }
fn e(s: &str) -> &str { &s[..4] } // checked: callers pass ASCII
// checked: a constant
fn f(x: Option<u8>) -> u8 { x.expect("set") }
fn g(s: &str) -> Option<&str> { s.get(..4) }
fn h() -> &'static str { "s[..4] and x.unwrap() in a string" }
fn i(c: char) -> bool { c == '[' || c == '"' }
fn j() -> &'static str { r#"v[1..2] "quoted" x.unwrap()"# }
// s[..4] in a comment, x.unwrap() too
fn k(x: Option<u8>) -> u8 { x.unwrap_or(0) + x.unwrap_or_default() }
fn l([a, ..]: [u8; 3]) -> [u8; 2] { [a, 0] }
/* block: v[0..1] */
#[cfg(test)]
mod tests {
    fn t(s: &str) -> &str { &s[1..].trim().to_string().unwrap() }
}
#[cfg(test)]
use std::x::y;
fn m<'a>(s: &'a str) -> &'a str { &s[1..=2] }
"##;
    let found = violations("x.rs", src);
    let lines: Vec<&str> = found
        .iter()
        .map(|f| f.split(": ").next().unwrap_or(""))
        .collect();
    assert_eq!(
        lines,
        ["x.rs:2", "x.rs:3", "x.rs:4", "x.rs:5", "x.rs:23"],
        "{found:#?}"
    );
}

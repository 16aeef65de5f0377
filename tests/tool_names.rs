//! A tool is declared in one place (issue 34): no string literal outside `src/tools` is the name
//! of a registered tool. Code elsewhere names a tool by its type's constant
//! (`tools::schemas::CreateSchema::NAME`) or asks the registry; names are read from the
//! registry, the job files and model output. The one exception is the offline model's list of
//! the tools it calls ([`OFFLINE_NAMES`]): it plays a model, writing model output, and sits below
//! `tools` in the module layers; each of its names must be a registered tool. No database.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The string literals of Rust source `src` (comments skipped), each with its line: the text
/// between the quotes as written (escapes not decoded; a tool name has none).
fn string_literals(src: &str) -> Vec<(usize, String)> {
    let b: Vec<char> = src.chars().collect();
    let n = b.len();
    let at = |i: usize| b.get(i).copied().unwrap_or('\0');
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let (mut i, mut line) = (0usize, 1usize);
    while i < n {
        let c = b[i];
        if c == '/' && at(i + 1) == '/' {
            while i < n && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            // Block comments nest.
            let mut depth = 0;
            while i < n {
                if b[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(b[i] == '\n');
                    i += 1;
                }
            }
        } else if c == '"' {
            let (start_line, mut k) = (line, i + 1);
            let mut text = String::new();
            while k < n && b[k] != '"' {
                if b[k] == '\\' {
                    text.push(b[k]);
                    k += 1;
                }
                if k < n {
                    line += usize::from(b[k] == '\n');
                    text.push(b[k]);
                }
                k += 1;
            }
            out.push((start_line, text));
            i = k + 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\'', '\u{1F600}'); otherwise a lifetime.
            if at(i + 1) == '\\' {
                let mut k = i + 3;
                while k < n && b[k] != '\'' && b[k] != '\n' {
                    k += 1;
                }
                i = k + 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
            }
        } else if ident(c) {
            // A whole word, so an `r` ending one does not start a raw string.
            let start = i;
            while i < n && ident(b[i]) {
                i += 1;
            }
            let word: String = b[start..i].iter().collect();
            if (word == "r" || word == "br") && (at(i) == '"' || at(i) == '#') {
                let mut hashes = 0;
                while at(i) == '#' {
                    hashes += 1;
                    i += 1;
                }
                if at(i) != '"' {
                    continue; // `r#ident`
                }
                let (start_line, first) = (line, i + 1);
                let mut k = first;
                while k < n && !(b[k] == '"' && (1..=hashes).all(|h| at(k + h) == '#')) {
                    line += usize::from(b[k] == '\n');
                    k += 1;
                }
                out.push((start_line, b[first..k.min(n)].iter().collect()));
                i = k + 1 + hashes;
            }
            // `b"…"` and `b'…'` are read as a plain string or char next.
        } else {
            line += usize::from(c == '\n');
            i += 1;
        }
    }
    out
}

/// The offline model's tool names (`llm::offline::names`), the one file outside `src/tools`
/// that writes them.
const OFFLINE_NAMES: &str = "src/llm/offline/names.rs";

/// `file:line: "name"` for every literal in the files under `src/` outside `src/tools` (and
/// [`OFFLINE_NAMES`]) that is the name of a tool of `names`.
fn literals_outside_tools(root: &Path, names: &[&str]) -> Vec<String> {
    let src = root.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let tools = src.join("tools");
    let mut found = Vec::new();
    let offline = root.join(OFFLINE_NAMES);
    for f in files
        .iter()
        .filter(|f| !f.starts_with(&tools) && **f != offline)
    {
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        for (line, lit) in string_literals(&text) {
            if names.contains(&lit.as_str()) {
                let rel = f.strip_prefix(root).unwrap_or(f);
                found.push(format!("{}:{line}: \"{lit}\"", rel.display()));
            }
        }
    }
    found
}

#[test]
fn no_tool_name_is_a_string_outside_src_tools() {
    let registry = agentd::tools::builtin_registry();
    let names = registry.names();
    assert!(names.len() >= 20, "the registry lists the tools: {names:?}");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = literals_outside_tools(root, &names);
    assert!(
        found.is_empty(),
        "tool names written as strings outside src/tools (use the tool type's NAME, e.g. \
         tools::schemas::CreateSchema::NAME, or ask the registry):\n{}",
        found.join("\n")
    );
}

/// The offline model calls tools by the names the registry gives them: a renamed tool fails here,
/// not silently in the offline eval.
#[test]
fn the_offline_model_names_registered_tools() {
    let registry = agentd::tools::builtin_registry();
    let unknown: Vec<&str> = agentd::llm::offline::names::ALL
        .iter()
        .copied()
        .filter(|n| registry.get(n).is_none())
        .collect();
    assert!(
        unknown.is_empty(),
        "the offline model calls unknown tools: {unknown:?}"
    );
    assert!(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(OFFLINE_NAMES)
            .is_file()
    );
}

#[test]
fn the_scan_reads_literals_and_skips_comments() {
    let src = "// \"create_tag\" in a comment\n\
               /* \"delete_tag\" /* nested */ still a comment */\n\
               let a = \"create_tag\"; let c = '\"'; let l: &'static str = \"x\\\"y\";\n\
               let r = r#\"raw \"q\" text\"#; let b = br\"bytes\"; let d = b\"create_tag\";\n\
               /// \"list_tags\" in a doc comment\n\
               fn f<'a>(x: &'a str) -> &'a str { \"list_tags\" }\n";
    let lits = string_literals(src);
    let want: Vec<(usize, String)> = vec![
        (3, "create_tag".into()),
        (3, "x\\\"y".into()),
        (4, "raw \"q\" text".into()),
        (4, "bytes".into()),
        (4, "create_tag".into()),
        (6, "list_tags".into()),
    ];
    assert_eq!(lits, want);
}

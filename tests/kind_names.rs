//! A job kind's name is written in its own module (`src/kinds/<name>.rs`) and in the catalog
//! (`src/catalog.rs`, which binds the job files) only (issue 34): everything else names a kind
//! through its type (`kinds::AutoCreate::NAME`) and builds its jobs through `JobKind::job`. This
//! test reads every `.rs` file under `src/` and fails on a string literal that is a kind's name
//! or starts with `<name>:` (a unique key), naming `file:line`. The kinds are the job files
//! (`jobs/*.toml`). SQL inside a statement is left alone (the literal is the whole statement,
//! not the name). A literal that only happens to be spelt like a kind (an org setting, an
//! upload's field) carries `// not a job kind: <what it is>` on its line. No database.

use std::path::{Path, PathBuf};

/// The job kinds: the stems of `jobs/*.toml`.
fn kind_names(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root.join("jobs"))
        .expect("jobs/")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    names.sort();
    names
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("readable dir")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
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

/// The string literals of Rust source `text` with the line each starts on: plain (`"…"`, with
/// escapes as written) and raw (`r"…"`, `r#"…"#`); comments and char literals are skipped.
fn string_literals(text: &str) -> Vec<(usize, String)> {
    let b = text.as_bytes();
    let (mut i, mut line, mut out) = (0, 1, Vec::new());
    let count = |s: &[u8]| s.iter().filter(|&&c| c == b'\n').count();
    while i < b.len() {
        match b[i] {
            b'\n' => {
                line += 1;
                i += 1;
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = text[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
                line += count(&b[i..end]);
                i = end;
            }
            b'r' if (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
            {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                let open = i + 1 + hashes;
                if b.get(open) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let end = text[open + 1..]
                    .find(&close)
                    .map_or(b.len(), |e| open + 1 + e);
                out.push((line, text[open + 1..end].to_string()));
                line += count(&b[i..end]);
                i = (end + close.len()).min(b.len());
            }
            b'"' => {
                let start = i + 1;
                let mut j = start;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                let end = j.min(b.len());
                out.push((line, text[start..end].to_string()));
                line += count(&b[i..end]);
                i = end + 1;
            }
            b'\'' => {
                // A char literal ('x', '\n', '\'', '\u{..}') or a lifetime ('a): skip the char.
                if b.get(i + 1) == Some(&b'\\') {
                    let end = text[i + 2..].find('\'').map_or(b.len(), |e| i + 2 + e + 1);
                    i = end;
                } else if b.get(i + 2) == Some(&b'\'') {
                    i += 3;
                } else {
                    let ch = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                    i += if b.get(i + 1 + ch) == Some(&b'\'') {
                        ch + 2
                    } else {
                        1
                    };
                }
            }
            _ => i += 1,
        }
    }
    out
}

/// Where `text` (the file `rel`) names a kind in a literal it should not: `rel:line: "…"`.
fn misplaced(rel: &str, text: &str, kinds: &[String]) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (line, lit) in string_literals(text) {
        let Some(kind) = kinds
            .iter()
            .find(|k| lit == **k || lit.starts_with(&format!("{k}:")))
        else {
            continue;
        };
        if rel == "src/catalog.rs" || rel == format!("src/kinds/{kind}.rs") {
            continue;
        }
        let marked = lines
            .get(line - 1)
            .is_some_and(|l| l.contains("// not a job kind:"));
        if !marked {
            out.push(format!(
                "{rel}:{line}: \"{lit}\" (use kinds::…::NAME or JobKind::job)"
            ));
        }
    }
    out
}

#[test]
fn a_kind_name_is_written_in_its_own_module_and_the_catalog_only() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let kinds = kind_names(root);
    assert!(
        kinds.len() >= 4,
        "the job files were not found in jobs/: {kinds:?}"
    );
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let mut problems = Vec::new();
    for path in &files {
        let rel = path
            .strip_prefix(root)
            .expect("under the manifest dir")
            .to_string_lossy()
            .replace('\\', "/");
        let text = std::fs::read_to_string(path).expect("utf-8 source");
        problems.extend(misplaced(&rel, &text, &kinds));
    }
    for k in &kinds {
        let own = root.join(format!("src/kinds/{k}.rs"));
        let text = std::fs::read_to_string(&own).unwrap_or_default();
        assert!(
            text.contains(&format!("const NAME: &'static str = \"{k}\";")),
            "{k}: src/kinds/{k}.rs must define the kind (`const NAME: &'static str = \"{k}\";`)"
        );
    }
    assert!(
        problems.is_empty(),
        "job kind names written outside src/kinds/<kind>.rs and src/catalog.rs:\n{}",
        problems.join("\n")
    );
}

/// The checker itself: a kind's name, a unique key and a raw string are found with their lines;
/// a comment, a longer word, SQL text, a marked line and the kind's own module are not.
#[test]
fn the_checker_finds_names_keys_and_raw_strings_and_nothing_else() {
    let kinds = vec!["auto_create".to_string()];
    let text = "// \"auto_create\" in a comment\n\
                let a = \"auto_create\";\n\
                let c = 'x'; let d = '\\'';\n\
                let k = format!(\"auto_create:{doc}\");\n\
                let s = \"SELECT 1 WHERE kind = 'auto_create'\";\n\
                let w = \"auto_create_status\";\n\
                let r = r#\"auto_create\"#;\n\
                let m = \"auto_create\"; // not a job kind: a setting\n\
                /* \"auto_create\" */ let e = \"x\";\n";
    let found = misplaced("src/x.rs", text, &kinds);
    assert_eq!(
        found,
        vec![
            "src/x.rs:2: \"auto_create\" (use kinds::…::NAME or JobKind::job)",
            "src/x.rs:4: \"auto_create:{doc}\" (use kinds::…::NAME or JobKind::job)",
            "src/x.rs:7: \"auto_create\" (use kinds::…::NAME or JobKind::job)",
        ]
    );
    assert!(misplaced("src/kinds/auto_create.rs", text, &kinds).is_empty());
    assert!(misplaced("src/catalog.rs", text, &kinds).is_empty());
}

//! A job kind's name is written in its own module (`crates/agentd-store/src/kinds/<name>.rs`) and in the catalog
//! (`crates/agentd-base/src/catalog.rs`, which binds the job files) only (issue 34): everything else names a kind
//! through its type (`kinds::AutoCreate::NAME`) and builds its jobs through `JobKind::job`. This
//! test reads every `.rs` file under `src/` and fails on a string literal that is a kind's name
//! or starts with `<name>:` (a unique key), naming `file:line`. The kinds are the job files
//! (`jobs/*.toml`). SQL inside a statement is left alone (the literal is the whole statement,
//! not the name). A literal that only happens to be spelt like a kind (an org setting, an
//! upload's field) carries `// not a job kind: <what it is>` on its line. No database.

use crate::source_scan;
use source_scan::{string_literals, workspace_rust_files};
use std::path::Path;

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
        if rel == "crates/agentd-base/src/catalog.rs"
            || rel == format!("crates/agentd-store/src/kinds/{kind}.rs")
        {
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
    let mut problems = Vec::new();
    for path in &workspace_rust_files(root) {
        let rel = path
            .strip_prefix(root)
            .expect("under the manifest dir")
            .to_string_lossy()
            .replace('\\', "/");
        let text = std::fs::read_to_string(path).expect("utf-8 source");
        problems.extend(misplaced(&rel, &text, &kinds));
    }
    for k in &kinds {
        let own = root.join(format!("crates/agentd-store/src/kinds/{k}.rs"));
        let text = std::fs::read_to_string(&own).unwrap_or_default();
        assert!(
            text.contains(&format!("const NAME: &'static str = \"{k}\";")),
            "{k}: crates/agentd-store/src/kinds/{k}.rs must define the kind (`const NAME: &'static str = \"{k}\";`)"
        );
    }
    assert!(
        problems.is_empty(),
        "job kind names written outside crates/agentd-store/src/kinds/<kind>.rs and crates/agentd-base/src/catalog.rs:\n{}",
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
    assert!(misplaced("crates/agentd-store/src/kinds/auto_create.rs", text, &kinds).is_empty());
    assert!(misplaced("crates/agentd-base/src/catalog.rs", text, &kinds).is_empty());
}

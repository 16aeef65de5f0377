//! SQL that reads whole (issue 34, item 5): the statements of `crates/agentd-store/src/store` and `crates/agentd-queue/src` are
//! written out, the large ones in `crates/agentd-store/src/store/sql/*.sql` and `crates/agentd-queue/src/sql/*.sql` (one
//! statement a file, loaded with `include_str!`), never put together by `concat!` from
//! fragments a reader cannot see whole. The scan fails on a `concat!` in a `.rs` file under
//! `crates/agentd-store/src/store` or `crates/agentd-queue/src` outside a comment or a `#[doc = concat!(…)]`, naming `file:line`,
//! and on a `.sql` file no `include_str!` loads; the checker is also run on a made-up sample
//! that must fail. The last test prepares every `.sql` file against the migrated schema, so
//! each one parses and names columns that exist.

use crate::common;
use sqlx::{Executor, SqlSafeStr};
use std::path::{Path, PathBuf};

/// The directories whose SQL must read whole.
const DIRS: &[&str] = &["crates/agentd-store/src/store", "crates/agentd-queue/src"];

fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("readable dir")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files(&p, ext, out);
        } else if p.extension().is_some_and(|x| x == ext) {
            out.push(p);
        }
    }
}

/// `file:line` of every `concat!` in `src` outside a `//` comment and a `#[doc = …]` attribute.
fn concat_sites(name: &str, src: &str) -> Vec<String> {
    src.lines()
        .enumerate()
        .filter(|(_, line)| {
            let code = line.split("//").next().unwrap_or_default();
            code.contains("concat!") && !code.trim_start().starts_with("#[doc = concat!(")
        })
        .map(|(i, line)| format!("{name}:{}: {}", i + 1, line.trim()))
        .collect()
}

/// The `.sql` files under `root`'s [`DIRS`] and the `.rs` sources there, as (path, text).
fn sources(root: &Path, ext: &str) -> Vec<(String, String)> {
    let mut paths = Vec::new();
    for dir in DIRS {
        files(&root.join(dir), ext, &mut paths);
    }
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("readable source");
            let name = p.strip_prefix(root).unwrap_or(&p).display().to_string();
            (name, text)
        })
        .collect()
}

/// The problems of the tree at `root`: `concat!` sites, and `.sql` files no `include_str!`
/// of a `.rs` file in the same module directory's parent loads (`sql/<name>.sql`).
fn problems(root: &Path) -> Vec<String> {
    let rust = sources(root, "rs");
    let mut out: Vec<String> = rust
        .iter()
        .flat_map(|(name, text)| concat_sites(name, text))
        .map(|site| format!("SQL put together by concat! (write the statement out): {site}"))
        .collect();
    for (name, _) in sources(root, "sql") {
        let file = Path::new(&name);
        let stem = file.file_name().map(|f| f.to_string_lossy().into_owned());
        let module_dir = file.parent().and_then(Path::parent);
        let loaded = rust.iter().any(|(rs, text)| {
            let here = Path::new(rs).parent() == module_dir;
            here && stem
                .as_ref()
                .is_some_and(|s| text.contains(&format!("include_str!(\"sql/{s}\")")))
        });
        if !loaded {
            out.push(format!("{name}: no include_str!(\"sql/…\") loads it"));
        }
    }
    out
}

#[test]
fn store_and_queue_sql_is_written_whole() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = problems(root);
    assert!(found.is_empty(), "{}", found.join("\n"));
    // The scan saw the statement files (a wrong directory would find nothing to complain of).
    assert!(sources(root, "sql").len() >= 10);
}

#[test]
fn the_checker_names_a_concat_and_an_unloaded_file() {
    let dir = std::env::temp_dir().join(format!("agentd-sql-files-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = dir.join("crates/agentd-store/src/store");
    std::fs::create_dir_all(store.join("sql")).unwrap();
    std::fs::create_dir_all(dir.join("crates/agentd-queue/src")).unwrap();
    std::fs::write(
        store.join("a.rs"),
        "#[doc = concat!(\"fine\")]\n// concat! in a comment is fine\n\
         fn f() { sqlx::query(concat!(\"SELECT \", \"1\")); }\n\
         fn g() { sqlx::query(include_str!(\"sql/used.sql\")); }\n",
    )
    .unwrap();
    std::fs::write(store.join("sql/used.sql"), "SELECT 1\n").unwrap();
    std::fs::write(store.join("sql/orphan.sql"), "SELECT 2\n").unwrap();
    let found = problems(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found[0].contains("crates/agentd-store/src/store/a.rs:3:"),
        "{found:?}"
    );
    assert!(
        found[1].starts_with("crates/agentd-store/src/store/sql/orphan.sql:"),
        "{found:?}"
    );
}

/// Every statement file parses and refers to what the migrated schema has: PostgreSQL prepares
/// it (as `EXPLAIN` would need), naming the file when it cannot.
#[tokio::test]
async fn every_statement_file_prepares_against_the_schema() {
    let db = common::TestDb::new().await;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let statements = sources(root, "sql");
    let mut failed = Vec::new();
    for (name, text) in &statements {
        if let Err(e) = (&db.pool)
            .describe(sqlx::AssertSqlSafe(text.clone()).into_sql_str())
            .await
        {
            failed.push(format!("{name}: {e}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    assert!(statements.len() >= 10);
}

//! The layers Cargo cannot keep. The workspace's crates are the layers of ARCHITECTURE.md §
//! Layers, so an import upward between crates does not compile; inside a crate of several
//! modules (`agentd-base`, `agentd-store`, `agentd-agent`, `agentd-worker`, `agentd-api` and the
//! facade's `src/`) this test reads the source (the modules reachable from the crate's `lib.rs`,
//! without comments, string literals and `#[cfg(test)]` items), collects every path that
//! reaches a top-level module (`crate::x…`, `crate::{x, y::z}`, `super::…` climbing to the crate
//! root), and fails on a cycle (naming its modules and the edges inside it) or on an edge
//! [`LAYERS`] forbids (naming a site). ARCHITECTURE.md § Layers draws the same table; the test
//! checks that it does. The queue also names no domain table in its SQL ([`QUEUE_TABLES`]; the
//! tables are read from `migrations/`). No database.

use crate::source_scan;
use source_scan::{Tok, rust_files, tokens, without_test_items};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, top to bottom. A module may use only modules of the layers below its own (not
/// its own layer's peers). Every top-level module of `src/` is in exactly one layer.
const LAYERS: &[&[&str]] = &[
    &["cli"],
    &["api", "eval"],
    &["worker", "documents"],
    &["jobs", "http"],
    &["app"],
    &["agent"],
    &["approvals"],
    &["tools"],
    &["llm", "org_settings", "webhooks"],
    &["store"],
    &["pii", "kinds"],
    &["queue"],
    &["catalog", "db", "telemetry"],
    &["config", "clock", "analysis", "console", "charts"],
];

/// One use of a top-level module by another: `from → to` at `file:line`.
#[derive(Debug, Clone)]
struct Edge {
    from: String,
    to: String,
    site: String,
}

/// The crates of the workspace whose top-level modules are modules of [`LAYERS`] (the facade's
/// `src/` and the `crates/` that hold several): Cargo keeps the layers between crates (a crate
/// names only the crates below it), this test the layers inside each of them.
fn crates_with_layered_modules(root: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![root.join("src")];
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .expect("crates/")
        .map(|e| e.expect("a directory entry").path().join("src"))
        .collect();
    crates.sort();
    dirs.extend(crates);
    dirs.into_iter()
        .filter(|d| {
            let g = read_library(d);
            !g.modules.is_empty() && g.modules.iter().all(|m| layer_of(m, LAYERS).is_some())
        })
        .collect()
}

#[test]
fn the_modules_inside_each_crate_keep_the_declared_layers_without_cycles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dirs = crates_with_layered_modules(root);
    assert!(
        dirs.len() >= 5,
        "the facade and the crates of several modules (base, store, agent, worker, api): {dirs:?}"
    );
    let mut problems = Vec::new();
    for dir in &dirs {
        let graph = read_library(dir);
        let tops: BTreeSet<String> = graph.modules.iter().cloned().collect();
        // The layers as this crate has them: its own modules, in the order of LAYERS.
        let own: Vec<Vec<&str>> = LAYERS
            .iter()
            .map(|l| {
                l.iter()
                    .copied()
                    .filter(|m| tops.contains(*m))
                    .collect::<Vec<_>>()
            })
            .filter(|l| !l.is_empty())
            .collect();
        let own: Vec<&[&str]> = own.iter().map(Vec::as_slice).collect();
        for p in check(&tops, &graph.edges, &own) {
            problems.push(format!(
                "{}: {p}",
                dir.strip_prefix(root).unwrap_or(dir).display()
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "the modules of a crate break their layering (tests/it/module_graph.rs LAYERS, \
         ARCHITECTURE.md § Layers):\n{}",
        problems.join("\n")
    );
}

#[test]
fn architecture_md_draws_the_same_layers() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md");
    let text = std::fs::read_to_string(&path).expect("ARCHITECTURE.md");
    let drawn = drawn_layers(&text);
    let declared: Vec<Vec<String>> = LAYERS
        .iter()
        .map(|l| l.iter().map(|m| m.to_string()).collect())
        .collect();
    assert_eq!(
        drawn, declared,
        "ARCHITECTURE.md § Layers (the numbered block) and LAYERS in tests/it/module_graph.rs differ"
    );
}

/// The queue's own tables (what `crates/agentd-queue/src` may name in SQL); every other table the migrations
/// create is the domain's.
const QUEUE_TABLES: &[&str] = &[
    "agentd_jobs",
    "agentd_org_queue_limits",
    "agentd_paused_kinds",
];

/// The queue is a library under the domain (River knows `river_job` only): no SQL in the
/// non-test code of `crates/agentd-queue/src` names a domain table. What a job drove is ended by its caller
/// (`jobs::cancel`), and a fan-out's targets come from the domain (`store::nightly`).
#[test]
fn the_queue_names_no_domain_table_in_sql() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tables = created_tables(&root.join("migrations"));
    for q in QUEUE_TABLES {
        assert!(
            tables.iter().any(|t| t == q),
            "QUEUE_TABLES names `{q}`, which no migration creates (renamed or dropped?)"
        );
    }
    let domain: Vec<String> = tables
        .into_iter()
        .filter(|t| !QUEUE_TABLES.contains(&t.as_str()))
        .collect();
    assert!(
        domain.iter().any(|t| t == "orgs") && domain.iter().any(|t| t == "agent_runs"),
        "the domain tables read from migrations/: {domain:?}"
    );
    let mut problems = Vec::new();
    for f in rust_files(&root.join("crates/agentd-queue/src")) {
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let rel = f.strip_prefix(root).unwrap_or(&f).display().to_string();
        problems.extend(domain_sql(&rel, &text, &domain));
    }
    assert!(
        problems.is_empty(),
        "SQL in crates/agentd-queue/src names domain tables (move the statement to where the domain lives and \
         give the queue a hook or return what the caller needs):\n{}",
        problems.join("\n")
    );
}

/// The checker of the queue's SQL, on made-up source: a domain table in a statement is found
/// with its line (also qualified, `documents.id`); a queue table, a longer word, a message that
/// is not SQL, a comment and a `#[cfg(test)]` item are not.
#[test]
fn the_sql_checker_finds_domain_tables_in_statements_only() {
    let domain = vec!["orgs".to_string(), "documents".to_string()];
    let text = "// SELECT 1 FROM orgs\n\
                const A: &str = \"SELECT 1 FROM agentd_jobs WHERE org = $1\";\n\
                const B: &str = \"UPDATE documents SET x = 1\";\n\
                const C: &str = r#\"WITH s AS (SELECT 1)\n SELECT documents.id FROM s\"#;\n\
                const D: &str = \"slots kept for other orgs\";\n\
                const E: &str = \"SELECT auto_create_status, orgs_seen FROM agentd_jobs\";\n\
                #[cfg(test)]\nmod tests { const F: &str = \"SELECT * FROM orgs\"; }\n";
    assert_eq!(
        domain_sql("crates/agentd-queue/src/x.rs", text, &domain),
        vec![
            "crates/agentd-queue/src/x.rs:3: `documents`".to_string(),
            "crates/agentd-queue/src/x.rs:4: `documents`".to_string(),
        ]
    );
    assert_eq!(
        created_tables_in(
            "-- CREATE TABLE old_notes (id int);\n\
             CREATE TABLE orgs (id uuid);\ncreate table if not exists public.documents (id int);\n\
             CREATE UNLOGGED TABLE scratch (x int);\nALTER TABLE scratch RENAME TO scratch_2;\n\
             CREATE TABLE gone (x int);\nDROP TABLE IF EXISTS gone;\n"
        ),
        vec!["documents", "orgs", "scratch_2"]
    );
}

/// `rel:line: \`table\`` for each domain table a string literal of `text`'s non-test code names
/// when the literal reads as SQL (it has `SELECT`, `INSERT`, `UPDATE`, `DELETE`, `FROM` or
/// `JOIN` as a word, in any case). A table counts as a whole word (`documents.id` names
/// `documents`; `auto_create_status` no table).
fn domain_sql(rel: &str, text: &str, domain: &[String]) -> Vec<String> {
    const SQL_WORDS: &[&str] = &["select", "insert", "update", "delete", "from", "join"];
    let mut out = Vec::new();
    for (t, line) in without_test_items(&tokens(text)) {
        let Tok::Str(lit) = t else { continue };
        let words: Vec<&str> = lit
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .collect();
        if !words
            .iter()
            .any(|w| SQL_WORDS.contains(&w.to_ascii_lowercase().as_str()))
        {
            continue;
        }
        for table in domain {
            if words.contains(&table.as_str()) {
                out.push(format!("{rel}:{line}: `{table}`"));
            }
        }
    }
    out
}

/// The tables the migrations under `dir` leave (created, renamed, not dropped), sorted.
fn created_tables(dir: &Path) -> Vec<String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .collect();
    files.sort();
    let all: String = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display())))
        .collect::<Vec<_>>()
        .join("\n");
    created_tables_in(&all)
}

/// The tables SQL text `sql` leaves, in order of the statements (`--` comments skipped):
/// `CREATE [UNLOGGED|TEMP] TABLE [IF NOT EXISTS] x`, `ALTER TABLE x RENAME TO y`,
/// `DROP TABLE [IF EXISTS] x`; a schema prefix (`public.`) dropped. Sorted.
fn created_tables_in(sql: &str) -> Vec<String> {
    let code: String = sql
        .lines()
        .map(|l| l.split("--").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
        .to_ascii_lowercase();
    let w: Vec<&str> = code
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
        .filter(|w| !w.is_empty())
        .collect();
    let at = |i: usize| w.get(i).copied().unwrap_or_default();
    // The name at `i`, past `IF [NOT] EXISTS` and `ONLY`.
    let name = |mut i: usize| {
        if at(i) == "if" {
            i += 2 + usize::from(at(i + 1) == "not");
        }
        if at(i) == "only" {
            i += 1;
        }
        at(i).rsplit('.').next().unwrap_or_default().to_string()
    };
    let mut tables: BTreeSet<String> = BTreeSet::new();
    for i in 0..w.len() {
        match at(i) {
            "create" => {
                let t = if matches!(at(i + 1), "unlogged" | "temp" | "temporary") {
                    i + 2
                } else {
                    i + 1
                };
                if at(t) == "table" {
                    tables.insert(name(t + 1));
                }
            }
            "alter" if at(i + 1) == "table" => {
                // ALTER TABLE [IF EXISTS] [ONLY] x RENAME TO y
                let from = name(i + 2);
                let rename = (i + 3..i + 7).find(|&k| at(k) == "rename" && at(k + 1) == "to");
                if let Some(k) = rename
                    && tables.remove(&from)
                {
                    tables.insert(name(k + 2));
                }
            }
            "drop" if at(i + 1) == "table" => {
                tables.remove(&name(i + 2));
            }
            _ => {}
        }
    }
    tables.into_iter().collect()
}

/// The checker itself, on a made-up crate: a back edge is named with its site, a cycle with its
/// modules and edges; `#[cfg(test)]` items, comments and strings are not read; groups and
/// `super::` paths are.
#[test]
fn the_checker_names_a_forbidden_edge_and_a_cycle() {
    let dir = std::env::temp_dir().join(format!("module_graph_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("top")).unwrap();
    let write = |p: &str, s: &str| std::fs::write(src.join(p), s).unwrap();
    write("lib.rs", "pub mod top;\npub mod mid;\npub mod low;\n");
    write(
        "top/mod.rs",
        "mod inner;\nuse crate::{mid::{self, X}, low::Y};\n",
    );
    write(
        "top/inner.rs",
        "fn f() { let _ = \"crate::mid\"; } // crate::low\n",
    );
    write(
        "mid.rs",
        "pub struct X;\nfn g() { super::low::h(); }\n#[cfg(test)]\nmod tests { use crate::top::T; }\n",
    );
    write("low.rs", "pub struct Y;\npub fn h() {}\n");
    let layers: &[&[&str]] = &[&["top"], &["mid"], &["low"]];
    let g = read_library(&src);
    let tops: BTreeSet<String> = g.modules.iter().cloned().collect();
    let edges: BTreeSet<(String, String)> = g
        .edges
        .iter()
        .map(|e| (e.from.clone(), e.to.clone()))
        .collect();
    let want: BTreeSet<(String, String)> = [("top", "mid"), ("top", "low"), ("mid", "low")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(edges, want, "what the reader found");
    assert!(check(&tops, &g.edges, layers).is_empty());

    // A back edge low → top: forbidden by the layers, and a cycle top → low → top.
    write("low.rs", "pub struct Y;\npub fn h() { crate::top::f(); }\n");
    let g = read_library(&src);
    let problems = check(&tops, &g.edges, layers).join("\n");
    assert!(
        problems.contains("low → top") && problems.contains("low.rs:2"),
        "{problems}"
    );
    assert!(
        problems.contains("cycle between low, mid, top"),
        "{problems}"
    );
    assert!(
        problems.contains("mid → low"),
        "the cycle's edges: {problems}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------------
// The check.

fn layer_of(m: &str, layers: &[&[&str]]) -> Option<usize> {
    layers.iter().position(|l| l.contains(&m))
}

/// Every problem: a module missing from the layers (or named there but absent), an edge to a
/// module not strictly below, a cycle.
fn check(tops: &BTreeSet<String>, edges: &[Edge], layers: &[&[&str]]) -> Vec<String> {
    let mut problems = Vec::new();
    for m in tops {
        if layer_of(m, layers).is_none() {
            problems.push(format!("module `{m}` is in no layer"));
        }
    }
    for m in layers.iter().flat_map(|l| l.iter()) {
        if !tops.contains(*m) {
            problems.push(format!("layer names `{m}`, which src/ does not have"));
        }
    }
    let mut by_edge: BTreeMap<(String, String), Vec<&str>> = BTreeMap::new();
    for e in edges {
        by_edge
            .entry((e.from.clone(), e.to.clone()))
            .or_default()
            .push(&e.site);
    }
    for ((from, to), sites) in &by_edge {
        if let (Some(a), Some(b)) = (layer_of(from, layers), layer_of(to, layers))
            && b <= a
        {
            problems.push(format!(
                "forbidden edge {from} → {to} ({} site(s), first {}): `{to}` is not below `{from}`",
                sites.len(),
                sites[0]
            ));
        }
    }
    for scc in cycles(tops, &by_edge) {
        let set: BTreeSet<&String> = scc.iter().collect();
        let inside: Vec<String> = by_edge
            .iter()
            .filter(|((a, b), _)| set.contains(a) && set.contains(b))
            .map(|((a, b), s)| format!("{a} → {b} ({})", s[0]))
            .collect();
        problems.push(format!(
            "cycle between {}: {}",
            scc.join(", "),
            inside.join("; ")
        ));
    }
    problems
}

/// The strongly connected components of more than one module (Tarjan), each sorted.
fn cycles(
    tops: &BTreeSet<String>,
    by_edge: &BTreeMap<(String, String), Vec<&str>>,
) -> Vec<Vec<String>> {
    struct T<'a> {
        next: BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        count: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        t.index.insert(v, t.count);
        t.low.insert(v, t.count);
        t.count += 1;
        t.stack.push(v);
        t.on.insert(v);
        for w in t.next.get(v).cloned().unwrap_or_default() {
            if !t.index.contains_key(w) {
                visit(t, w);
                let l = t.low[v].min(t.low[w]);
                t.low.insert(v, l);
            } else if t.on.contains(w) {
                let l = t.low[v].min(t.index[w]);
                t.low.insert(v, l);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        next: BTreeMap::new(),
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        count: 0,
        out: Vec::new(),
    };
    for (a, b) in by_edge.keys() {
        t.next.entry(a.as_str()).or_default().push(b.as_str());
    }
    for m in tops {
        if !t.index.contains_key(m.as_str()) {
            visit(&mut t, m.as_str());
        }
    }
    t.out
}

/// The numbered block of ARCHITECTURE.md § Layers: lines `N  a · b   what they are`.
fn drawn_layers(text: &str) -> Vec<Vec<String>> {
    let section = text
        .split("\n## ")
        .find(|s| s.starts_with("Layers"))
        .expect("ARCHITECTURE.md has a `## Layers` section");
    let block = section
        .split("```")
        .nth(1)
        .expect("§ Layers opens with a fenced block");
    let mut out = Vec::new();
    for line in block.lines() {
        let line = line.trim();
        let Some((n, rest)) = line.split_once(char::is_whitespace) else {
            continue;
        };
        if n.parse::<usize>().is_err() {
            continue;
        }
        let names = rest.trim_start().split("  ").next().unwrap_or_default();
        out.push(
            names
                .split('·')
                .map(|m| m.trim().trim_end_matches('/').to_string())
                .filter(|m| !m.is_empty())
                .collect(),
        );
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Reading the source.

struct Library {
    /// The top-level modules (`mod x;` in lib.rs).
    modules: Vec<String>,
    edges: Vec<Edge>,
}

/// The tokens of a file's non-test code, without string literals (a path in a string is no use).
fn code_tokens(text: &str) -> Vec<(Tok, usize)> {
    without_test_items(&tokens(text))
        .into_iter()
        .filter(|(t, _)| !matches!(t, Tok::Str(_)))
        .collect()
}

/// The modules reachable from `root/lib.rs` and every path of theirs that names another
/// top-level module.
fn read_library(root: &Path) -> Library {
    let lib = root.join("lib.rs");
    let toks = code_tokens(&std::fs::read_to_string(&lib).expect("src/lib.rs"));
    let (children, _) = scan(&toks, &[], &[]);
    let modules: Vec<String> = children.clone();
    let mut edges = Vec::new();
    let mut todo: Vec<(PathBuf, Vec<String>)> = children
        .iter()
        .map(|c| (module_file(root, c), vec![c.clone()]))
        .collect();
    while let Some((file, path)) = todo.pop() {
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let toks = code_tokens(&text);
        let (children, refs) = scan(&toks, &path, &modules);
        let rel = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .display()
            .to_string();
        for (to, line) in refs {
            if to != path[0] {
                edges.push(Edge {
                    from: path[0].clone(),
                    to,
                    site: format!("src/{rel}:{line}"),
                });
            }
        }
        let dir = if file.file_name().is_some_and(|n| n == "mod.rs") {
            file.parent().unwrap().to_path_buf()
        } else {
            file.with_extension("")
        };
        for c in children {
            let mut p = path.clone();
            p.push(c.clone());
            todo.push((module_file(&dir, &c), p));
        }
    }
    Library { modules, edges }
}

/// `dir/name.rs`, else `dir/name/mod.rs`.
fn module_file(dir: &Path, name: &str) -> PathBuf {
    let flat = dir.join(format!("{name}.rs"));
    if flat.exists() {
        return flat;
    }
    let nested = dir.join(name).join("mod.rs");
    assert!(
        nested.exists(),
        "`mod {name};` in {}: neither {} nor {}",
        dir.display(),
        flat.display(),
        nested.display()
    );
    nested
}

/// The `mod x;` children of a file and every top-level module it names, with the line (`toks`:
/// its [`code_tokens`], without `#[cfg(test)]` items). `path` is the file's module path (`[]` for lib.rs).
fn scan(
    toks: &[(Tok, usize)],
    path: &[String],
    tops: &[String],
) -> (Vec<String>, Vec<(String, usize)>) {
    let ident = |i: usize| match toks.get(i) {
        Some((Tok::Ident(s), _)) => Some(s.as_str()),
        _ => None,
    };
    let is = |i: usize, t: &Tok| toks.get(i).map(|x| &x.0) == Some(t);
    let mut children = Vec::new();
    let mut refs = Vec::new();
    // Inline modules open at these brace depths.
    let mut inline: Vec<usize> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        match &toks[i].0 {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                depth = depth.saturating_sub(1);
                if inline.last() == Some(&depth) {
                    inline.pop();
                }
            }
            Tok::Ident(w) if w == "mod" => {
                if let Some(name) = ident(i + 1) {
                    if is(i + 2, &Tok::Punct(';')) && inline.is_empty() {
                        children.push(name.to_string());
                    } else if is(i + 2, &Tok::Punct('{')) {
                        inline.push(depth);
                    }
                }
            }
            Tok::Ident(w) if (w == "crate" || w == "super") && is(i + 1, &Tok::Path) => {
                // Where the path starts: the crate root (`crate`, `$crate`, or enough `super`s).
                let mut j = i;
                let at_root = if w == "crate" {
                    j += 2;
                    true
                } else {
                    let mut ups = 0;
                    while ident(j) == Some("super") && is(j + 1, &Tok::Path) {
                        ups += 1;
                        j += 2;
                    }
                    ups == path.len() + inline.len()
                };
                if at_root {
                    let line = toks[i].1;
                    if let Some(name) = ident(j) {
                        if tops.iter().any(|t| t == name) {
                            refs.push((name.to_string(), line));
                        }
                    } else if is(j, &Tok::Punct('{')) {
                        // A group: the first name of each element.
                        let mut k = j + 1;
                        let mut d = 0;
                        let mut first = true;
                        while k < toks.len() {
                            match &toks[k].0 {
                                Tok::Punct('{') => d += 1,
                                Tok::Punct('}') if d == 0 => break,
                                Tok::Punct('}') => d -= 1,
                                Tok::Punct(',') if d == 0 => first = true,
                                Tok::Ident(n) if first && d == 0 => {
                                    first = false;
                                    if tops.iter().any(|t| t == n) {
                                        refs.push((n.clone(), toks[k].1));
                                    }
                                }
                                _ => {}
                            }
                            k += 1;
                        }
                    }
                }
                i = j.max(i + 1);
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    (children, refs)
}

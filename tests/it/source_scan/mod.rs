//! Reading the crate's own source, for the tests that check it (`tests/it/kind_names.rs`,
//! `tests/it/tool_names.rs`, `tests/it/module_graph.rs`): the `.rs` files under a directory and one
//! lexer over Rust text. The lexer is not a parser: it knows what it must not misread —
//! comments (block comments nest), plain, raw, byte and C strings, char and byte literals,
//! lifetimes, raw identifiers and numbers — and gives identifiers, `::`, punctuation and string
//! literals with the line each starts on. No database.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, in path order.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    walk(dir, &mut out);
    out
}

/// The `.rs` files of every crate of the workspace rooted at `root`: `src/` (the binary and the
/// facade) and each `crates/<crate>/src/`, sorted.
#[allow(dead_code)] // not every test binary that includes this module scans the workspace
pub fn workspace_rust_files(root: &Path) -> Vec<PathBuf> {
    let mut out = rust_files(&root.join("src"));
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .unwrap_or_else(|e| panic!("read {}: {e}", root.join("crates").display()))
        .map(|e| e.expect("a directory entry").path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    crates.sort();
    for c in crates {
        walk(&c, &mut out);
    }
    out
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// One token of Rust source.
#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    Ident(String),
    /// `::`
    Path,
    Punct(char),
    /// A string literal (plain, raw, byte or C): the text between its quotes as written, escapes
    /// not decoded.
    Str(String),
}

/// The tokens of `src`, each with the line it starts on. Comments, char and byte literals,
/// numbers and lifetimes are dropped; a raw identifier `r#name` reads as `name`.
pub fn tokens(src: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0usize, 1usize);
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            // Block comments nest.
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(c[i] == '\n');
                    i += 1;
                }
            }
        } else if ch == '"' {
            let start = line;
            let (text, end) = plain_string(&c, i + 1, &mut line);
            out.push((Tok::Str(text), start));
            i = end;
        } else if matches!(ch, 'r' | 'b' | 'c')
            && let Some((lit, end)) = prefixed_literal(&c, i, &mut line)
        {
            if let Some((text, start)) = lit {
                out.push((Tok::Str(text), start));
            }
            i = end;
        } else if ch == '\'' {
            if at(i + 1) == '\\' {
                // An escaped char literal ('\n', '\'', '\u{1F600}'): past the escaped char, then
                // to the closing quote.
                i += 3;
                while i < c.len() && c[i] != '\'' && c[i] != '\n' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                // A lifetime or label.
                i += 1;
                while i < c.len() && ident(c[i]) {
                    i += 1;
                }
            }
        } else if ch.is_alphabetic() || ch == '_' {
            let start = i;
            while i < c.len() && ident(c[i]) {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            // A raw identifier `r#name` reads as `name`.
            if word == "r" && at(i) == '#' && (at(i + 1).is_alphabetic() || at(i + 1) == '_') {
                i += 1;
                continue;
            }
            out.push((Tok::Ident(word), line));
        } else if ch.is_ascii_digit() {
            while i < c.len() && ident(c[i]) {
                i += 1;
            }
        } else if ch == ':' && at(i + 1) == ':' {
            out.push((Tok::Path, line));
            i += 2;
        } else {
            out.push((Tok::Punct(ch), line));
            i += 1;
        }
    }
    out
}

/// The string literals of `src` with the line each starts on (see [`tokens`]).
pub fn string_literals(src: &str) -> Vec<(usize, String)> {
    tokens(src)
        .into_iter()
        .filter_map(|(t, line)| match t {
            Tok::Str(s) => Some((line, s)),
            _ => None,
        })
        .collect()
}

/// `toks` without the items `#[cfg(test)]` gates (the attribute and its item).
pub fn without_test_items(toks: &[(Tok, usize)]) -> Vec<(Tok, usize)> {
    let ident = |i: usize, w: &str| matches!(toks.get(i), Some((Tok::Ident(s), _)) if s == w);
    let is = |i: usize, t: &Tok| toks.get(i).map(|x| &x.0) == Some(t);
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        if is(i, &Tok::Punct('#'))
            && is(i + 1, &Tok::Punct('['))
            && ident(i + 2, "cfg")
            && is(i + 3, &Tok::Punct('('))
            && ident(i + 4, "test")
            && is(i + 5, &Tok::Punct(')'))
            && is(i + 6, &Tok::Punct(']'))
        {
            i = skip_item(toks, i + 7);
            continue;
        }
        out.push(toks[i].clone());
        i += 1;
    }
    out
}

/// Past the item starting at `i` (after its attributes): to its `;`, or to the `}` closing its
/// first top-level `{`.
fn skip_item(toks: &[(Tok, usize)], mut i: usize) -> usize {
    // Further attributes.
    while matches!(toks.get(i), Some((Tok::Punct('#'), _))) {
        let mut d = 0;
        i += 1;
        while i < toks.len() {
            match toks[i].0 {
                Tok::Punct('[') => d += 1,
                Tok::Punct(']') => {
                    d -= 1;
                    if d == 0 {
                        i += 1;
                        break;
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }
    let mut paren = 0i32;
    while i < toks.len() {
        match toks[i].0 {
            Tok::Punct('(') | Tok::Punct('[') => paren += 1,
            Tok::Punct(')') | Tok::Punct(']') => paren -= 1,
            Tok::Punct(';') if paren == 0 => return i + 1,
            Tok::Punct('{') if paren == 0 => {
                let mut d = 0;
                while i < toks.len() {
                    match toks[i].0 {
                        Tok::Punct('{') => d += 1,
                        Tok::Punct('}') => {
                            d -= 1;
                            if d == 0 {
                                return i + 1;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
                return i;
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// The body of a plain string starting at `i` (after its quote) as written, and the index past
/// its closing quote.
fn plain_string(c: &[char], mut i: usize, line: &mut usize) -> (String, usize) {
    let mut text = String::new();
    while i < c.len() {
        match c[i] {
            '\\' => {
                text.extend(c[i..(i + 2).min(c.len())].iter());
                *line += usize::from(c.get(i + 1) == Some(&'\n'));
                i += 2;
            }
            '"' => return (text, i + 1),
            ch => {
                *line += usize::from(ch == '\n');
                text.push(ch);
                i += 1;
            }
        }
    }
    (text, i)
}

/// A literal with a prefix at `i`: `r"…"`, `r#"…"#`, `b"…"`, `br#"…"#`, `c"…"`, `cr"…"` (a
/// string: its text and start line) or `b'x'` (a byte: no text), and the index past it; `None`
/// if `i` starts an identifier instead.
#[allow(clippy::type_complexity)]
fn prefixed_literal(
    c: &[char],
    i: usize,
    line: &mut usize,
) -> Option<(Option<(String, usize)>, usize)> {
    let at = |k: usize| c.get(k).copied().unwrap_or('\0');
    let start = *line;
    let mut k = i;
    if matches!(at(k), 'b' | 'c') {
        k += 1;
        if at(k) == '"' {
            let (text, end) = plain_string(c, k + 1, line);
            return Some((Some((text, start)), end));
        }
        if at(i) == 'b' && at(k) == '\'' {
            let mut j = k + 1;
            if at(j) == '\\' {
                j += 1;
            }
            j += 1;
            while j < c.len() && c[j] != '\'' {
                j += 1;
            }
            return Some((None, j + 1));
        }
    }
    if at(k) != 'r' {
        return None;
    }
    k += 1;
    let mut hashes = 0;
    while at(k) == '#' {
        hashes += 1;
        k += 1;
    }
    if at(k) != '"' {
        return None;
    }
    k += 1;
    let body = k;
    while k < c.len() {
        if c[k] == '"' && (1..=hashes).all(|h| at(k + h) == '#') {
            let text = c[body..k].iter().collect();
            return Some((Some((text, start)), k + 1 + hashes));
        }
        *line += usize::from(c[k] == '\n');
        k += 1;
    }
    Some((Some((c[body..].iter().collect(), start)), k))
}

/// The lexer itself: literals of every form with their lines, and nothing from comments, char
/// literals or lifetimes.
#[test]
fn the_scan_reads_literals_and_skips_comments() {
    let src = "// \"create_tag\" in a comment\n\
               /* \"delete_tag\" /* nested */ still a comment */\n\
               let a = \"create_tag\"; let c = '\"'; let l: &'static str = \"x\\\"y\";\n\
               let r = r#\"raw \"q\" text\"#; let b = br\"bytes\"; let d = b\"create_tag\";\n\
               /// \"list_tags\" in a doc comment\n\
               fn f<'a>(x: &'a str) -> &'a str { \"list_tags\" }\n\
               let e = '\\''; let q = ('\\'', '\"'); let u = '\\u{1F600}'; let by = b'\"';\n\
               let m = \"two\n\
               lines\"; let n = \"after\"; let ident = r#type; let cs = c\"cstr\";\n";
    let lits = string_literals(src);
    let want: Vec<(usize, String)> = vec![
        (3, "create_tag".into()),
        (3, "x\\\"y".into()),
        (4, "raw \"q\" text".into()),
        (4, "bytes".into()),
        (4, "create_tag".into()),
        (6, "list_tags".into()),
        (8, "two\nlines".into()),
        (9, "after".into()),
        (9, "cstr".into()),
    ];
    assert_eq!(lits, want);
    let idents: Vec<String> = tokens(src)
        .into_iter()
        .filter_map(|(t, _)| match t {
            Tok::Ident(w) => Some(w),
            _ => None,
        })
        .collect();
    assert!(idents.contains(&"type".to_string()), "r#type reads as type");
    assert!(
        !idents.contains(&"static".to_string()),
        "a lifetime is no identifier"
    );
}

/// `#[cfg(test)]` items are left out with their further attributes; what follows stays.
#[test]
fn test_items_are_left_out() {
    let src = "fn a() {}\n#[cfg(test)]\n#[allow(x)]\nmod tests { fn b() { \"in test\"; } }\n\
               #[cfg(test)]\nuse crate::x;\nfn c() { \"kept\"; }\n";
    let kept = without_test_items(&tokens(src));
    let lits: Vec<&Tok> = kept
        .iter()
        .map(|(t, _)| t)
        .filter(|t| matches!(t, Tok::Str(_)))
        .collect();
    assert_eq!(lits, vec![&Tok::Str("kept".into())]);
    assert!(!kept.contains(&(Tok::Ident("x".into()), 6)));
}

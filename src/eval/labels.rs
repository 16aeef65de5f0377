//! The labelled set: `<dir>/<stem>.labels.toml` beside `<dir>/<stem>.txt` (or the file named by
//! its `document` key). A labels file:
//!
//! ```toml
//! document = "invoice_en.txt"      # optional: <stem>.txt
//! description = "One-page English invoice"
//! split = "dev"                    # required: "dev" (may be tuned on) or "test" (never)
//! language = "en"                  # required: en, de, fr, es, it, nl or pt
//! kind = "invoice"                 # required: one of KINDS
//! [fields]
//! invoice_number = "INV-2026-0417"                       # a string, compared without case
//! invoice_date = "2026-11-02"                            # YYYY-MM-DD: compared as a date
//! total_due = { value = 897.60, aliases = ["total", "amount_due"] }   # a number
//! [acceptable]                     # optional: other real fields a reviewer would keep
//! supplier = { value = "Acme Ltd", aliases = ["vendor", "seller"] }
//! line_items = 3                                         # a table: its number of rows
//! ```
//!
//! `[fields]` are what a proposal must find (recall and value accuracy are measured on them);
//! `[acceptable]` are the document's other fields a reviewer would accept in a schema: a
//! proposed property that matches one does not count against precision, one left out does not
//! count against recall. No acceptable name or alias may repeat a `[fields]` name or alias.
//!
//! Errors name the file and the key.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// One expected field.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpectedField {
    /// The name a good schema would use.
    pub name: String,
    /// Other acceptable names (matched after normalisation as well).
    pub aliases: Vec<String>,
    /// The expected value: string, number, bool or null (`YYYY-MM-DD` strings are dates).
    pub value: Value,
}

/// Which part of the set a document belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// The heuristics and prompts may be tuned on these.
    Dev,
    /// Nothing is tuned on these: they measure generalisation.
    Test,
}

impl Split {
    pub fn as_str(self) -> &'static str {
        match self {
            Split::Dev => "dev",
            Split::Test => "test",
        }
    }
}

impl std::fmt::Display for Split {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The languages a sample may be written in (ISO 639-1).
pub const LANGUAGES: [&str; 7] = ["en", "de", "fr", "es", "it", "nl", "pt"];

/// The kinds of document a sample may be: what the per-kind totals group by.
pub const KINDS: [&str; 16] = [
    "invoice",
    "credit_note",
    "receipt",
    "bank_statement",
    "card_statement",
    "payslip",
    "lab_report",
    "purchase_order",
    "delivery_note",
    "bill_of_lading",
    "shipping_manifest",
    "utility_bill",
    "insurance",
    "tax_form",
    "contract",
    "other",
];

/// A labels file's header: everything but the fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    /// The document file, when not `<stem>.txt`.
    pub document: Option<String>,
    pub description: String,
    pub split: Split,
    /// One of [`LANGUAGES`].
    pub language: String,
    /// One of [`KINDS`].
    pub kind: String,
}

/// One labelled document.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The labels file's stem, e.g. `invoice_en`.
    pub name: String,
    pub description: String,
    pub split: Split,
    pub language: String,
    pub kind: String,
    /// The document file (for messages).
    pub document_path: PathBuf,
    pub text: String,
    /// What a proposal must find.
    pub fields: Vec<ExpectedField>,
    /// The document's other fields a reviewer would accept.
    pub acceptable: Vec<ExpectedField>,
}

/// A labels file's fields: the expected ones and the acceptable ones.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Fields {
    pub expected: Vec<ExpectedField>,
    pub acceptable: Vec<ExpectedField>,
}

/// A labels or document file that cannot be used; the message names the file and key.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct LabelError {
    pub file: String,
    pub message: String,
}

fn err(file: &Path, message: impl Into<String>) -> LabelError {
    LabelError {
        file: file.display().to_string(),
        message: message.into(),
    }
}

fn to_json(v: &toml::Value) -> Option<Value> {
    Some(match v {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f).map(Value::Number)?,
        toml::Value::Boolean(b) => Value::Bool(*b),
        // A bare TOML date is the ISO date string.
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(_) | toml::Value::Table(_) => return None,
    })
}

const KEYS: [&str; 7] = [
    "document",
    "description",
    "split",
    "language",
    "kind",
    "fields",
    "acceptable",
];

/// Parses one labels file's text; `file` names it in errors.
pub fn parse_labels(file: &Path, text: &str) -> Result<(Header, Fields), LabelError> {
    let table: toml::Table = text
        .parse()
        .map_err(|e| err(file, format!("not valid TOML: {e}")))?;
    for key in table.keys() {
        if !KEYS.contains(&key.as_str()) {
            return Err(err(
                file,
                format!("unknown key `{key}` (known: {})", KEYS.join(", ")),
            ));
        }
    }
    let string = |key: &str| -> Result<Option<String>, LabelError> {
        match table.get(key) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(err(file, format!("`{key}` must be a string (got {other})"))),
        }
    };
    // A required key whose value is one of `known`.
    let one_of = |key: &str, known: &[&str], what: &str| -> Result<String, LabelError> {
        let known_list = known.join(", ");
        match string(key)? {
            None => Err(err(
                file,
                format!("`{key}` is required: {what}; one of {known_list}"),
            )),
            Some(v) if known.contains(&v.as_str()) => Ok(v),
            Some(v) => Err(err(
                file,
                format!("`{key}` = {v:?} is not one of {known_list}"),
            )),
        }
    };
    let split = match one_of(
        "split",
        &["dev", "test"],
        "which part of the set the document is in (dev may be tuned on, test never)",
    )?
    .as_str()
    {
        "dev" => Split::Dev,
        _ => Split::Test,
    };
    let header = Header {
        document: string("document")?,
        description: string("description")?.unwrap_or_default(),
        split,
        language: one_of("language", &LANGUAGES, "the document's language")?,
        kind: one_of("kind", &KINDS, "what kind of document it is")?,
    };
    let Some(toml::Value::Table(fields)) = table.get("fields") else {
        return Err(err(
            file,
            "`[fields]` is required: one `name = value` (or `name = { value = …, aliases = [...] }`) per expected field",
        ));
    };
    if fields.is_empty() {
        return Err(err(file, "`[fields]` is empty: label at least one field"));
    }
    let expected = entries(file, "fields", fields)?;
    let acceptable = match table.get("acceptable") {
        None => Vec::new(),
        Some(toml::Value::Table(t)) => entries(file, "acceptable", t)?,
        Some(_) => {
            return Err(err(
                file,
                "`acceptable` must be a table: `[acceptable]` then one `name = value` per field",
            ));
        }
    };
    // A name is a label of one field only: matched both ways, it would count twice.
    for a in &acceptable {
        for n in std::iter::once(&a.name).chain(&a.aliases) {
            let key = super::score::norm_name(n);
            if let Some(f) = expected.iter().find(|f| {
                std::iter::once(&f.name)
                    .chain(&f.aliases)
                    .any(|m| super::score::norm_name(m) == key)
            }) {
                return Err(err(
                    file,
                    format!(
                        "acceptable.{}: `{n}` already names fields.{} (an acceptable field is another piece of data)",
                        a.name, f.name
                    ),
                ));
            }
        }
    }
    Ok((
        header,
        Fields {
            expected,
            acceptable,
        },
    ))
}

/// The entries of a `[fields]` or `[acceptable]` table (`section` names it in errors).
fn entries(
    file: &Path,
    section: &str,
    fields: &toml::Table,
) -> Result<Vec<ExpectedField>, LabelError> {
    let mut out = Vec::new();
    for (name, v) in fields {
        let (value, aliases) = match v {
            toml::Value::Table(t) => {
                for k in t.keys() {
                    if k != "value" && k != "aliases" {
                        return Err(err(
                            file,
                            format!("{section}.{name}.{k}: unknown key (known: value, aliases)"),
                        ));
                    }
                }
                let value = t
                    .get("value")
                    .ok_or_else(|| err(file, format!("{section}.{name}.value is required")))?;
                let aliases = match t.get("aliases") {
                    None => Vec::new(),
                    Some(toml::Value::Array(a)) => a
                        .iter()
                        .map(|x| {
                            x.as_str().map(str::to_string).ok_or_else(|| {
                                err(file, format!("{section}.{name}.aliases must list strings"))
                            })
                        })
                        .collect::<Result<_, _>>()?,
                    Some(_) => {
                        return Err(err(
                            file,
                            format!("{section}.{name}.aliases must be an array of strings"),
                        ));
                    }
                };
                (value, aliases)
            }
            other => (other, Vec::new()),
        };
        let value = to_json(value).ok_or_else(|| {
            err(
                file,
                format!("{section}.{name}: the value must be a string, number, boolean or date"),
            )
        })?;
        out.push(ExpectedField {
            name: name.clone(),
            aliases,
            value,
        });
    }
    Ok(out)
}

/// Loads every `*.labels.toml` in `dir` (sorted by name), keeping only the names in `only`
/// when it is not empty, and only the samples of `split` when given.
pub fn load_dir(
    dir: &Path,
    only: &[String],
    split: Option<Split>,
) -> Result<Vec<Sample>, LabelError> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        err(
            dir,
            format!("cannot read the samples directory: {e} (pass --dir DIR holding <name>.txt and <name>.labels.toml)"),
        )
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(".labels.toml"))
        })
        .collect();
    files.sort();
    let mut samples = Vec::new();
    for file in files {
        let file_name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let stem = file_name.trim_end_matches(".labels.toml").to_string();
        if !only.is_empty() && !only.contains(&stem) {
            continue;
        }
        let text =
            std::fs::read_to_string(&file).map_err(|e| err(&file, format!("cannot read: {e}")))?;
        let (header, labelled) = parse_labels(&file, &text)?;
        if split.is_some_and(|s| s != header.split) {
            continue;
        }
        let document_path = dir.join(
            header
                .document
                .clone()
                .unwrap_or_else(|| format!("{stem}.txt")),
        );
        let bytes = std::fs::read(&document_path).map_err(|e| {
            err(
                &file,
                format!("document {}: cannot read: {e}", document_path.display()),
            )
        })?;
        samples.push(Sample {
            name: stem,
            description: header.description,
            split: header.split,
            language: header.language,
            kind: header.kind,
            document_path,
            text: crate::store::documents::text_from_bytes(&bytes),
            fields: labelled.expected,
            acceptable: labelled.acceptable,
        });
    }
    for name in only {
        if !samples.iter().any(|s| &s.name == name) {
            let why = match split {
                Some(s) if dir.join(format!("{name}.labels.toml")).exists() => {
                    format!("it is not in the {s} split")
                }
                _ => format!("no {name}.labels.toml here"),
            };
            return Err(err(dir, format!("--only: no sample `{name}` ({why})")));
        }
    }
    if samples.is_empty() {
        return Err(err(
            dir,
            match split {
                Some(s) => format!("no *.labels.toml of the {s} split: nothing to evaluate"),
                None => "no *.labels.toml files: nothing to evaluate".to_string(),
            },
        ));
    }
    Ok(samples)
}

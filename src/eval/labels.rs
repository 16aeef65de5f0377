//! The labelled set: `<dir>/<stem>.labels.toml` beside `<dir>/<stem>.txt` (or the file named by
//! its `document` key). A labels file:
//!
//! ```toml
//! document = "invoice_en.txt"      # optional: <stem>.txt
//! description = "One-page English invoice"
//! [fields]
//! invoice_number = "INV-2026-0417"                       # a string, compared without case
//! invoice_date = "2026-11-02"                            # YYYY-MM-DD: compared as a date
//! total_due = { value = 897.60, aliases = ["total", "amount_due"] }   # a number
//! ```
//!
//! Errors name the file and the key.

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

/// One labelled document.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The labels file's stem, e.g. `invoice_en`.
    pub name: String,
    pub description: String,
    /// The document file (for messages).
    pub document_path: PathBuf,
    pub text: String,
    pub fields: Vec<ExpectedField>,
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

/// Parses one labels file's text; `file` names it in errors.
pub fn parse_labels(
    file: &Path,
    text: &str,
) -> Result<(Option<String>, String, Vec<ExpectedField>), LabelError> {
    let table: toml::Table = text
        .parse()
        .map_err(|e| err(file, format!("not valid TOML: {e}")))?;
    for key in table.keys() {
        if !["document", "description", "fields"].contains(&key.as_str()) {
            return Err(err(
                file,
                format!("unknown key `{key}` (known: document, description, fields)"),
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
    let document = string("document")?;
    let description = string("description")?.unwrap_or_default();
    let Some(toml::Value::Table(fields)) = table.get("fields") else {
        return Err(err(
            file,
            "`[fields]` is required: one `name = value` (or `name = { value = …, aliases = [...] }`) per expected field",
        ));
    };
    if fields.is_empty() {
        return Err(err(file, "`[fields]` is empty: label at least one field"));
    }
    let mut out = Vec::new();
    for (name, v) in fields {
        let (value, aliases) = match v {
            toml::Value::Table(t) => {
                for k in t.keys() {
                    if k != "value" && k != "aliases" {
                        return Err(err(
                            file,
                            format!("fields.{name}.{k}: unknown key (known: value, aliases)"),
                        ));
                    }
                }
                let value = t
                    .get("value")
                    .ok_or_else(|| err(file, format!("fields.{name}.value is required")))?;
                let aliases = match t.get("aliases") {
                    None => Vec::new(),
                    Some(toml::Value::Array(a)) => a
                        .iter()
                        .map(|x| {
                            x.as_str().map(str::to_string).ok_or_else(|| {
                                err(file, format!("fields.{name}.aliases must list strings"))
                            })
                        })
                        .collect::<Result<_, _>>()?,
                    Some(_) => {
                        return Err(err(
                            file,
                            format!("fields.{name}.aliases must be an array of strings"),
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
                format!("fields.{name}: the value must be a string, number, boolean or date"),
            )
        })?;
        out.push(ExpectedField {
            name: name.clone(),
            aliases,
            value,
        });
    }
    Ok((document, description, out))
}

/// Loads every `*.labels.toml` in `dir` (sorted by name), keeping only the names in `only`
/// when it is not empty.
pub fn load_dir(dir: &Path, only: &[String]) -> Result<Vec<Sample>, LabelError> {
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
        let (document, description, fields) = parse_labels(&file, &text)?;
        let document_path = dir.join(document.unwrap_or_else(|| format!("{stem}.txt")));
        let bytes = std::fs::read(&document_path).map_err(|e| {
            err(
                &file,
                format!("document {}: cannot read: {e}", document_path.display()),
            )
        })?;
        samples.push(Sample {
            name: stem,
            description,
            document_path,
            text: crate::store::documents::text_from_bytes(&bytes),
            fields,
        });
    }
    for name in only {
        if !samples.iter().any(|s| &s.name == name) {
            return Err(err(
                dir,
                format!("--only: no sample `{name}` (no {name}.labels.toml here)"),
            ));
        }
    }
    if samples.is_empty() {
        return Err(err(dir, "no *.labels.toml files: nothing to evaluate"));
    }
    Ok(samples)
}

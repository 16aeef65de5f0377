//! A run's symbol table: value ↔ token, stable within the run, persisted so a resumed run
//! (another process) gives the model the same tokens it saw before the crash.

use super::detect::{Kind, detect};
use regex::Regex;
use serde_json::Value;
use sqlx::PgPool;
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use uuid::Uuid;

static TOKEN: LazyLock<Regex> = LazyLock::new(|| {
    // checked: a constant pattern, compiled by every test that redacts
    Regex::new(r"\b(EMAIL|PHONE|IBAN|CARD|ID|PERSON)_(\d{1,6})\b").expect("re")
});

/// Set between a token and a word character it would otherwise touch (`Jane Doe5` →
/// `PERSON_1⁠5`, `MaryJane Doe` → `Mary⁠PERSON_1`): glued, the token is no longer a word of its own
/// (`PERSON_15` is another token, `PERSON_1x` none) and would not come back. Rehydration removes
/// the one it finds beside a token. An invisible WORD JOINER, so the model reads the text as
/// written.
const JOINER: char = '\u{2060}';

/// A token as the redacted text carries it, with the joiners set beside it.
static GLUED_TOKEN: LazyLock<Regex> = LazyLock::new(|| {
    // checked: a constant pattern, compiled by every test that redacts
    Regex::new(r"\x{2060}?\b((?:EMAIL|PHONE|IBAN|CARD|ID|PERSON)_\d{1,6})\b\x{2060}?").expect("re")
});

/// What needs a [`JOINER`] beside a token: a word character (as `\b` sees it), or a joiner of the
/// text itself (which would otherwise be taken for one set here).
fn glues(c: Option<char>) -> bool {
    static WORD: LazyLock<Regex> = LazyLock::new(|| {
        // checked: a constant pattern, compiled by every test that redacts
        Regex::new(r"^\w$").expect("re")
    });
    c.is_some_and(|c| c == JOINER || WORD.is_match(c.encode_utf8(&mut [0; 4])))
}

#[derive(Default)]
struct Table {
    by_value: HashMap<String, String>,
    by_token: HashMap<String, String>,
    /// Known values, longest first: replaced everywhere, also where no rule would find them.
    ordered: Vec<String>,
    next: u32,
    /// Entries not yet written to `pii_tokens`.
    unsaved: Vec<(String, String)>,
}

/// The symbol table of one run (or of one human decision outside a run).
pub struct Vault {
    table: Mutex<Table>,
    extra_ids: Vec<Regex>,
    /// Where to persist: `(pool, org, run)`; `None` keeps it in memory (decisions, benches).
    store: Option<(PgPool, Uuid, Uuid)>,
}

impl Vault {
    /// The table. A panic while it was held cannot leave it half-changed (each change is one
    /// insert into each map), so a poisoned lock is taken as it is.
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// An in-memory table.
    pub fn in_memory(extra_ids: Vec<Regex>) -> Self {
        Self {
            table: Mutex::new(Table::default()),
            extra_ids,
            store: None,
        }
    }

    /// The table of `run_id`, loaded from `pii_tokens`.
    pub async fn for_run(
        pool: PgPool,
        org_id: Uuid,
        run_id: Uuid,
        extra_ids: Vec<Regex>,
    ) -> sqlx::Result<Self> {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT token, value FROM pii_tokens WHERE run_id = $1 AND org_id = $2 ORDER BY n",
        )
        .bind(run_id)
        .bind(org_id)
        .fetch_all(&pool)
        .await?;
        let mut t = Table::default();
        for (token, value) in rows {
            t.next += 1;
            t.insert(token, value);
        }
        Ok(Self {
            table: Mutex::new(t),
            extra_ids,
            store: Some((pool, org_id, run_id)),
        })
    }

    /// Writes new entries (one short statement, no transaction held).
    pub async fn save(&self) -> sqlx::Result<()> {
        let Some((pool, org, run)) = &self.store else {
            return Ok(());
        };
        let unsaved = std::mem::take(&mut self.table().unsaved);
        if unsaved.is_empty() {
            return Ok(());
        }
        let (tokens, values): (Vec<String>, Vec<String>) = unsaved.into_iter().unzip();
        let r = sqlx::query(
            "INSERT INTO pii_tokens (run_id, org_id, n, token, value)
             SELECT $1, $2, (regexp_match(t, '_(\\d+)$'))[1]::int, t, v
               FROM unnest($3::text[], $4::text[]) AS x(t, v)
             ON CONFLICT DO NOTHING",
        )
        .bind(run)
        .bind(org)
        .bind(&tokens)
        .bind(&values)
        .execute(pool)
        .await;
        if r.is_err() {
            // Keep them for the next attempt.
            let mut t = self.table();
            t.unsaved.extend(tokens.into_iter().zip(values));
        }
        r.map(|_| ())
    }

    /// Replaces personal data in `text` by tokens (new values get new tokens).
    pub fn redact(&self, text: &str) -> String {
        let findings = detect(text, &self.extra_ids);
        let mut t = self.table();
        for f in &findings {
            if let Some(value) = text.get(f.start..f.end) {
                t.token_for(value, f.kind);
            }
        }
        if t.ordered.is_empty() {
            return text.to_string();
        }
        t.replace_known(text)
    }

    /// Redacts every string of a JSON value (keys stay); the string value of a personal key
    /// (`customer_name`, `email`, …) is a token whatever the rules say.
    pub fn redact_json(&self, v: &Value) -> Value {
        map_strings(
            v,
            None,
            &|key, s| match key.and_then(super::detect::personal_key) {
                Some(kind)
                    if s.chars().count() >= 2 && !is_token(s) && !super::detect::placeholder(s) =>
                {
                    let mut t = self.table();
                    t.token_for(s, kind)
                }
                _ => self.redact(s),
            },
        )
    }

    /// Redacts every string of a JSON value by the rules and the known values only (no
    /// personal-key rule: for JSON Schemas and tool specs, whose keys are property names).
    pub fn redact_strings(&self, v: &Value) -> Value {
        map_strings(v, None, &|_, s| self.redact(s))
    }

    /// Puts the real values back for every known token in `text`.
    pub fn rehydrate(&self, text: &str) -> String {
        let t = self.table();
        GLUED_TOKEN
            .replace_all(text, |c: &regex::Captures| {
                c.get(1)
                    .and_then(|token| t.by_token.get(token.as_str()))
                    .cloned()
                    .unwrap_or_else(|| c[0].to_string())
            })
            .into_owned()
    }

    /// Rehydrates tool-call arguments: structurally when they are JSON (so values are escaped
    /// correctly), as text otherwise.
    pub fn rehydrate_arguments(&self, raw: &str) -> String {
        match serde_json::from_str::<Value>(raw) {
            Ok(v) => self.rehydrate_json(&v).to_string(),
            Err(_) => self.rehydrate(raw),
        }
    }

    /// Rehydrates every string of a JSON value.
    pub fn rehydrate_json(&self, v: &Value) -> Value {
        map_strings(v, None, &|_, s| self.rehydrate(s))
    }

    /// Tokens known so far.
    pub fn len(&self) -> usize {
        self.table().by_token.len()
    }

    /// No token yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `v` with every string `s` replaced by `f(key, s)`, `key` being the object key `s` is the value
/// of (`None` in an array or at the top); keys stay.
fn map_strings(v: &Value, key: Option<&str>, f: &impl Fn(Option<&str>, &str) -> String) -> Value {
    match v {
        Value::String(s) => Value::String(f(key, s)),
        Value::Array(a) => Value::Array(a.iter().map(|x| map_strings(x, None, f)).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| (k.clone(), map_strings(x, Some(k), f)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn is_token(s: &str) -> bool {
    TOKEN
        .find(s)
        .is_some_and(|m| m.start() == 0 && m.end() == s.len())
}

impl Table {
    fn insert(&mut self, token: String, value: String) {
        self.by_token.insert(token.clone(), value.clone());
        self.by_value.insert(value.clone(), token);
        let pos = self
            .ordered
            .partition_point(|v| v.len() > value.len() || (v.len() == value.len() && *v < value));
        self.ordered.insert(pos, value);
    }

    fn token_for(&mut self, value: &str, kind: Kind) -> String {
        if let Some(t) = self.by_value.get(value) {
            return t.clone();
        }
        self.next += 1;
        let token = format!("{}_{}", kind.prefix(), self.next);
        self.insert(token.clone(), value.to_string());
        self.unsaved.push((token.clone(), value.to_string()));
        token
    }

    /// Replaces every known value, longest first, in one left-to-right pass; a token that
    /// would touch a word character gets a [`JOINER`] on that side.
    fn replace_known(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        let mut before: Option<char> = None;
        'outer: loop {
            let mut chars = rest.chars();
            let Some(first) = chars.next() else { break };
            // Cheap filter: the first byte of some value must match.
            for v in &self.ordered {
                if v.as_bytes().first() == rest.as_bytes().first()
                    && let Some(after) = rest.strip_prefix(v.as_str())
                    && let Some(token) = self.by_value.get(v)
                {
                    if glues(before) {
                        out.push(JOINER);
                    }
                    out.push_str(token);
                    if glues(after.chars().next()) {
                        out.push(JOINER);
                    }
                    before = v.chars().next_back();
                    rest = after;
                    continue 'outer;
                }
            }
            out.push(first);
            before = Some(first);
            rest = chars.as_str();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_value_same_token_and_round_trip() {
        let v = Vault::in_memory(Vec::new());
        let a = v.redact("Email: jane@example.com, again jane@example.com");
        assert_eq!(a, "Email: EMAIL_1, again EMAIL_1");
        let b = v.redact("write to jane@example.com or bob@example.org");
        assert_eq!(b, "write to EMAIL_1 or EMAIL_2");
        assert_eq!(
            v.rehydrate("EMAIL_2 and EMAIL_1 and EMAIL_9"),
            "bob@example.org and jane@example.com and EMAIL_9"
        );
    }

    /// The round trip the `pii_vault` fuzz target checks: a token that touched a word character
    /// was no word of its own, so it did not come back (`Jane Doe5` → `PERSON_15`, another person's token in a
    /// run with 15 of them; `MaryJane Doe` → `MaryPERSON_1`, never rehydrated).
    #[test]
    fn a_value_glued_to_a_word_still_comes_back() {
        let v = Vault::in_memory(Vec::new());
        for text in [
            "Name: Jane Doe5",
            "Name: Jane Doe_x and MaryJane Doe",
            "Patient ID: P-1234_x",
            "jane@example.com\u{2060}x, Jane Doe\u{2060}",
            "Name: Jane Doe\u{301}",
        ] {
            let r = v.redact(text);
            assert!(!r.contains("Jane Doe"), "{r:?}");
            assert_eq!(v.rehydrate(&r), text, "via {r:?}");
        }
        // The model writes the token as it saw it; a token of its own is rehydrated as before.
        assert_eq!(
            v.rehydrate("PERSON_1 and Mary\u{2060}PERSON_1"),
            "Jane Doe and MaryJane Doe"
        );
    }

    #[test]
    fn personal_json_keys_are_tokens() {
        let v = Vault::in_memory(Vec::new());
        let out = v.redact_json(&serde_json::json!({"customer_name": "Blue Fox", "total": "12"}));
        assert_eq!(out["customer_name"], "PERSON_1");
        assert_eq!(out["total"], "12");
        assert_eq!(v.rehydrate("PERSON_1"), "Blue Fox");
    }

    #[test]
    fn a_schema_field_map_keeps_its_type_names() {
        // A model's `create_schema` fields: `"string"` under a personal key is a type name;
        // made a token, every "string" of every later request would become that token.
        let v = Vault::in_memory(Vec::new());
        let fields =
            serde_json::json!({"patient_id": "string", "email": "string", "total": "number"});
        assert_eq!(v.redact_json(&fields), fields);
        let text = r#"{"name":"create_schema","arguments":{"fields":{"patient_id":"string","sample_id":"string"}}}"#;
        assert_eq!(v.redact(text), text);
        assert!(v.is_empty());
    }

    #[test]
    fn labelled_name_is_replaced_where_unlabelled_too() {
        let v = Vault::in_memory(Vec::new());
        let r = v.redact("Patient: Maria Schmidt\nResult normal. Maria Schmidt was informed.");
        assert!(!r.contains("Maria"), "{r}");
    }

    #[test]
    fn arguments_rehydrate_with_json_escaping() {
        let v = Vault::in_memory(Vec::new());
        v.redact("Name: Dan O'Neil");
        let args = r#"{"fields":{"customer":"PERSON_1"}}"#;
        let back = v.rehydrate_arguments(args);
        let parsed: Value = serde_json::from_str(&back).expect("still JSON");
        assert_eq!(parsed["fields"]["customer"], v.rehydrate("PERSON_1"));
    }
}

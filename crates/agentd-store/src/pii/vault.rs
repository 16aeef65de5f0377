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
    /// An automaton over `ordered` (leftmost-longest), built when first needed after a change:
    /// replacing is one pass over the text whatever the number of values (review L10; it was
    /// text × values).
    matcher: Option<aho_corasick::AhoCorasick>,
    next: u32,
    /// Entries not yet written to `pii_tokens`.
    unsaved: Vec<(String, String)>,
    /// Tokens found to differ from the run's stored table (see [`Vault::save`]): once set, every
    /// save fails, so a retry in this process cannot send or rehydrate with this table.
    diverged: Vec<String>,
}

/// Why [`Vault::save`] failed.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    #[error("{0}")]
    Db(#[from] sqlx::Error),
    /// Tokens the run's stored table holds for other values (review S3).
    #[error(
        "the run's redaction table was changed by another driver of this run ({} token(s) differ); this attempt stops and the next resumes from the stored table",
        .0.len()
    )]
    Diverged(Vec<String>),
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

    /// Writes new entries (one short statement, no transaction held). An entry that conflicts
    /// with what the run already stored (another driver of the run gave that token to another
    /// value, or that value another token) is [`SaveError::Diverged`]: nothing redacted with
    /// this table may reach the provider, and the attempt should end so the next one resumes
    /// from the stored table.
    pub async fn save(&self) -> Result<(), SaveError> {
        let Some((pool, org, run)) = &self.store else {
            return Ok(());
        };
        let unsaved = {
            let mut t = self.table();
            if !t.diverged.is_empty() {
                return Err(SaveError::Diverged(t.diverged.clone()));
            }
            std::mem::take(&mut t.unsaved)
        };
        if unsaved.is_empty() {
            return Ok(());
        }
        let (tokens, values): (Vec<String>, Vec<String>) = unsaved.into_iter().unzip();
        // The entries not stored, and not already stored as they are: another driver of this
        // run (review S3: a lease lost under clock skew) gave the token to another value, or the
        // value another token. This table no longer matches the run's.
        let r: sqlx::Result<Vec<String>> = sqlx::query_scalar(
            "WITH ins AS (
                INSERT INTO pii_tokens (run_id, org_id, n, token, value)
                SELECT $1, $2, (regexp_match(t, '_(\\d+)$'))[1]::int, t, v
                  FROM unnest($3::text[], $4::text[]) AS x(t, v)
                ON CONFLICT DO NOTHING
                RETURNING token)
             SELECT x.t FROM unnest($3::text[], $4::text[]) AS x(t, v)
              WHERE x.t NOT IN (SELECT token FROM ins)
                AND NOT EXISTS (SELECT 1 FROM pii_tokens p
                                 WHERE p.run_id = $1 AND p.token = x.t AND p.value = x.v)",
        )
        .bind(run)
        .bind(org)
        .bind(&tokens)
        .bind(&values)
        .fetch_all(pool)
        .await;
        match r {
            Ok(diverged) if diverged.is_empty() => Ok(()),
            Ok(diverged) => {
                self.table().diverged = diverged.clone();
                Err(SaveError::Diverged(diverged))
            }
            Err(e) => {
                // Keep them for the next attempt.
                let mut t = self.table();
                t.unsaved.extend(tokens.into_iter().zip(values));
                Err(SaveError::Db(e))
            }
        }
    }

    /// Replaces personal data in `text` by tokens (new values get new tokens).
    pub fn redact(&self, text: &str) -> String {
        let findings = detect(text, &self.extra_ids);
        let mut t = self.table();
        for f in &findings {
            // A type name is never personal data, whatever a rule took it for: as a value of
            // the table it would be replaced in every JSON Schema that follows.
            if let Some(value) = text
                .get(f.start..f.end)
                .filter(|v| !super::detect::placeholder(v))
            {
                t.token_for(value, f.kind);
            }
        }
        if t.ordered.is_empty() {
            return text.to_string();
        }
        t.replace_known(text)
    }

    /// Makes every token-shaped string already in `text` (a part number `ID_5`, a hostile
    /// "Beneficiary: PERSON_1") a value of the table with a token of its own, so the redaction
    /// that follows sends it as that token and rehydration gives the literal back. Sent as it
    /// was, the model's echo of it was rehydrated to the value the run's token of that name
    /// stands for: another person's name or id in an extraction (review L1). For what leaves
    /// for the provider only: text that is already redacted (the audit's) keeps its tokens.
    pub fn escape_token_literals(&self, text: &str) {
        let mut found = TOKEN.find_iter(text).peekable();
        if found.peek().is_none() {
            return;
        }
        let mut t = self.table();
        for m in found {
            t.token_for(m.as_str(), Kind::Id);
        }
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
        self.matcher = None;
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

    /// Replaces every known value in one left-to-right pass (at each place the longest value
    /// that starts there); a token that would touch a word character gets a [`JOINER`] on that
    /// side.
    fn replace_known(&mut self, text: &str) -> String {
        if self.matcher.is_none() {
            self.matcher = aho_corasick::AhoCorasick::builder()
                .match_kind(aho_corasick::MatchKind::LeftmostLongest)
                .build(&self.ordered)
                .ok();
        }
        let Some(matcher) = &self.matcher else {
            // Only a value set past the automaton's size limits: the pass of before.
            return self.replace_known_slowly(text);
        };
        let mut out = String::with_capacity(text.len());
        let mut last = 0;
        // Where a joiner set after a token ends (the next token needs no second one there).
        let mut joined_at = None;
        for m in matcher.find_iter(text) {
            // A match of a UTF-8 value in UTF-8 text starts and ends on character boundaries.
            let (Some(head), Some(value), Some(tail)) = (
                text.get(last..m.start()),
                text.get(m.start()..m.end()),
                text.get(m.end()..),
            ) else {
                continue;
            };
            let Some(token) = self.by_value.get(value) else {
                continue;
            };
            out.push_str(head);
            // What the token would touch is what is written before it: another token ends in a
            // digit, a word character (found by the pii_vault fuzz target: `: ` and a phone
            // number side by side became `ID_4PHONE_1`, which came back as neither).
            if glues(out.chars().next_back()) && joined_at != Some(out.len()) {
                out.push(JOINER);
            }
            out.push_str(token);
            if glues(tail.chars().next()) {
                out.push(JOINER);
                joined_at = Some(out.len());
            }
            last = m.end();
        }
        out.push_str(text.get(last..).unwrap_or_default());
        out
    }

    /// [`Self::replace_known`] without the automaton: at each character, the values longest
    /// first (O(text × values)).
    fn replace_known_slowly(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        let mut before: Option<char> = None;
        let mut joined = false;
        'outer: loop {
            let mut chars = rest.chars();
            let Some(first) = chars.next() else { break };
            // Cheap filter: the first byte of some value must match.
            for v in &self.ordered {
                if v.as_bytes().first() == rest.as_bytes().first()
                    && let Some(after) = rest.strip_prefix(v.as_str())
                    && let Some(token) = self.by_value.get(v)
                {
                    if glues(before) && !joined {
                        out.push(JOINER);
                    }
                    out.push_str(token);
                    joined = glues(after.chars().next());
                    if joined {
                        out.push(JOINER);
                    }
                    before = token.chars().next_back();
                    rest = after;
                    continue 'outer;
                }
            }
            out.push(first);
            before = Some(first);
            joined = false;
            rest = chars.as_str();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The automaton's pass gives what the pass over every value at every character gives:
    /// overlapping values, prefixes of each other, values glued to words, non-ASCII text.
    #[test]
    fn the_automaton_replaces_as_the_value_by_value_pass_does() {
        let mut t = Table::default();
        let values = [
            "Jane",
            "Jane Doe",
            "Doe",
            "ane D",
            "Zoë Ødegård",
            "Ødegård",
            "12345",
            "2345",
            "é",
            "jane@example.com",
            "example",
        ];
        for (i, v) in values.iter().enumerate() {
            t.insert(format!("PERSON_{}", i + 1), v.to_string());
        }
        let texts = [
            "Jane Doe met Jane and Doe; Jane Doe5 and MaryJane Doe.",
            "Zoë Ødegård wrote to jane@example.com (example: 12345, 2345, 123456).",
            "éé é xé Ødegårdx ane Dane D",
            "",
            "nothing known here",
        ];
        for text in texts {
            assert_eq!(
                t.replace_known(text),
                t.replace_known_slowly(text),
                "{text:?}"
            );
        }
    }

    /// Two values side by side become two tokens kept apart by a joiner, and both come back
    /// (found by the pii_vault fuzz target).
    #[test]
    fn adjacent_values_stay_two_tokens_that_come_back() {
        let mut t = Table::default();
        t.insert("ID_4".into(), ": ".into());
        t.insert("PHONE_1".into(), "+49 30 1234567".into());
        let text = "Tel: +49 30 1234567";
        let out = t.replace_known(text);
        assert_eq!(out, "Tel\u{2060}ID_4\u{2060}PHONE_1");
        assert_eq!(out, t.replace_known_slowly(text));
        let v = Vault::in_memory(Vec::new());
        {
            let mut vt = v.table();
            vt.insert("ID_4".into(), ": ".into());
            vt.insert("PHONE_1".into(), "+49 30 1234567".into());
        }
        assert_eq!(v.rehydrate(&out), text);
    }

    /// Review L10: thousands of known values cost one pass over the text, not one per value.
    #[test]
    fn many_known_values_are_replaced_in_one_pass() {
        let mut t = Table::default();
        for i in 0..5_000 {
            t.insert(format!("EMAIL_{}", i + 1), format!("person{i}@example.com"));
        }
        let text: String = (0..2_000)
            .map(|i| format!("Write to person{}@example.com today. ", i * 2))
            .collect();
        let out = t.replace_known(&text);
        assert!(!out.contains("@example.com"), "every address replaced");
        assert_eq!(out.matches("EMAIL_").count(), 2_000);
        assert!(out.starts_with("Write to EMAIL_1 today. Write to EMAIL_3 today."));
    }

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

    /// Review L1: a token-shaped literal leaves as a token of its own and comes back as itself,
    /// never as the run's value of the token it looks like.
    #[test]
    fn a_token_shaped_literal_comes_back_as_itself() {
        let v = Vault::in_memory(Vec::new());
        assert_eq!(v.redact("Email: jane@example.com"), "Email: EMAIL_1");
        let text = "Beneficiary: EMAIL_1 (part ID_7, ID_77), paid by jane@example.com";
        v.escape_token_literals(text);
        let out = v.redact(text);
        assert!(
            !out.contains("EMAIL_1 "),
            "the literal is not sent as it is: {out}"
        );
        assert!(!out.contains("jane@"), "{out}");
        assert_eq!(v.rehydrate(&out), text);
        // The model echoes what it saw for the literal: it comes back as the literal.
        let seen = out.split_whitespace().nth(1).unwrap_or_default();
        assert_eq!(v.rehydrate(seen), "EMAIL_1");
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
    fn the_candidates_lines_keep_their_type_names() {
        // The analysis' brief (`name: type = value`) in a first message: under a personal
        // label the type is not the value. Learnt as an id, "string" and "date" were replaced
        // in every later request, the extraction's JSON Schema too, and a server refused it
        // (`unrecognized type ID_5`) on every attempt of a lab report's run.
        let v = Vault::in_memory(Vec::new());
        let brief = "<candidates kind=\"lab_report\">\n\
                     nhs_number: string = 943 476 5919 (label: NHS No)\n\
                     dob: date = 1961-03-14 (label: DOB)\n\
                     mrn: string = RPS-0088213 (label: MRN)\n</candidates>";
        let out = v.redact(brief);
        assert!(out.contains("nhs_number: string = "), "{out}");
        assert!(out.contains("dob: date = "), "{out}");
        assert!(
            !out.contains("RPS-0088213"),
            "the value is still redacted: {out}"
        );
        assert!(
            !out.contains("1961-03-14"),
            "a labelled date of birth after its type name is redacted: {out}"
        );
        assert!(out.starts_with("<candidates kind="), "{out}");
        assert_eq!(
            v.redact_strings(&serde_json::json!({"type": ["string", "null"], "format": "date"})),
            serde_json::json!({"type": ["string", "null"], "format": "date"})
        );
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

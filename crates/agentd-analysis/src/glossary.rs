//! Field names in one canonical language (English) for labels the lexicon does not list
//! (issue 48, item 3): a word-level glossary per language (`data/glossary.toml`) turns a
//! label's words into English ones, in English order, and the English label is then looked
//! up in the lexicon like any other (`Gutschriftsbetrag` → `gutschrift|s|betrag` → `credit
//! amount` → the lexicon's `total`; `Grund der Gutschrift` → `credit_reason`).
//!
//! - **German and Dutch compounds** are split into glossary words, with the linking letters
//!   between them (`Gutschrift|s|betrag`, `pakbon|nummer`, `Zähler|stand`); the parts keep
//!   their order (a compound's head is last, as in English). A genitive or "of" word puts what
//!   follows it first (`Grund der Gutschrift` → `credit reason`, `aantal van de colli`).
//! - **French, Spanish, Italian and Portuguese** write the head first: the content words are
//!   read backwards (`titulaire du contrat` → `contract holder`, `peso lordo` → `gross weight`),
//!   but for the adjectives written before their noun, which stay first (`nouveau solde
//!   créditeur` → `new credit balance`); articles and "of" words (`de`, `du`, `della`) drop out.
//!   A conjunction splits the label in parts translated each (`taxes et contributions` →
//!   `taxes_and_contributions`).
//! - **Never a half-translated mix**: a label any of whose words the glossary does not know,
//!   or in no language the document is read as, keeps its own name (the caller's), and so does
//!   an English label.
//!
//! The document's language ([`language_of`]) is the language whose words — the lexicon's
//! labels and the glossary's entries, each word counted for one language only — the text holds
//! most of; an English document, or one in no clear language, translates nothing.

use crate::lexicon::{self, Class, LANGUAGES, snake};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::LazyLock;

const GLOSSARY_TOML: &str = include_str!("../data/glossary.toml");

/// Words of a compound at most (`Sozial|versicherungs|beitrag` is three).
const MAX_PARTS: usize = 4;
/// A compound's part has at least this many letters (`amt`, `tag`).
const MIN_PART: usize = 3;
/// Words of a label translated at most.
const MAX_WORDS: usize = 8;

/// How a language orders a label's words against English.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Order {
    /// Modifiers before the head, as in English (German, Dutch).
    HeadLast,
    /// The head first, its modifiers after it (the Romance languages).
    HeadFirst,
}

/// One language's part of the glossary.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Language {
    pub order: Order,
    /// Letters that may join two parts of a compound (`s` in `Gutschrift|s|betrag`).
    #[serde(default)]
    pub links: Vec<String>,
    /// Words meaning "of" (and "for"): what follows names what precedes (`Grund der
    /// Gutschrift`); dropped.
    #[serde(default)]
    pub of: Vec<String>,
    /// Articles and other words dropped.
    #[serde(default)]
    pub skip: Vec<String>,
    /// Words meaning "and": the label's parts on either side are translated each.
    #[serde(default)]
    pub and: Vec<String>,
    /// Adjectives written before their noun in a head-first language (`nouveau`, `total`).
    #[serde(default)]
    pub before: Vec<String>,
    /// Words of a head-last language written before what they are of (`Anzahl Pakete`,
    /// `aantal colli`, `Datum betaling`): what follows comes first (`package_count`).
    #[serde(default)]
    pub heads: Vec<String>,
    /// Each word (folded) and its English (snake_case, one or more words).
    pub words: BTreeMap<String, String>,
}

/// The glossary: its languages, and every word with the languages it is a word of.
#[derive(Debug)]
pub struct Glossary {
    pub languages: BTreeMap<String, Language>,
    /// Per language the words that tell it (lexicon labels' and glossary words), each word of
    /// one language only.
    telling: HashMap<String, &'static str>,
}

/// What is wrong with `data/glossary.toml`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("data/glossary.toml: {0}")]
pub struct GlossaryError(pub String);

impl Glossary {
    /// The glossary of a data file's text; the first problem found: no TOML of the expected
    /// shape, a language the lexicon does not have (or English), a word or an English name not
    /// written folded.
    pub fn parse(toml_text: &str) -> Result<Self, GlossaryError> {
        let languages: BTreeMap<String, Language> =
            toml::from_str(toml_text).map_err(|e| GlossaryError(e.to_string()))?;
        for (code, l) in &languages {
            if code == "en" || !LANGUAGES.contains(&code.as_str()) {
                return Err(GlossaryError(format!(
                    "[{code}]: not a language to translate from ({})",
                    LANGUAGES[1..].join(", ")
                )));
            }
            let lists = [&l.links, &l.of, &l.skip, &l.and, &l.before, &l.heads];
            let words = l.words.iter().flat_map(|(k, v)| [k, v]);
            for w in lists.into_iter().flatten().chain(words) {
                if snake(w, 64) != *w || w.is_empty() {
                    return Err(GlossaryError(format!(
                        "[{code}] \"{w}\" is not written folded (write \"{}\")",
                        snake(w, 64)
                    )));
                }
            }
        }
        Ok(Glossary {
            telling: telling(&languages),
            languages,
        })
    }
}

/// Each word that tells one language: the words of the lexicon's labels of that language and
/// the glossary's words, but for words two languages share (`total`, `data`).
fn telling(languages: &BTreeMap<String, Language>) -> HashMap<String, &'static str> {
    let mut of: HashMap<String, HashSet<&'static str>> = HashMap::new();
    let lex = lexicon::lexicon();
    for &code in LANGUAGES {
        let mut words: Vec<&str> = lex
            .fields
            .iter()
            .flat_map(|f| &f.labels)
            .chain(lex.columns.iter().flat_map(|c| &c.labels))
            .filter(|l| l.language == code)
            .flat_map(|l| l.text.split('_'))
            .collect();
        if let Some(l) = languages.get(code) {
            words.extend(l.words.keys().map(String::as_str));
        }
        for w in words.into_iter().filter(|w| w.chars().count() >= 3) {
            of.entry(w.to_string()).or_default().insert(code);
        }
    }
    of.into_iter()
        .filter_map(|(w, ls)| match ls.len() {
            1 => ls.into_iter().next().map(|l| (w, l)),
            _ => None,
        })
        .collect()
}

/// The embedded glossary (checked by this crate's tests; a broken one translates nothing).
pub fn glossary() -> &'static Glossary {
    static GLOSSARY: LazyLock<Glossary> = LazyLock::new(|| {
        Glossary::parse(GLOSSARY_TOML).unwrap_or_else(|e| {
            eprintln!("agentd-analysis: the embedded glossary is broken ({e}); running without it");
            Glossary {
                languages: BTreeMap::new(),
                telling: HashMap::new(),
            }
        })
    });
    &GLOSSARY
}

/// The language a text is written in (see the module docs): the one most of its telling words
/// are of, when at least three are and it has more than any other; `None` else.
pub fn language_of(text: &str) -> Option<&'static str> {
    let g = glossary();
    let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
    for w in snake(text, usize::MAX).split('_') {
        if let Some(&l) = g.telling.get(w) {
            *counts.entry(l).or_default() += 1;
        }
    }
    let mut ranked: Vec<(&'static str, usize)> = counts.into_iter().collect();
    ranked.sort_by_key(|r| std::cmp::Reverse(r.1));
    match ranked.as_slice() {
        [(l, n), rest @ ..] if *n >= 3 && rest.first().is_none_or(|(_, m)| m < n) => Some(l),
        _ => None,
    }
}

/// A label (snake_case, folded) in English words, in English order, when every word of it is
/// the glossary's for `language`; `None` for English, a language the glossary lacks, or a word
/// it does not know (never a half-translated name).
pub fn english(snake_label: &str, language: &str) -> Option<String> {
    let l = glossary().languages.get(language)?;
    let words: Vec<&str> = snake_label.split('_').filter(|w| !w.is_empty()).collect();
    if words.is_empty() || words.len() > MAX_WORDS {
        return None;
    }
    let parts: Vec<String> = words
        .split(|w| l.and.iter().any(|a| a == w))
        .map(|part| phrase(part, l))
        .collect::<Option<_>>()?;
    if parts.iter().any(String::is_empty) {
        return None;
    }
    Some(parts.join("_and_"))
}

/// One phrase (no "and" in it) in English order.
fn phrase(words: &[&str], l: &Language) -> Option<String> {
    // Each run of words between "of" words, translated; a head-last language puts the runs
    // after an "of" first (`Grund der Gutschrift` → credit reason).
    let mut runs: Vec<Vec<String>> = vec![Vec::new()];
    for w in words {
        if l.of.iter().any(|o| o == w) {
            runs.push(Vec::new());
        } else if l.skip.iter().any(|s| s == w) {
            continue;
        } else if l.order == Order::HeadLast && l.heads.iter().any(|c| c == w) {
            runs.push(vec![word(w, l)?]);
            runs.push(Vec::new());
        } else {
            let english = word(w, l)?;
            runs.last_mut()?.push(english);
        }
    }
    let runs: Vec<Vec<String>> = runs.into_iter().filter(|r| !r.is_empty()).collect();
    let ordered: Vec<String> = match l.order {
        Order::HeadLast => runs.into_iter().rev().flatten().collect(),
        Order::HeadFirst => {
            // Backwards, but for the adjectives written before their noun, which stay first.
            let all: Vec<String> = runs.into_iter().flatten().collect();
            let english_before: Vec<&String> = l
                .before
                .iter()
                .filter_map(|b| l.words.get(b.as_str()))
                .collect();
            let lead = all
                .iter()
                .take_while(|w| english_before.contains(w))
                .count();
            let mut out: Vec<String> = all[..lead].to_vec();
            out.extend(all[lead..].iter().rev().cloned());
            out
        }
    };
    Some(ordered.join("_"))
}

/// A word in English: the glossary's word, else (a head-last language) a compound of its
/// words, joined by its linking letters.
fn word(w: &str, l: &Language) -> Option<String> {
    if let Some(e) = l.words.get(w) {
        return Some(e.clone());
    }
    if l.order == Order::HeadLast {
        return compound(w, l, MAX_PARTS).map(|parts| parts.join("_"));
    }
    None
}

/// The glossary words a compound is made of (fewest parts first), each at least
/// [`MIN_PART`] letters, a linking letter allowed after each but the last.
fn compound(w: &str, l: &Language, parts_left: usize) -> Option<Vec<String>> {
    if parts_left == 0 {
        return None;
    }
    if let Some(e) = l.words.get(w) {
        return Some(vec![e.clone()]);
    }
    let chars: Vec<char> = w.chars().collect();
    let mut best: Option<Vec<String>> = None;
    // The longest first part first: `Gesamtbetrag` is `gesamt|betrag`, not `ges|amt|…`.
    for cut in (MIN_PART..chars.len().saturating_sub(MIN_PART - 1)).rev() {
        let head: String = chars[..cut].iter().collect();
        let Some(e) = l.words.get(&head) else {
            continue;
        };
        let tail: String = chars[cut..].iter().collect();
        let mut tails = vec![tail.clone()];
        for link in &l.links {
            if let Some(t) = tail.strip_prefix(link.as_str())
                && t.chars().count() >= MIN_PART
            {
                tails.push(t.to_string());
            }
        }
        for t in tails {
            if let Some(rest) = compound(&t, l, parts_left - 1) {
                let mut parts = vec![e.clone()];
                parts.extend(rest);
                if best.as_ref().is_none_or(|b| parts.len() < b.len()) {
                    best = Some(parts);
                }
            }
        }
    }
    best
}

/// A label's name in the canonical language.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Canonical {
    /// A field the lexicon knows by the English words (`credit_amount` → `total`).
    Known(&'static str, Class),
    /// English words the lexicon does not know (`credit_reason`).
    English(String),
}

impl Canonical {
    pub fn name(&self) -> &str {
        match self {
            Canonical::Known(n, _) => n,
            Canonical::English(n) => n,
        }
    }
}

/// The canonical name of a label the lexicon does not list, on a document in `language`: its
/// English words ([`english`]) as the lexicon names them, with that field's class, or the
/// English words themselves when the lexicon does not know them.
pub fn canonical(snake_label: &str, language: Option<&str>) -> Option<Canonical> {
    let english = english(snake_label, language?)?;
    Some(match lexicon::field(&english) {
        Some((name, class)) => Canonical::Known(name, class),
        None => Canonical::English(english),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(label: &str, language: &str) -> Option<String> {
        canonical(&snake(label, 64), Some(language)).map(|c| c.name().to_string())
    }

    #[test]
    fn the_glossary_parses_and_a_broken_one_is_refused_naming_the_problem() {
        let g = Glossary::parse(GLOSSARY_TOML).expect("the embedded glossary");
        for code in ["de", "fr", "es", "it", "nl", "pt"] {
            assert!(g.languages.contains_key(code), "{code}");
        }
        let e = Glossary::parse("[en]\norder = \"head_last\"\nwords = {}\n").unwrap_err();
        assert!(e.to_string().contains("[en]: not a language"), "{e}");
        let e = Glossary::parse("[de]\norder = \"head_last\"\nwords = { Betrag = \"amount\" }\n")
            .unwrap_err();
        assert!(e.to_string().contains("write \"betrag\""), "{e}");
    }

    #[test]
    fn german_compounds_split_and_a_genitive_goes_first() {
        assert_eq!(
            english("gutschriftsbetrag", "de").as_deref(),
            Some("credit_amount")
        );
        assert_eq!(
            english("grund_der_gutschrift", "de").as_deref(),
            Some("credit_reason")
        );
        assert_eq!(
            english("zahlerstand_neu", "de").as_deref(),
            Some("meter_reading_new")
        );
        // The lexicon names the English words: a credit's amount is the credit note's total.
        assert_eq!(name("Gutschriftsbetrag", "de").as_deref(), Some("total"));
    }

    #[test]
    fn dutch_compounds_split() {
        assert_eq!(
            name("Pakbonnummer", "nl").as_deref(),
            Some("delivery_note_number")
        );
        assert_eq!(name("Aantal colli", "nl").as_deref(), Some("package_count"));
    }

    #[test]
    fn romance_labels_read_head_first() {
        assert_eq!(
            name("Titulaire du contrat", "fr").as_deref(),
            Some("contract_holder")
        );
        assert_eq!(
            name("Nouveau solde créditeur", "fr").as_deref(),
            Some("new_credit_balance")
        );
        assert_eq!(
            name("Taxes et contributions", "fr").as_deref(),
            Some("taxes_and_contributions")
        );
        assert_eq!(
            name("Dirección de suministro", "es").as_deref(),
            Some("supply_address")
        );
        assert_eq!(name("Peso lordo", "it").as_deref(), Some("gross_weight"));
        assert_eq!(
            name("Luogo di destinazione", "it").as_deref(),
            Some("destination_place")
        );
        // "Total" of something is that thing's total: a total the lexicon knows.
        assert_eq!(
            name("Total descontos", "pt").as_deref(),
            Some("discounts_total")
        );
        assert_eq!(name("Total pedido", "es").as_deref(), Some("total"));
        assert_eq!(name("Poids total", "fr").as_deref(), Some("total_weight"));
    }

    #[test]
    fn a_label_with_a_word_the_glossary_lacks_is_not_translated() {
        // `Marktplatz Rheinfelden` is a place: no word of it is a field's.
        assert_eq!(name("Marktplatz Rheinfelden", "de"), None);
        // Half known (`grund` is, `xyzzy` is not): never a mix.
        assert_eq!(name("Grund der Xyzzy", "de"), None);
        // English is never translated, nor a language the document is not in.
        assert_eq!(canonical("credit_reason", Some("en")), None);
        assert_eq!(canonical("gutschriftsbetrag", None), None);
    }

    #[test]
    fn a_documents_language_is_the_one_its_words_tell() {
        let de = "Gutschrift\nGutschriftsnummer: GS-1\nDatum: 06.11.2026\nGrund der Gutschrift: \
                  Rücknahme\nGutschriftsbetrag: 760,17 €\nKundennummer: 4711\n";
        assert_eq!(language_of(de), Some("de"));
        let fr = "AVOIR\nNuméro d'avoir : AV-1\nDate de facture : 06/11/2026\nMontant total \
                  TTC : 760,17 €\nTitulaire du contrat : M. Durand\n";
        assert_eq!(language_of(fr), Some("fr"));
        let en = "Credit note\nCredit note number: CN-1\nInvoice date: 06/11/2026\nTotal: 760.17\n\
                  Customer number: 4711\n";
        assert_eq!(language_of(en), Some("en"));
        assert_eq!(language_of("12.50\n"), None);
    }
}

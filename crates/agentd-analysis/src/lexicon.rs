//! Labels documents use for the same field in English, German, French, Spanish, Italian, Dutch
//! and Portuguese, mapped to one English snake_case name (`Rechnungsnummer`, `N° de facture`,
//! `Número de factura` → `invoice_number`), with what kind of value the field holds. Labels
//! are compared in their snake_case form with accents folded (`Numéro` → `numero`); a label
//! not listed is named by [`crate::glossary`] or keeps its own snake_case name. The lists are data (`data/fields.toml`,
//! `data/columns.toml`, each label with its language); this module reads them and looks up.

use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;

/// `Invoice Number` → `invoice_number`: lowercase ASCII letters and digits, each run of other
/// characters one `_`, none at either end; at most `max` characters. Accented letters lose their
/// accent (`Numéro de facture` → `numero_de_facture`, `Straße` → `strasse`) rather than becoming
/// a `_`.
pub fn snake(name: &str, max: usize) -> String {
    use unicode_normalization::UnicodeNormalization;
    let mut out = String::new();
    for c in name.nfkd() {
        if unicode_normalization::char::is_combining_mark(c) {
            continue;
        }
        let folded = match c {
            'ß' => "ss",
            'æ' | 'Æ' => "ae",
            'œ' | 'Œ' => "oe",
            'ø' | 'Ø' => "o",
            'ł' | 'Ł' => "l",
            'đ' | 'Đ' => "d",
            _ => "",
        };
        if !folded.is_empty() {
            out.push_str(folded);
        } else if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    out.trim_matches('_').chars().take(max).collect()
}

/// What a field holds, as far as its label tells (`class` in `data/fields.toml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    /// A number, reference or code: kept as written, a string, even when all digits.
    Identifier,
    Date,
    /// Money.
    Amount,
    /// A count or measurement.
    Quantity,
    Percent,
    /// A person or an organisation.
    Party,
    Text,
}

/// One language the lexicon's labels are tagged with (the keys of a field's table in
/// `data/fields.toml`).
pub const LANGUAGES: &[&str] = &["en", "de", "fr", "es", "it", "nl", "pt"];

/// The word lists, as data: `data/fields.toml` (each field's class and its labels per
/// language) and `data/columns.toml` (table headers per canonical column), embedded at build
/// time and read once per process.
const FIELDS_TOML: &str = include_str!("../data/fields.toml");
const COLUMNS_TOML: &str = include_str!("../data/columns.toml");

/// A label of a field or column: as written in the data file (folded) and its language.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    pub text: String,
    pub language: String,
}

/// A field the lexicon knows.
#[derive(Debug, Clone)]
pub struct Field {
    pub name: String,
    pub class: Class,
    pub labels: Vec<Label>,
}

/// A canonical table column.
#[derive(Debug, Clone)]
pub struct Column {
    pub name: String,
    pub labels: Vec<Label>,
}

/// The fields and columns with their lookups by label and by name.
#[derive(Debug)]
pub struct Lexicon {
    pub fields: Vec<Field>,
    pub columns: Vec<Column>,
    field_by_label: HashMap<String, usize>,
    field_by_name: HashMap<String, usize>,
    column_by_label: HashMap<String, usize>,
}

/// What is wrong with a data file: `file: [table] key: problem`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {problem}")]
pub struct DataError {
    pub file: &'static str,
    pub problem: String,
}

#[derive(Deserialize)]
struct FieldEntry {
    class: Class,
    #[serde(flatten)]
    labels: BTreeMap<String, Vec<String>>,
}

impl Lexicon {
    fn empty() -> Self {
        Lexicon {
            fields: Vec::new(),
            columns: Vec::new(),
            field_by_label: HashMap::new(),
            field_by_name: HashMap::new(),
            column_by_label: HashMap::new(),
        }
    }

    /// The lexicon of the two data files' texts; the first problem found: a file that is no
    /// TOML of the expected shape, a language not in [`LANGUAGES`], a label not folded, a label
    /// listed twice (under one field or two).
    pub fn parse(fields_toml: &str, columns_toml: &str) -> Result<Self, DataError> {
        const F: &str = "data/fields.toml";
        const C: &str = "data/columns.toml";
        let err = |file: &'static str, problem: String| DataError { file, problem };
        let fields: toml::Table = toml::from_str(fields_toml).map_err(|e| err(F, e.to_string()))?;
        let columns: toml::Table =
            toml::from_str(columns_toml).map_err(|e| err(C, e.to_string()))?;
        let mut lex = Lexicon::empty();
        for (name, value) in fields {
            let entry: FieldEntry = value
                .try_into()
                .map_err(|e: toml::de::Error| err(F, format!("[{name}]: {}", e.message())))?;
            let labels = labels_of(F, &name, entry.labels)?;
            let i = lex.fields.len();
            let names: Vec<&str> = lex.fields.iter().map(|f| f.name.as_str()).collect();
            index(
                &mut lex.field_by_label,
                &labels,
                i,
                &names,
                &name,
                "a label",
            )
            .map_err(|p| err(F, p))?;
            lex.field_by_name.insert(name.clone(), i);
            lex.fields.push(Field {
                name,
                class: entry.class,
                labels,
            });
        }
        for (name, value) in columns {
            let by_language: BTreeMap<String, Vec<String>> = value
                .try_into()
                .map_err(|e: toml::de::Error| err(C, format!("[{name}]: {}", e.message())))?;
            let labels = labels_of(C, &name, by_language)?;
            let i = lex.columns.len();
            let names: Vec<&str> = lex.columns.iter().map(|c| c.name.as_str()).collect();
            index(
                &mut lex.column_by_label,
                &labels,
                i,
                &names,
                &name,
                "a header",
            )
            .map_err(|p| err(C, p))?;
            lex.columns.push(Column { name, labels });
        }
        Ok(lex)
    }
}

/// Indexes `labels` of entry `i` (table `name`; `names` the entries indexed before it) in
/// `by_label`, or says which label another entry, or this one under another language, has too.
fn index(
    by_label: &mut HashMap<String, usize>,
    labels: &[Label],
    i: usize,
    names: &[&str],
    name: &str,
    what: &str,
) -> Result<(), String> {
    for l in labels {
        if let Some(j) = by_label.insert(l.text.clone(), i) {
            let other = names.get(j).copied().unwrap_or(name);
            return Err(format!(
                "[{name}] {}: \"{}\" is also {what} of [{other}]",
                l.language, l.text
            ));
        }
    }
    Ok(())
}

/// The labels of table `name` in `file`, by language, each checked: a known language, folded
/// (as [`snake`] writes it), not empty.
fn labels_of(
    file: &'static str,
    name: &str,
    by_language: BTreeMap<String, Vec<String>>,
) -> Result<Vec<Label>, DataError> {
    let mut out = Vec::new();
    for (language, labels) in by_language {
        if !LANGUAGES.contains(&language.as_str()) {
            return Err(DataError {
                file,
                problem: format!(
                    "[{name}] {language}: not a language of the lexicon ({})",
                    LANGUAGES.join(", ")
                ),
            });
        }
        for text in labels {
            let folded = snake(&text, 64);
            if folded != text || text.is_empty() {
                return Err(DataError {
                    file,
                    problem: format!(
                        "[{name}] {language}: \"{text}\" is not written folded (write \"{folded}\")"
                    ),
                });
            }
            out.push(Label {
                text,
                language: language.clone(),
            });
        }
    }
    Ok(out)
}

/// The lexicon of the embedded data files. Both are checked by this crate's tests, so a file
/// that does not parse fails them before it ships; should one still be broken, the analysis
/// runs with no lexicon (every label keeps its own name) and says so once in the log.
pub fn lexicon() -> &'static Lexicon {
    static LEXICON: LazyLock<Lexicon> = LazyLock::new(|| {
        Lexicon::parse(FIELDS_TOML, COLUMNS_TOML).unwrap_or_else(|e| {
            eprintln!("agentd-analysis: the embedded lexicon is broken ({e}); running without it");
            Lexicon::empty()
        })
    });
    &LEXICON
}

/// The canonical field of a label in snake_case (accents folded): the listed label itself;
/// else the label without number words and a currency code (`mwst_19` → `mwst`,
/// `summe_eur` → `summe`); else an abbreviation (`rueckg`) that starts one listed label.
pub fn field(snake_label: &str) -> Option<(&'static str, Class)> {
    let lex = lexicon();
    let exact = |s: &str| {
        lex.field_by_label
            .get(s)
            .and_then(|&i| lex.fields.get(i))
            .map(|f| (f.name.as_str(), f.class))
    };
    if let Some(f) = exact(snake_label) {
        return Some(f);
    }
    // `N.º de factura` folds to `n_o_de_factura`: read it as `no_de_factura`.
    if let Some(rest) = snake_label.strip_prefix("n_o_")
        && let Some(f) = exact(&format!("no_{rest}"))
    {
        return Some(f);
    }
    // `Nº de póliza`, `Nr. Versicherungsschein`, `Numéro client`: the word "number" before
    // what it numbers names the same field as the thing's own label.
    for prefix in [
        "no_de_",
        "n_de_",
        "nr_de_",
        "numero_de_",
        "numero_do_",
        "numero_da_",
        "no_",
        "nr_",
        "nro_",
        "num_",
        "numero_",
        "n_",
    ] {
        if let Some(rest) = snake_label.strip_prefix(prefix) {
            for variant in [
                format!("numero_de_{rest}"),
                format!("numero_{rest}"),
                format!("n_{rest}"),
                format!("no_de_{rest}"),
                rest.to_string(),
            ] {
                if let Some(f) = exact(&variant).filter(|f| f.1 == Class::Identifier) {
                    return Some(f);
                }
            }
        }
    }
    // `Avoir N°`, `Bon de livraison Nr.`, `Pedido de compra Nº`: a document's title and the
    // word "number" name that document's number.
    for suffix in [
        "_n_o", "_nro", "_no", "_nr", "_n", "_number", "_numero", "_nummer",
    ] {
        if let Some(stem) = snake_label.strip_suffix(suffix)
            && let Some(f) = exact(stem).filter(|f| f.1 == Class::Identifier)
        {
            return Some(f);
        }
    }
    // `Líquido total a percibir`, `Summe SV-Beiträge`, `Total IVA`, `Jahresbeitrag gesamt`: a
    // known amount with a word for "total" around or inside it.
    let totalless: Vec<&str> = snake_label
        .split('_')
        .filter(|w| {
            !matches!(
                *w,
                "total" | "totale" | "totaal" | "summe" | "gesamt" | "sum" | "somme" | "som"
            )
        })
        .collect();
    if !totalless.is_empty() && totalless.len() < snake_label.split('_').count() {
        let t = totalless.join("_");
        if let Some(f) = exact(&t).filter(|f| f.1 == Class::Amount) {
            return Some(f);
        }
    }
    let trimmed: Vec<&str> = snake_label
        .split('_')
        .filter(|w| !w.chars().all(|c| c.is_ascii_digit()))
        .filter(|w| !matches!(*w, "eur" | "usd" | "gbp" | "chf" | "ars"))
        .collect();
    let trimmed = trimmed.join("_");
    if !trimmed.is_empty()
        && trimmed != snake_label
        && let Some(f) = exact(&trimmed)
    {
        return Some(f);
    }
    None
}

/// The language a label is listed under, when the lexicon lists it as written (`rechnungsnummer`
/// → `de`; `invoice_no` → `en`).
pub fn label_language(snake_label: &str) -> Option<&'static str> {
    let lex = lexicon();
    let f = lex.fields.get(*lex.field_by_label.get(snake_label)?)?;
    let l = f.labels.iter().find(|l| l.text == snake_label)?;
    LANGUAGES.iter().copied().find(|c| *c == l.language)
}

/// The canonical field of an abbreviated label (`RUECKG.` → `rueckg…` → `change`): the only
/// field with a label the abbreviation starts (at least four letters).
pub fn abbreviated(snake_label: &str) -> Option<(&'static str, Class)> {
    if snake_label.chars().count() < 4 || snake_label.contains('_') {
        return None;
    }
    let mut found: Option<(&'static str, Class)> = None;
    for f in &lexicon().fields {
        if f.labels.iter().any(|l| l.text.starts_with(snake_label)) {
            match found {
                Some((name, _)) if name != f.name => return None,
                _ => found = Some((f.name.as_str(), f.class)),
            }
        }
    }
    found
}

/// Whether a label is only the word "number" (`N°`, `No.`, `Nr.`, `Número`): the document's own
/// number.
pub fn number_word(snake_label: &str) -> bool {
    matches!(
        snake_label,
        "n" | "no" | "n_o" | "nr" | "nro" | "num" | "numero" | "number" | "nummer" | "nbr"
    )
}

/// Whether a label is only the word for a company (`Azienda`, `Empresa`, `Firma`): the party
/// that issued the document.
pub fn company_word(snake_label: &str) -> bool {
    matches!(
        snake_label,
        "azienda"
            | "empresa"
            | "firma"
            | "entreprise"
            | "societe"
            | "bedrijf"
            | "company"
            | "unternehmen"
            | "ditta"
            | "sociedade"
    )
}

/// The canonical column name of a table header in snake_case.
pub fn column(snake_header: &str) -> Option<&'static str> {
    let lex = lexicon();
    lex.column_by_label
        .get(snake_header)
        .and_then(|&i| lex.columns.get(i))
        .map(|c| c.name.as_str())
}

/// The class a canonical field name has (`None` for names not in the lexicon).
pub fn class_of(name: &str) -> Option<Class> {
    let lex = lexicon();
    lex.field_by_name
        .get(name)
        .and_then(|&i| lex.fields.get(i))
        .map(|f| f.class)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_in_several_languages_meet() {
        for l in [
            "invoice_number",
            "rechnungsnummer",
            "numero_de_facture",
            "n_de_factura",
            "numero_fattura",
            "factuurnummer",
        ] {
            assert_eq!(field(l).map(|f| f.0), Some("invoice_number"), "{l}");
        }
        assert_eq!(field("mwst_19").map(|f| f.0), Some("vat"));
        assert_eq!(field("summe_eur").map(|f| f.0), Some("total"));
        assert_eq!(field("total_cholesterol"), None);
        assert_eq!(abbreviated("rueckg").map(|f| f.0), Some("change"));
        assert_eq!(abbreviated("to"), None);
        assert_eq!(column("einzelpreis"), Some("unit_price"));
    }

    #[test]
    fn the_data_files_parse_and_every_label_is_folded_known_once_and_tagged() {
        // `Lexicon::parse` refuses a label listed twice, one not folded and an unknown
        // language: that the embedded files parse is the check.
        let lex = Lexicon::parse(FIELDS_TOML, COLUMNS_TOML).expect("the embedded lexicon");
        assert!(lex.fields.len() >= 130, "{}", lex.fields.len());
        assert!(lex.columns.len() >= 10, "{}", lex.columns.len());
        let labels: usize = lex.fields.iter().map(|f| f.labels.len()).sum();
        assert!(labels >= 2000, "{labels}");
        for f in &lex.fields {
            assert!(!f.labels.is_empty(), "[{}] has no label", f.name);
            assert_eq!(
                snake(&f.name, 64),
                f.name,
                "[{}] is no snake_case name",
                f.name
            );
        }
        for language in LANGUAGES {
            let n = lex
                .fields
                .iter()
                .flat_map(|f| &f.labels)
                .filter(|l| l.language == *language)
                .count();
            assert!(n >= 100, "{language}: {n} labels");
        }
    }

    #[test]
    fn a_broken_data_file_is_refused_naming_the_file_the_table_and_the_problem() {
        let twice = "[a]\nclass = \"date\"\nen = [\"x\"]\n[b]\nclass = \"text\"\nde = [\"x\"]\n";
        let e = Lexicon::parse(twice, "").unwrap_err();
        assert_eq!(
            e.to_string(),
            "data/fields.toml: [b] de: \"x\" is also a label of [a]"
        );
        let unfolded = "[a]\nclass = \"date\"\nen = [\"Date of Issue\"]\n";
        let e = Lexicon::parse(unfolded, "").unwrap_err();
        assert_eq!(
            e.to_string(),
            "data/fields.toml: [a] en: \"Date of Issue\" is not written folded (write \"date_of_issue\")"
        );
        let e = Lexicon::parse("[a]\nclass = \"date\"\nxx = [\"d\"]\n", "").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("data/fields.toml: [a] xx: not a language"),
            "{e}"
        );
        let e = Lexicon::parse("[a]\nclass = \"colour\"\nen = [\"d\"]\n", "").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("data/fields.toml: [a]: unknown variant"),
            "{e}"
        );
        let e = Lexicon::parse("", "[c]\nen = [\"x\"]\n[d]\nnl = [\"x\"]\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "data/columns.toml: [d] nl: \"x\" is also a header of [c]"
        );
        assert!(Lexicon::parse("not toml", "").is_err());
    }
}

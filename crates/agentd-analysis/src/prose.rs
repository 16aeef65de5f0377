//! Fields written in running text rather than as `Label: value`: an amount a sentence names
//! with a known label (`Der Erstattungsbetrag von 1.342,88 € wird …`, `a refund of £318`), the
//! year a tax form is for (`Bescheid für 2025`, `revenus de l'année 2025`, `2025 Form 1099`),
//! and a masked card number's last four digits (`MASTERCARD ****5519`, `XXXX XXXX XXXX 1234`).

use super::labels::{self, How, Pair};
use super::lexicon::Class;
use regex::Regex;
use std::sync::LazyLock;

/// `<words> von|of|de|di|van|da <amount>` inside a sentence.
static NAMED_AMOUNT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)((?:\p{L}[\p{L}'’-]*\s+){0,2}\p{L}[\p{L}'’-]*)\s+(?:von|of|de|di|van|da|du|del)\s+((?:[€$£]\s?)?-?\d[\d.,' ]*\d(?:\s?(?:€|EUR|USD|GBP|CHF|\$|£))?)",
    )
    .expect("regex")
});

/// Pairs of amounts named in running text by a label the lexicon knows as an amount (the last
/// one, two or three words before `von`/`of`/`de`…): `Der Erstattungsbetrag von 1.342,88 €` →
/// (`Erstattungsbetrag`, `1.342,88 €`). Lines that are pairs already are not read.
pub fn named_amounts(line: &str, i: usize) -> Vec<Pair> {
    let mut out = Vec::new();
    for c in NAMED_AMOUNT.captures_iter(line).take(8) {
        let (Some(words), Some(amount)) = (c.get(1), c.get(2)) else {
            continue;
        };
        let words: Vec<&str> = words.as_str().split_whitespace().collect();
        // The longest tail of the words that the lexicon knows as an amount.
        let label = (0..words.len()).find_map(|k| {
            let l = words.get(k..)?.join(" ");
            labels::known(&l)
                .is_some_and(|(_, class)| class == Class::Amount)
                .then_some(l)
        });
        if let Some(label) = label {
            out.push(Pair {
                label,
                value: amount.as_str().trim().to_string(),
                line: i,
                how: How::Spaced,
            });
        }
    }
    out
}

static YEAR_AFTER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:für|fuer|for|pour|per|voor|do|del|de|au titre de)\s+(?:[\p{L}'’]+\s+){0,2}?((?:19|20)\d{2})\b(?:[^\d./-]|$)")
        .expect("regex")
});
static YEAR_FIRST: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^\s*((?:19|20)\d{2})\s+(?:form|tax|steuer|modelo|modello|formulaire)")
        .expect("regex")
});

/// The year a tax form is for, from its first lines: `Bescheid für 2025`, `Établi au titre des
/// revenus de l'année 2025`, `2025 Form 1099-DIV` (not a year in a date or a title's own year
/// without a preposition: `AVIS D'IMPÔT 2026`).
pub fn tax_year(lines: &[String]) -> Option<(usize, i32)> {
    lines.iter().enumerate().take(15).find_map(|(i, l)| {
        let c = YEAR_FIRST.captures(l).or_else(|| YEAR_AFTER.captures(l))?;
        let y: i32 = c.get(1)?.as_str().parse().ok()?;
        Some((i, y))
    })
}

static MASKED_CARD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:[*xX•]{4}[ -]{0,3}){1,3}[*xX•]{0,4}[ -]{0,3}([0-9lIO]{4})\b").expect("regex")
});

/// The last four digits of the first masked card number (`****5519`, `XXXX XXXX XXXX 1234`).
pub fn card_last_four(lines: &[String]) -> Option<(usize, String)> {
    lines.iter().enumerate().find_map(|(i, l)| {
        let c = MASKED_CARD.captures(l)?;
        // An OCR reads `7l03` for `7103`.
        let digits: String = c
            .get(1)?
            .as_str()
            .chars()
            .map(|ch| match ch {
                'l' | 'I' => '1',
                'O' => '0',
                other => other,
            })
            .collect();
        let real = c
            .get(1)?
            .as_str()
            .chars()
            .filter(char::is_ascii_digit)
            .count();
        (real >= 2).then_some((i, digits))
    })
}

static ITEM_COUNT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^\s*(\d{1,3})\s+(?:articles?|items?|artikel|art\.|art[ií]culos|articoli|artigos|artikelen|stuks|pi[eè]ces|pcs|st[üu]ck)\s*$")
        .expect("regex")
});

/// A receipt's count of items on a line of its own (`5 ARTICLES`, `12 Artikel`).
pub fn item_count(lines: &[String]) -> Option<(usize, u32)> {
    lines.iter().enumerate().find_map(|(i, l)| {
        let c = ITEM_COUNT.captures(l)?;
        Some((i, c.get(1)?.as_str().parse().ok()?))
    })
}

/// Words that put a deadline before a date in running text (`uiterlijk op`, `spätestens
/// am`, `au plus tard le`, `no later than`, `entro il`, `antes del`), longest first.
static DEADLINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(?:uiterlijk\s+op|uiterlijk|v[oó]{2}r|sp[äa]testens\s+(?:am|bis\s+zum|zum|bis)|bis\s+(?:zum|sp[äa]testens)|bis|au\s+plus\s+tard\s+le|au\s+plus\s+tard|avant\s+le|no\s+later\s+than|on\s+or\s+before|by|before|entro\s+il|entro\s+e\s+non\s+oltre\s+il|entro|antes\s+del|antes\s+de|hasta\s+el|at[ée]\s+(?:ao\s+dia|a|ao)|at[ée])\s+",
    )
    .expect("regex")
});

/// Stems of words for paying, folded (`betalen`, `zahlen`, `payer`, `pay`, `pagar`, `pagare`,
/// `überweisen`, `fällig`, `due`, `régler`, `versare`).
const PAY_WORDS: [&str; 14] = [
    "betal",
    "zahl",
    "uberweis",
    "fallig",
    "pay",
    "paie",
    "regl",
    "pag",
    "versa",
    "due",
    "verschuldigd",
    "vencim",
    "scaden",
    "echeanc",
];

/// The due date a sentence about paying sets (`U moet het bedrag uiterlijk op 31 oktober 2026
/// betalen.`, `Please pay by 18 November 2026`, `à régler avant le 19/11/2026`): the date right
/// after a deadline word, on a line with a word for paying. Lines of `Label: value` are not
/// sentences.
pub fn due_in_sentence(line: &str, order: super::values::DateOrder) -> Option<chrono::NaiveDate> {
    if line.contains(':') || line.trim().contains("   ") {
        return None;
    }
    let folded = super::values::fold(line);
    if !PAY_WORDS.iter().any(|w| folded.contains(w)) {
        return None;
    }
    let dates = super::values::dates_in(line, order);
    DEADLINE.find_iter(line).take(8).find_map(|m| {
        let d = dates.iter().find(|d| d.start == m.end())?;
        d.readings.first().copied()
    })
}

/// Words that open a line saying when pay was sent (`Überweisung am 30.10.2026 auf IBAN …`,
/// `Pagamento: bonifico del 27/10/2026`, `Virement effectué le 31/10/2026`).
const PAID_WORDS: [&str; 16] = [
    "uberweisung",
    "auszahlung",
    "zahlung",
    "bonifico",
    "pagamento",
    "pagato",
    "virement",
    "paiement",
    "transferencia",
    "pago",
    "abonado",
    "payment",
    "paid",
    "betaling",
    "uitbetaling",
    "overboeking",
];

/// The date pay was sent, from a line that opens with a word for paying or transferring and
/// names one date (the first two lines of a payslip's pay block may say it twice: the first
/// such line wins). A line with a date range or two dates says something else.
pub fn paid_in_sentence(line: &str, order: super::values::DateOrder) -> Option<chrono::NaiveDate> {
    let folded = super::values::fold(line.trim());
    let first = folded
        .split(|c: char| !c.is_alphanumeric())
        .find(|w| !w.is_empty())?;
    if !PAID_WORDS.contains(&first) {
        return None;
    }
    match super::values::dates_in(line, order).as_slice() {
        [d] => d.readings.first().copied(),
        _ => None,
    }
}

static MONTH_YEAR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(?:^|\s)(\p{L}{3,10}\.?)\s+((?:19|20)\d{2})\s*$").expect("regex")
});

/// The month a title names as its period, in the first lines: `Abrechnung der
/// Brutto/Netto-Bezüge` over `für Oktober 2026`, `Loonstrook oktober 2026`, `Payslip for
/// October 2026`: the line and the month and year as written. A line of a pair or a table
/// (a colon, a run of spaces) or with a day before the month is no title.
pub fn title_month(lines: &[String]) -> Option<(usize, String)> {
    lines.iter().enumerate().take(15).find_map(|(i, l)| {
        let t = l.trim();
        if t.contains(':') || t.contains("   ") || t.split_whitespace().count() > 8 {
            return None;
        }
        let c = MONTH_YEAR.captures(t)?;
        let (month, year) = (c.get(1)?, c.get(2)?);
        // `15. Oktober 2026` is a date, not a month.
        let before = t.get(..month.start())?.trim_end();
        if before.ends_with(|ch: char| ch.is_ascii_digit() || ch == '.') {
            return None;
        }
        super::values::month_of(month.as_str())?;
        Some((i, format!("{} {}", month.as_str(), year.as_str())))
    })
}

static TITLE_YEAR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\s*\p{L}[\p{L}'’ -]{3,80}?\s+((?:19|20)\d{2})\s*$").expect("regex")
});

/// A tax form's title ending in the year it is for (`Aanslag inkomstenbelasting en premie
/// volksverzekeringen 2025`), when no line names the year with a preposition (see
/// [`tax_year`]): words only, then the year.
pub fn title_year(lines: &[String]) -> Option<(usize, i32)> {
    lines.iter().enumerate().take(15).find_map(|(i, l)| {
        if l.trim().contains("   ") {
            return None;
        }
        let c = TITLE_YEAR.captures(l)?;
        if l.split_whitespace().count() < 3 {
            return None;
        }
        Some((i, c.get(1)?.as_str().parse().ok()?))
    })
}

static TITLE_NUMBER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)^\s*(\p{L}[\p{L}'’ ]{2,40}?)\s+(?:(?:n\.?\s?[°ºo]?\.?|nº|n°|no\.|nr\.?|num\.|núm\.|number|numero|número|nummer)\s*:?\s*)?([A-Z0-9][A-Z0-9./-]*(?:\s[A-Z0-9]*\d[A-Z0-9./-]*)?)(?:\s+(?:del|dal|du|vom|of|dated|de|van|d\.d\.|da)\s+(.+?))?\s*(?:\s{2,}.*)?$",
    )
    .expect("regex")
});

/// A title line that numbers the document, in its first lines: `NOTA DI CREDITO N. 14/NC DEL
/// 12/11/2026`, `Fattura n. 2026/GN/0448120 del 06/11/2026`, `FATURA  FT 2026A/1442`: the
/// line's index, the number as written and the date after it (when there is one). The words
/// before the number must be a document title ([`super::kind::is_title`]).
pub fn title_number(
    lines: &[String],
    order: super::values::DateOrder,
) -> Option<(usize, String, Option<chrono::NaiveDate>)> {
    for (i, l) in lines.iter().enumerate().take(25) {
        let Some(c) = TITLE_NUMBER.captures(l) else {
            continue;
        };
        let (Some(title), Some(code)) = (c.get(1), c.get(2)) else {
            continue;
        };
        if !super::kind::is_title(title.as_str().trim()) {
            continue;
        }
        let code = code.as_str().trim().to_string();
        if !code.chars().any(|ch| ch.is_ascii_digit())
            || super::values::parse_date(&code, order).is_some()
        {
            continue;
        }
        let date = c
            .get(3)
            .and_then(|d| super::values::parse_date(d.as_str().trim(), order));
        return Some((i, code, date));
    }
    None
}

/// Words that open an address block on a line of their own (`Herrn`, `Spett.le`,
/// `Exmo(s). Senhor(es)`), folded, without punctuation.
const SALUTATIONS: [&str; 31] = [
    "herrn und frau",
    "herr und frau",
    "m et mme",
    "mr and mrs",
    "mr mrs",
    "herrn",
    "herr",
    "frau",
    "firma",
    "an",
    "to",
    "mr",
    "mrs",
    "ms",
    "monsieur",
    "madame",
    "messieurs",
    "mme",
    "spett le",
    "spettabile",
    "gentile",
    "egregio",
    "exmo s senhor es",
    "exmos senhores",
    "exmo senhor",
    "exma senhora",
    "sr",
    "sra",
    "senor",
    "senora",
    "aan",
];

/// Courtesy titles that open a name in an address block (`Mme Claire Bonnefoy`, `Herrn
/// Dr. Jens Albrecht`), folded, without punctuation.
const TITLES: [&str; 18] = [
    "mme", "mlle", "m", "mr", "mrs", "ms", "miss", "herrn", "herr", "frau", "sr", "sra", "srta",
    "sig", "sigra", "dhr", "mevr", "mw",
];

/// A name that opens with a courtesy title on a line of its own, an address line with a digit
/// below it (`Mme Claire Bonnefoy` over `14 rue des Tanneurs`): its line and the name as written.
pub fn titled_name(lines: &[String]) -> Option<(usize, String)> {
    let limit = lines.len().min(30);
    (0..limit).find_map(|i| {
        let l = lines[i].trim();
        let first = l.split_whitespace().next()?;
        let title = super::values::fold(first.trim_end_matches('.'));
        let n_words = l.split_whitespace().count();
        let next = lines.get(i + 1)?.trim();
        (TITLES.contains(&title.as_str())
            && (2..=6).contains(&n_words)
            && !l.contains("  ")
            && !l.contains(':')
            && !l.chars().any(|c| c.is_ascii_digit())
            && l.split_whitespace()
                .skip(1)
                .all(|w| w.chars().next().is_some_and(char::is_uppercase))
            && next.chars().any(|c| c.is_ascii_digit()))
        .then(|| (i, l.split_whitespace().collect::<Vec<_>>().join(" ")))
    })
}

/// The name under a salutation on a line of its own in the first lines (`Herrn` over `Tobias
/// Reinke`, `Spett.le` over `STUDIO DENTISTICO SORRISO SRL`): its line and the name, when the
/// next line reads as one (letters, at most six words, no digit, no label).
pub fn addressee(lines: &[String]) -> Option<(usize, String)> {
    let limit = lines.len().min(30);
    for i in 0..limit {
        let folded = super::values::fold(lines[i].trim());
        let words: String = folded
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        if words.is_empty() || !SALUTATIONS.contains(&words.as_str()) {
            continue;
        }
        let next = lines.get(i + 1)?.trim();
        let n_words = next.split_whitespace().count();
        let letters = next.chars().filter(|c| c.is_alphabetic()).count();
        if next.is_empty()
            || n_words > 6
            || letters < 3
            || next.chars().any(|c| c.is_ascii_digit())
            || next.contains(':')
        {
            continue;
        }
        return Some((i + 1, next.split_whitespace().collect::<Vec<_>>().join(" ")));
    }
    None
}

static NUMBERED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)((?:\p{L}[\p{L}'’-]*\s+){0,2}\p{L}[\p{L}'’-]*)\s+(?:n[°º]|n\.\s?[°º]|no\.|nr\.?|n\.|num\.|núm\.|number|numéro|numero|número|nummer)\s*:?\s*([A-Z0-9][A-Z0-9_./-]*)",
    )
    .expect("regex")
});

/// Numbers running text names with a word the lexicon knows as an identifier and a word for
/// "number" (`est titulaire du contrat n° RCP-0448-2291-B`, `della fattura n. 388 del …`):
/// (`contrat n°`, `RCP-0448-2291-B`). The code has a digit; a redaction token inside it
/// (`RCP-PHONE_1-B`) is kept, to be filled in again in the answer.
pub fn numbered_refs(line: &str, i: usize) -> Vec<Pair> {
    let mut out = Vec::new();
    for c in NUMBERED.captures_iter(line).take(8) {
        let (Some(words), Some(code)) = (c.get(1), c.get(2)) else {
            continue;
        };
        let code = code.as_str().trim_end_matches(['.', ',', ';']);
        if !code.chars().any(|ch| ch.is_ascii_digit()) {
            continue;
        }
        let words: Vec<&str> = words.as_str().split_whitespace().collect();
        // The longest tail of the words that, with "n°", the lexicon knows as an identifier.
        let label = (0..words.len()).find_map(|k| {
            let l = format!("{} n°", words.get(k..)?.join(" "));
            labels::known(&l)
                .is_some_and(|(_, class)| class == Class::Identifier)
                .then_some(l)
        });
        if let Some(label) = label {
            out.push(Pair {
                label,
                value: code.to_string(),
                line: i,
                how: How::Spaced,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_due_date_in_a_sentence() {
        use super::super::values::DateOrder;
        let d = |y, m, day| chrono::NaiveDate::from_ymd_opt(y, m, day);
        assert_eq!(
            due_in_sentence(
                "U moet het bedrag uiterlijk op 31 oktober 2026 betalen.",
                DateOrder::DayFirst
            ),
            d(2026, 10, 31)
        );
        assert_eq!(
            due_in_sentence("Please pay by 18 November 2026.", DateOrder::MonthFirst),
            d(2026, 11, 18)
        );
        // No word for paying; a pair line.
        assert_eq!(
            due_in_sentence("Valable jusqu'au 31/12/2026", DateOrder::DayFirst),
            None
        );
        assert_eq!(
            due_in_sentence("Zahlbar bis: 30.11.2026", DateOrder::DayFirst),
            None
        );
    }

    #[test]
    fn a_name_with_a_courtesy_title() {
        assert_eq!(
            titled_name(&lines(
                "Vos références\n\nMme Claire Bonnefoy\n14 rue des Tanneurs"
            )),
            Some((2, "Mme Claire Bonnefoy".into()))
        );
        // No address below; a sentence.
        assert_eq!(
            titled_name(&lines("Mme Claire Bonnefoy\nDétail du calcul")),
            None
        );
        assert_eq!(
            titled_name(&lines("M. le directeur vous informe\n12 rue")),
            None
        );
    }

    #[test]
    fn a_month_in_a_title() {
        assert_eq!(
            title_month(&lines(
                "Abrechnung der Brutto/Netto-Bezüge\nfür Oktober 2026"
            )),
            Some((1, "Oktober 2026".into()))
        );
        assert_eq!(title_month(&lines("Köln, den 15. Oktober 2026")), None);
        assert_eq!(title_month(&lines("Zeitraum:  Oktober 2026")), None);
    }

    #[test]
    fn a_year_ending_a_title() {
        assert_eq!(
            title_year(&lines(
                "Belastingdienst\nAanslag inkomstenbelasting en premie volksverzekeringen 2025"
            )),
            Some((1, 2025))
        );
        assert_eq!(title_year(&lines("Datum  2025")), None);
    }

    fn lines(t: &str) -> Vec<String> {
        t.lines().map(str::to_string).collect()
    }

    #[test]
    fn amounts_named_in_a_sentence() {
        let p = named_amounts("Der Erstattungsbetrag von 1.342,88 € wird auf das Konto", 3);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].label, "Erstattungsbetrag");
        assert_eq!(p[0].value, "1.342,88 €");
        let p = named_amounts("We will send you a refund of £318.00 by cheque.", 0);
        assert_eq!(p.first().map(|p| p.label.as_str()), Some("refund"));
        assert!(named_amounts("a box of 12 eggs", 0).is_empty());
    }

    #[test]
    fn the_year_a_tax_form_is_for() {
        assert_eq!(
            tax_year(&lines("Finanzamt\nBescheid für 2025\nüber Einkommensteuer")),
            Some((1, 2025))
        );
        assert_eq!(
            tax_year(&lines(
                "AVIS D'IMPÔT 2026\nÉtabli au titre des revenus de l'année 2025"
            )),
            Some((1, 2025))
        );
        assert_eq!(
            tax_year(&lines("ACME\n2025 Form 1099-DIV")),
            Some((1, 2025))
        );
        assert_eq!(tax_year(&lines("Datum: 09.10.2025\nfür 12.10.2025")), None);
    }

    #[test]
    fn a_masked_card_number() {
        assert_eq!(
            card_last_four(&lines("TOTAL 8.50\nMASTERCARD ****5519   $87.28")),
            Some((1, "5519".to_string()))
        );
        assert_eq!(
            card_last_four(&lines("Card: XXXX XXXX XXXX 1234")),
            Some((0, "1234".to_string()))
        );
        assert_eq!(card_last_four(&lines("Total 1234")), None);
    }
}

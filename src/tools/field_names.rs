//! Field and schema names as agentd stores them: snake_case ASCII, whatever language or
//! punctuation the model or the document used.

/// `Invoice Number` → `invoice_number` (at most 64 characters; `document` when nothing is left).
pub fn schema_name(name: &str) -> String {
    let s = snake(name, 64);
    if s.is_empty() { "document".into() } else { s }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snake_keeps_the_letters_of_accented_names() {
        assert_eq!(snake("Numéro de facture", 64), "numero_de_facture");
        assert_eq!(snake("Arrivée", 64), "arrivee");
        assert_eq!(snake("Straße / Größe", 64), "strasse_grosse");
        assert_eq!(snake("Invoice Number", 64), "invoice_number");
        assert_eq!(snake("  Total (€) ", 64), "total");
    }
}

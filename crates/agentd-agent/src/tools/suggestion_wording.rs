//! What a nightly suggestion says (issue 48, item 5): its title and message are built from the
//! signal it answers and the documents that signal names — "3 documents have no tags: “a.pdf”,
//! “b.pdf” and “c.pdf”" — not from a model's words. A small model's titles read like "Extracting
//! relevant documents from the most useful action for the night." (measured with the 0.5B model);
//! the overview already holds every fact a person needs. A model's message is kept, after the
//! built one, only when it adds something (most of its words are not in the built text); a
//! suggestion no signal names (kind `other`, or a document its kind's signal does not list)
//! keeps the model's title and message, which it must then give.

use crate::store::suggestions::Overview;
use crate::tools::suggestions::{SuggestionKind, WAITING_AFTER_DAYS};
use std::collections::BTreeSet;
use uuid::Uuid;

/// Longest title (the tool's bound) and message.
pub const MAX_TITLE: usize = 200;
pub const MAX_MESSAGE: usize = 4000;
/// A document's name at most this long in a title or message (then "…").
const NAME_CHARS: usize = 60;
/// Names listed in an org-wide title, and in its message.
const IN_TITLE: usize = 3;
const IN_MESSAGE: usize = 10;

/// `s`, at most `n` characters (counted as characters, never bytes), "…" when cut.
fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_string();
    }
    let mut out: String = s.chars().take(n.saturating_sub(1)).collect();
    out.push('…');
    out
}

fn quoted(name: &str) -> String {
    format!("“{}”", cut(name.trim(), NAME_CHARS))
}

/// "“a”", "“a” and “b”", "“a”, “b” and “c”", "“a”, “b”, “c” and 4 more" — `total` counts the
/// ones not in `names` too.
fn listed(names: &[String], shown: usize, total: usize) -> String {
    let shown: Vec<String> = names.iter().take(shown).map(|n| quoted(n)).collect();
    let more = total.saturating_sub(shown.len());
    match (shown.as_slice(), more) {
        ([], _) => format!("{total}"),
        ([one], 0) => one.clone(),
        (many, 0) => {
            let (last, rest) = many
                .split_last()
                .map_or((String::new(), &[][..]), |(l, r)| (l.clone(), r));
            format!("{} and {last}", rest.join(", "))
        }
        (many, more) => format!("{} and {more} more", many.join(", ")),
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// The title and message of a suggestion of `kind` about `document` (or the whole org), from
/// the overview's signal; `None` when no signal of that kind names it.
pub fn from_signal(
    kind: SuggestionKind,
    document: Option<Uuid>,
    o: &Overview,
) -> Option<(String, String)> {
    let tags = plural(o.tags.max(0) as usize, "tag", "tags");
    let (title, message) = match (kind, document) {
        (SuggestionKind::TagDocuments, None) if o.untagged_total > 0 => {
            let names: Vec<String> = o
                .untagged_documents
                .iter()
                .map(|d| d.name.clone())
                .collect();
            let n = o.untagged_total.max(0) as usize;
            let has = if n == 1 { "has" } else { "have" };
            (
                format!(
                    "{} {has} no tags: {}",
                    plural(n, "document", "documents"),
                    listed(&names, IN_TITLE, n)
                ),
                format!(
                    "{} {has} no tags while the organisation has {tags}: {}.",
                    plural(n, "document", "documents"),
                    listed(&names, IN_MESSAGE, n)
                ),
            )
        }
        (SuggestionKind::TagDocuments, Some(id)) => {
            let d = o.untagged_documents.iter().find(|d| d.id == id)?;
            (
                format!("{} has no tags", quoted(&d.name)),
                format!(
                    "{} has no tags while the organisation has {tags}.",
                    quoted(&d.name)
                ),
            )
        }
        (SuggestionKind::RetryFailed, None) if !o.failed_auto_creates.is_empty() => {
            let names: Vec<String> = o
                .failed_auto_creates
                .iter()
                .map(|d| d.name.clone())
                .collect();
            let n = names.len();
            (
                format!(
                    "{} failed to auto-create: {}",
                    plural(n, "document", "documents"),
                    listed(&names, IN_TITLE, n)
                ),
                format!(
                    "The auto-create of {} failed: {}. Retrying proposes a schema, a prompt and \
                     an extraction again.",
                    plural(n, "document", "documents"),
                    listed(&names, IN_MESSAGE, n)
                ),
            )
        }
        (SuggestionKind::RetryFailed, Some(id)) => {
            let d = o.failed_auto_creates.iter().find(|d| d.id == id)?;
            (
                format!("{} failed to auto-create", quoted(&d.name)),
                format!(
                    "The auto-create of {} failed. Retrying it proposes a schema, a prompt and \
                     an extraction again.",
                    quoted(&d.name)
                ),
            )
        }
        (SuggestionKind::ReviewProposal, None) if !o.waiting_proposals.is_empty() => {
            let names: Vec<String> = o
                .waiting_proposals
                .iter()
                .map(|p| format!("{} ({} days)", p.name.trim(), p.age_days))
                .collect();
            let n = names.len();
            (
                format!(
                    "{} waiting over {WAITING_AFTER_DAYS} days: {}",
                    plural(n, "proposal", "proposals"),
                    listed(&names, IN_TITLE, n)
                ),
                format!(
                    "{} {} waited more than {WAITING_AFTER_DAYS} days for a review: {}.",
                    plural(n, "proposal", "proposals"),
                    if n == 1 { "has" } else { "have" },
                    listed(&names, IN_MESSAGE, n)
                ),
            )
        }
        (SuggestionKind::ReviewProposal, Some(id)) => {
            let p = o.waiting_proposals.iter().find(|p| p.id == id)?;
            (
                format!(
                    "The proposal for {} has waited {} days",
                    quoted(&p.name),
                    p.age_days
                ),
                format!(
                    "The proposal for {} has waited {} days for a review.",
                    quoted(&p.name),
                    p.age_days
                ),
            )
        }
        (SuggestionKind::RerunExtraction, None) if !o.outdated_extractions.is_empty() => {
            let names: Vec<String> = o
                .outdated_extractions
                .iter()
                .map(|e| e.document_name.clone())
                .collect();
            let n = names.len();
            (
                format!(
                    "{} on an older schema version: {}",
                    plural(n, "extraction", "extractions"),
                    listed(&names, IN_TITLE, n)
                ),
                format!(
                    "The latest {} of {} used an older version of {} schema; re-running brings \
                     {} up to date.",
                    if n == 1 { "extraction" } else { "extractions" },
                    listed(&names, IN_MESSAGE, n),
                    if n == 1 { "its" } else { "their" },
                    if n == 1 { "it" } else { "them" }
                ),
            )
        }
        (SuggestionKind::RerunExtraction, Some(id)) => {
            let e = o
                .outdated_extractions
                .iter()
                .find(|e| e.document_id == id)?;
            (
                format!(
                    "{} was extracted with schema version {} of {}",
                    quoted(&e.document_name),
                    e.schema_version,
                    e.latest_schema_version
                ),
                format!(
                    "The latest extraction of {} used version {} of its schema, which is at \
                     version {}; re-running it brings it up to date.",
                    quoted(&e.document_name),
                    e.schema_version,
                    e.latest_schema_version
                ),
            )
        }
        _ => return None,
    };
    Some((cut(&title, MAX_TITLE), cut(&message, MAX_MESSAGE)))
}

/// The words of `s` a comparison counts: lower-case runs of letters and digits, 3 or more.
fn words(s: &str) -> BTreeSet<String> {
    s.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 3)
        .map(str::to_lowercase)
        .collect()
}

/// The built message, with the model's after it when the model's adds something: at least 4
/// of its words, and most of them, are not in the built title or message.
pub fn with_model_note(title: &str, built: &str, model: Option<&str>) -> String {
    let Some(model) = model.map(str::trim).filter(|m| !m.is_empty()) else {
        return built.to_string();
    };
    let known = words(&format!("{title} {built}"));
    let theirs = words(model);
    let new = theirs.iter().filter(|w| !known.contains(*w)).count();
    if new >= 4 && new * 2 > theirs.len() {
        cut(&format!("{built} {model}"), MAX_MESSAGE)
    } else {
        built.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::suggestions::{
        DocumentRef, FailedDocument, OutdatedExtraction, WaitingProposal,
    };
    use std::collections::BTreeMap;

    fn overview() -> Overview {
        let d = |n: u128, name: &str| DocumentRef {
            id: Uuid::from_u128(n),
            name: name.into(),
        };
        Overview {
            documents_total: 20,
            documents_by_status: BTreeMap::new(),
            tags: 2,
            schemas: 1,
            prompts: 1,
            waiting_proposals: vec![WaitingProposal {
                id: Uuid::from_u128(10),
                name: "lease.pdf".into(),
                age_days: 5,
            }],
            failed_auto_creates: vec![FailedDocument {
                id: Uuid::from_u128(20),
                name: "scan.png".into(),
                error: Some("provider: HTTP 500".into()),
            }],
            untagged_total: 14,
            untagged_documents: vec![d(1, "a.pdf"), d(2, "b.pdf"), d(3, "c.pdf"), d(4, "d.pdf")],
            outdated_extractions: vec![OutdatedExtraction {
                id: Uuid::from_u128(31),
                document_id: Uuid::from_u128(30),
                document_name: "invoice 7.pdf".into(),
                schema_id: Uuid::from_u128(32),
                schema_version: 1,
                latest_schema_version: 3,
            }],
            suggestions_this_night: 0,
        }
    }

    #[test]
    fn each_signal_says_what_it_is_and_names_its_documents() {
        let o = overview();
        let (t, m) = from_signal(SuggestionKind::TagDocuments, None, &o).unwrap();
        assert_eq!(
            t,
            "14 documents have no tags: “a.pdf”, “b.pdf”, “c.pdf” and 11 more"
        );
        assert_eq!(
            m,
            "14 documents have no tags while the organisation has 2 tags: “a.pdf”, “b.pdf”, \
             “c.pdf”, “d.pdf” and 10 more."
        );
        let (t, _) =
            from_signal(SuggestionKind::TagDocuments, Some(Uuid::from_u128(2)), &o).unwrap();
        assert_eq!(t, "“b.pdf” has no tags");
        let (t, m) = from_signal(SuggestionKind::RetryFailed, None, &o).unwrap();
        assert_eq!(t, "1 document failed to auto-create: “scan.png”");
        assert!(
            !m.contains("HTTP 500"),
            "no error text in a suggestion: {m}"
        );
        let (t, _) = from_signal(
            SuggestionKind::ReviewProposal,
            Some(Uuid::from_u128(10)),
            &o,
        )
        .unwrap();
        assert_eq!(t, "The proposal for “lease.pdf” has waited 5 days");
        let (t, _) = from_signal(SuggestionKind::ReviewProposal, None, &o).unwrap();
        assert_eq!(t, "1 proposal waiting over 3 days: “lease.pdf (5 days)”");
        let (t, m) = from_signal(
            SuggestionKind::RerunExtraction,
            Some(Uuid::from_u128(30)),
            &o,
        )
        .unwrap();
        assert_eq!(
            t,
            "“invoice 7.pdf” was extracted with schema version 1 of 3"
        );
        assert!(
            m.contains("version 1 of its schema, which is at version 3"),
            "{m}"
        );
        // No signal names it: the model's words, which it must give.
        assert!(from_signal(SuggestionKind::Other, None, &o).is_none());
        assert!(from_signal(SuggestionKind::TagDocuments, Some(Uuid::from_u128(99)), &o).is_none());
        assert!(from_signal(SuggestionKind::RetryFailed, Some(Uuid::from_u128(1)), &o).is_none());
    }

    #[test]
    fn long_and_odd_names_are_cut_by_characters_and_lists_read_as_prose() {
        let long = "ä".repeat(300);
        assert_eq!(quoted(&long).chars().count(), NAME_CHARS + 2);
        assert!(quoted(&long).ends_with("…”"));
        let names: Vec<String> = ["x", "y", "z"].iter().map(|s| s.to_string()).collect();
        assert_eq!(listed(&names[..1], 3, 1), "“x”");
        assert_eq!(listed(&names[..2], 3, 2), "“x” and “y”");
        assert_eq!(listed(&names, 3, 3), "“x”, “y” and “z”");
        assert_eq!(listed(&names, 2, 3), "“x”, “y” and 1 more");
        assert_eq!(listed(&[], 2, 7), "7");
        let mut o = overview();
        o.untagged_documents = vec![DocumentRef {
            id: Uuid::from_u128(1),
            name: "é".repeat(1000),
        }];
        o.untagged_total = 1;
        let (t, m) = from_signal(SuggestionKind::TagDocuments, None, &o).unwrap();
        assert!(t.chars().count() <= MAX_TITLE && m.chars().count() <= MAX_MESSAGE);
        assert!(t.starts_with("1 document has no tags: “"), "{t}");
    }

    #[test]
    fn a_models_message_is_kept_only_when_it_adds_something() {
        let (t, built) = (
            "“a.pdf” has no tags",
            "“a.pdf” has no tags while the organisation has 2 tags.",
        );
        // A restatement: dropped.
        assert_eq!(
            with_model_note(t, built, Some("The document a.pdf has no tags.")),
            built
        );
        assert_eq!(with_model_note(t, built, Some("  ")), built);
        assert_eq!(with_model_note(t, built, None), built);
        // New facts: kept after the built text.
        let note = "It looks like a supplier invoice, so the Invoices tag probably fits.";
        assert_eq!(
            with_model_note(t, built, Some(note)),
            format!("{built} {note}")
        );
    }
}

//! The redaction boundary's cost: µs per KB of document text to detect, to redact (new and
//! warm symbol table) and to rehydrate, against JSON-encoding the same text (what every
//! request pays anyway) measured in the same run. Also prints the detector's precision and
//! recall on its labelled corpus (`crates/agentd-store/src/pii/corpus.rs`).

use super::{Report, Row};
use agentd::pii::{Vault, corpus, detect};
use std::time::Instant;

const SECTION: &str = "redaction";

/// A ~64 KB document: the corpus and the samples, repeated.
fn document() -> String {
    let mut base = String::new();
    for (text, _) in corpus::CORPUS {
        base.push_str(text);
        base.push_str("\n\n");
    }
    for s in [
        include_str!("../../../../samples/invoice.txt"),
        include_str!("../../../../samples/lab_report.txt"),
        include_str!("../../../../samples/receipt.txt"),
    ] {
        base.push_str(s);
        base.push_str("\n\n");
    }
    base.repeat((65_536 / base.len()).max(1))
}

/// Median µs per KB of `f` over `reps` runs on `kb` KB.
fn per_kb(reps: usize, kb: f64, mut f: impl FnMut()) -> f64 {
    let mut v: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e6 / kb
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The redaction part.
pub fn run(quick: bool, report: &mut Report) {
    let doc = document();
    let kb = doc.len() as f64 / 1024.0;
    let reps = if quick { 5 } else { 21 };
    let json = per_kb(reps, kb, || {
        std::hint::black_box(serde_json::to_string(&doc).expect("string encodes"));
    });
    let det = per_kb(reps, kb, || {
        std::hint::black_box(detect(&doc, &[]));
    });
    let cold = per_kb(reps, kb, || {
        let v = Vault::in_memory(Vec::new());
        std::hint::black_box(v.redact(&doc));
    });
    let warm_vault = Vault::in_memory(Vec::new());
    let redacted = warm_vault.redact(&doc);
    let warm = per_kb(reps, kb, || {
        std::hint::black_box(warm_vault.redact(&doc));
    });
    let back = per_kb(reps, kb, || {
        std::hint::black_box(warm_vault.rehydrate(&redacted));
    });
    let note = format!(
        "{kb:.0} KB document, {} tokens, median of {reps}",
        warm_vault.len()
    );
    report.push(
        Row::new(SECTION, "detect", det, "µs/KB")
            .baseline("JSON-encode", json)
            .note(note.clone()),
    );
    report
        .push(Row::new(SECTION, "redact (new table)", cold, "µs/KB").baseline("JSON-encode", json));
    report.push(
        Row::new(SECTION, "redact (warm table)", warm, "µs/KB").baseline("JSON-encode", json),
    );
    report.push(Row::new(SECTION, "rehydrate", back, "µs/KB").baseline("JSON-encode", json));
    let (tp, fp, fnn, _) = corpus::score();
    report.push(
        Row::new(
            SECTION,
            "detector precision",
            tp as f64 / (tp + fp).max(1) as f64,
            "",
        )
        .note(format!(
            "corpus of {} documents (EN/DE/FR)",
            corpus::CORPUS.len()
        )),
    );
    report.push(Row::new(
        SECTION,
        "detector recall",
        tp as f64 / (tp + fnn).max(1) as f64,
        "",
    ));
}

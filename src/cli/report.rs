//! A document's auto-create report ([`crate::documents::document_report`]) printed for people.

pub(super) use crate::documents::document_report;
use serde_json::Value;

/// A report's `cost_usd` as a person reads it: `$0.004215`, or `cost n/a` (null: a model
/// without a price, such as the offline one).
pub(super) fn cost_text(cost_usd: &Value) -> String {
    match cost_usd.as_f64() {
        Some(d) => crate::config::format_usd((d * 1e9).round() as i64),
        None => "cost n/a".into(),
    }
}

pub(super) fn print_report(r: &Value) {
    println!(
        "{} ({})",
        r["name"].as_str().unwrap_or(""),
        r["document_id"].as_str().unwrap_or("")
    );
    println!(
        "  auto-create: {}",
        r["auto_create_status"].as_str().unwrap_or("")
    );
    if let Some(e) = r["error"].as_str() {
        println!("  error: {e}");
    }
    if let Some(run) = r["run"].as_object() {
        println!(
            "  run {} [{}]: {} ({}), {} round(s), {} tool call(s), {} tokens, {}, {}s",
            run["id"].as_str().unwrap_or(""),
            run["provider"].as_str().unwrap_or(""),
            run["status"].as_str().unwrap_or(""),
            run["stop_reason"].as_str().unwrap_or("-"),
            run["rounds"],
            run["tool_calls"],
            run["tokens"],
            cost_text(&run["cost_usd"]),
            run["seconds"]
                .as_f64()
                .map(|s| format!("{s:.2}"))
                .unwrap_or_else(|| "-".into())
        );
    }
    print_revision(r, "schema");
    let values = &r["extraction"]["result"];
    for f in r["fields"].as_array().into_iter().flatten() {
        let name = f["name"].as_str().unwrap_or("");
        println!(
            "    {:<24} {:<18} = {}",
            name,
            f["type"].to_string(),
            values
                .get(name)
                .map(|v| v.to_string())
                .unwrap_or_else(|| "-".into())
        );
    }
    let also: Vec<&Value> = r["also_found"].as_array().into_iter().flatten().collect();
    if !also.is_empty() {
        println!("  also found (not in the schema; POST /v1/documents/{{id}}/fields adds one):");
        for f in also {
            println!(
                "    {:<24} {:<8} {}",
                f["name"].as_str().unwrap_or(""),
                f["reason"].as_str().unwrap_or(""),
                f["why"].as_str().unwrap_or("")
            );
        }
    }
    print_revision(r, "prompt");
}

/// The report's schema or prompt (`kind`) line, if it has one: revid, name and status.
fn print_revision(r: &Value, kind: &str) {
    if let Some(x) = r[kind].as_object() {
        let field = |k: &str| x[k].as_str().unwrap_or("");
        println!(
            "  {kind} {} \"{}\" ({})",
            field("revid"),
            field("name"),
            field("status")
        );
    }
}

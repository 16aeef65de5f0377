//! Documents as a producer inside this crate sees them: add one (with its `auto_create` job, in
//! one transaction), the report of its auto-create, and the sample documents bundled with the
//! binary. The CLI, the HTTP API and `agentd eval` all use these.

use crate::app::App;
use crate::jobs::auto_create::upload_job;
use crate::jobs::start::StartIds;
use crate::kinds::{self, JobKind};
use crate::queue;
use crate::store::extractions::ExtractionRow;
use crate::store::{auto_create, documents, prompts, runs, schemas, sql};
use serde_json::{Value, json};
use uuid::Uuid;

/// The sample documents shipped in `samples/` (compiled in so the binary runs anywhere).
pub const SAMPLES: [(&str, &str); 4] = [
    ("invoice.txt", include_str!("../../../samples/invoice.txt")),
    ("receipt.txt", include_str!("../../../samples/receipt.txt")),
    (
        "purchase_order.txt",
        include_str!("../../../samples/purchase_order.txt"),
    ),
    (
        "lab_report.txt",
        include_str!("../../../samples/lab_report.txt"),
    ),
];

/// Inserts a document and, if asked, its auto-create job, in one transaction.
pub async fn add_document(
    app: &App,
    org_id: Uuid,
    name: &str,
    text: &str,
    auto: bool,
) -> anyhow::Result<(Uuid, Option<i64>)> {
    let now = app.clock.now();
    let mut tx = app.pool.begin().await?;
    let id = documents::insert(&mut tx, org_id, name, Some(text), &json!({}), now).await?;
    let mut job = None;
    if auto {
        job =
            enqueue_auto_create(&mut tx, app, org_id, id, &StartIds::default(), None, now).await?;
    }
    tx.commit().await?;
    Ok((id, job))
}

/// Enqueues the auto-create of new document `id` in the caller's transaction (starting from
/// `ids`, checked by the caller) and marks it `queued`.
pub async fn enqueue_auto_create(
    tx: &mut sqlx::PgConnection,
    app: &App,
    org_id: Uuid,
    id: Uuid,
    ids: &StartIds,
    traceparent: Option<String>,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Option<i64>, queue::QueueError> {
    let q = &app.spec(kinds::AutoCreate::NAME).queue;
    let job = upload_job(org_id, id, ids, q).traceparent(traceparent);
    let job = queue::enqueue(&mut *tx, &job).await?;
    auto_create::set_status(
        &mut *tx,
        org_id,
        id,
        documents::AutoCreateStatus::Queued,
        None,
        None,
        now,
    )
    .await?;
    Ok(job)
}

/// Everything about a document's auto-create, as JSON.
pub async fn document_report(app: &App, id: Uuid) -> anyhow::Result<Option<Value>> {
    let mut conn = app.pool.acquire().await?;
    let Some(st) = auto_create::state(&mut *conn, None, id).await? else {
        return Ok(None);
    };
    let org = st.org_id;
    let schema = match st.proposed.schema() {
        Some((s, v)) => schemas::get(&mut conn, org, s, v).await?,
        None => None,
    };
    let prompt = match st.proposed.prompt() {
        Some((p, v)) => prompts::get(&mut conn, org, p, v).await?,
        None => None,
    };
    let extraction = match st.proposed.proposed_extraction_id {
        Some(e) => sql::by_id::<ExtractionRow>(&mut conn, org, e, false).await?,
        None => None,
    };
    let run = match st.auto_create_run_id {
        Some(r) => runs::get_run(&mut *conn, r).await?,
        None => None,
    };
    // What the run's schema calls left out: names made of the document's words (migration 0099).
    let dropped = match st.auto_create_run_id {
        Some(r) => auto_create::dropped_fields(&mut *conn, r).await?,
        None => json!([]),
    };
    // What the proposal left out as no key field (migration 0113): the reviewer can add one.
    let also_found: Vec<Value> = match st.auto_create_run_id {
        Some(r) => auto_create::also_found(&mut *conn, r).await?,
        None => json!([]),
    }
    .as_array()
    .map(|a| {
        a.iter()
            .map(|f| {
                json!({"name": f["name"], "label": f["label"], "reason": f["reason"],
                            "why": f["why"], "line": f["line"], "type": f["schema"]["type"]})
            })
            .collect()
    })
    .unwrap_or_default();
    let fields: Vec<Value> = schema
        .as_ref()
        .and_then(|s| {
            s.response_format["json_schema"]["schema"]["properties"]
                .as_object()
                .cloned()
        })
        .map(|props| {
            props
                .iter()
                .map(
                    |(k, v)| json!({"name": k, "type": v["type"], "description": v["description"]}),
                )
                .collect()
        })
        .unwrap_or_default();
    Ok(Some(json!({
        "document_id": st.id, "org_id": st.org_id, "name": st.name,
        "auto_create_status": st.auto_create_status, "error": st.auto_create_error,
        "schema": schema.as_ref().map(|s| json!({"revid": format!("{}:{}", s.schema_id, s.version), "name": s.name, "status": s.status})),
        "fields": fields,
        "dropped_fields": dropped,
        "also_found": also_found,
        "prompt": prompt.as_ref().map(|p| json!({"revid": format!("{}:{}", p.prompt_id, p.version), "name": p.fields.name, "status": p.status, "content": p.fields.content})),
        "extraction": extraction.as_ref().map(|e| json!({"id": e.id, "status": e.status, "result": e.result, "ungrounded": e.ungrounded})),
        "run": run.as_ref().map(|r| {
            let c = runs::CountersView::from(r.counters);
            json!({"id": r.id, "provider": r.provider, "model": r.model, "status": r.status, "stop_reason": r.stop_reason,
            "rounds": r.counters.rounds, "tool_calls": r.counters.tool_calls, "tokens": r.counters.tokens(),
            "input_tokens": c.input_tokens, "output_tokens": c.output_tokens,
            "cache_read_tokens": c.cache_read_tokens, "cache_write_tokens": c.cache_write_tokens,
            "cost_usd": c.cost_usd, "cost_note": c.cost_note,
            "seconds": r.finished_at.map(|f| (f - r.started_at).num_milliseconds() as f64 / 1000.0)})
        }),
    })))
}

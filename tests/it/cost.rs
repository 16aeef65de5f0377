//! What a run costs in money (issue 46, item 6): a document proposed through a provider whose
//! answers report tokens (cache reads among them) under a dated model name costs, on the run,
//! the document's report and the org's month of `GET /v1/usage`, what its tokens cost at the
//! price table (`llm.prices`) — computed here from the table, not from agentd's own function —
//! and a model without a price shows no cost and says why, never a guess. Real PostgreSQL, real
//! HTTP; the model is the offline provider with its usage replaced.

use crate::api_support::Api;
use crate::common;
use agentd::api::Role;
use agentd::llm::offline::OfflineProvider;
use agentd::llm::{CompletionRequest, CompletionResponse, LlmError, LlmProvider, Usage};
use chrono::Duration;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The offline provider, each answer reporting `usage` and answering as `model`; counts calls.
struct Reports {
    inner: OfflineProvider,
    model: String,
    usage: Usage,
    calls: AtomicUsize,
}

#[async_trait::async_trait]
impl LlmProvider for Reports {
    fn name(&self) -> &str {
        "reports-usage"
    }
    async fn complete(&self, req: CompletionRequest) -> Result<CompletionResponse, LlmError> {
        let mut r = self.inner.complete(req).await?;
        self.calls.fetch_add(1, Ordering::SeqCst);
        r.usage = self.usage;
        r.model = self.model.clone();
        Ok(r)
    }
}

const IN: u64 = 12_000;
const CACHED: u64 = 4_000;
const OUT: u64 = 3_000;

/// Uploads one sample with auto-create and waits for it to be proposed by a worker on
/// `provider`; the document's report.
async fn propose(api: &Api, key: &str, provider: Arc<Reports>) -> Value {
    let (name, text) = agentd::documents::SAMPLES[0];
    let r = api
        .call(
            "POST",
            "/v1/documents",
            Some(key),
            Some(json!({"name": name, "text": text, "auto_create": true})),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let id = r.body["id"].as_str().unwrap().to_string();
    api.clock.advance(Duration::seconds(60));
    let mut app = api.app.clone();
    app.provider = provider;
    let (w, stop) = common::start_worker(&app, "auto_create", None).await;
    let url = format!("/v1/documents/{id}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let doc = loop {
        let d = api.call("GET", &url, Some(key), None).await.body;
        assert_ne!(d["auto_create_status"], "failed", "{d}");
        if d["auto_create_status"] == "proposed" {
            break d;
        }
        assert!(std::time::Instant::now() < deadline, "not proposed: {d}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    stop.cancel();
    w.join().await;
    doc
}

fn usd(v: &Value) -> f64 {
    v.as_f64()
        .unwrap_or_else(|| panic!("not a dollar figure: {v}"))
}

#[tokio::test]
async fn a_runs_cost_is_its_tokens_times_the_price_table_on_the_run_the_report_and_the_usage() {
    let api = Api::start().await;
    let (_, key) = api.org("acme", Role::Admin).await;
    let provider = Arc::new(Reports {
        inner: OfflineProvider::default(),
        // A dated snapshot name takes its model's price.
        model: "gpt-4o-mini-2024-07-18".into(),
        usage: Usage {
            input_tokens: IN,
            output_tokens: OUT,
            cache_read_tokens: CACHED,
            cache_write_tokens: 0,
        },
        calls: AtomicUsize::new(0),
    });
    let doc = propose(&api, &key, provider.clone()).await;
    let n = provider.calls.load(Ordering::SeqCst) as u64;
    assert!(n >= 1);
    let calls = n as f64;

    // cents per million tokens → dollars: uncached input, cached input and output at their prices.
    let p = api.app.config.llm.prices["gpt-4o-mini"];
    let cached = p.cached_input_cents_per_mtok.expect("a cached price");
    let per_call = ((IN - CACHED) as f64 * p.input_cents_per_mtok
        + CACHED as f64 * cached
        + OUT as f64 * p.output_cents_per_mtok)
        / 1e6
        / 100.0;
    let expected = per_call * calls;
    let close = |got: f64, what: &str| {
        assert!(
            (got - expected).abs() < 1e-6,
            "{what}: {got} $ for {calls} calls, expected {expected} $"
        )
    };

    close(usd(&doc["run"]["cost_usd"]), "the document's report");
    let run = doc["run"]["id"].as_str().expect("the run").to_string();
    let r = api
        .call("GET", &format!("/v1/runs/{run}"), Some(&key), None)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let rr = &r.body["run"];
    close(usd(&rr["cost_usd"]), "the run");
    assert_eq!(rr["cache_read_tokens"], json!(CACHED * n));
    assert_eq!(rr["cost_note"], Value::Null);

    let u = api.call("GET", "/v1/usage", Some(&key), None).await;
    assert_eq!(u.status, 200, "{}", u.body);
    close(usd(&u.body["cost_usd"]), "the org's usage");
    assert_eq!(u.body["runs"], 1);
    assert_eq!(u.body["tokens"], json!((IN + OUT) * n));

    // A model with no price: the run's cost is not known (null and why), the month's too, and
    // what was priced stays a lower bound.
    let unpriced = Arc::new(Reports {
        inner: OfflineProvider::default(),
        model: "a-model-without-a-price".into(),
        usage: provider.usage,
        calls: AtomicUsize::new(0),
    });
    let other = Api::start_with(|c| c.llm.model = "a-model-without-a-price".into()).await;
    let (_, k2) = other.org("beta", Role::Admin).await;
    let d2 = propose(&other, &k2, unpriced).await;
    assert_eq!(d2["run"]["cost_usd"], Value::Null, "{}", d2["run"]);
    let note = d2["run"]["cost_note"].as_str().unwrap_or_default();
    assert!(note.contains("price"), "{note}");
    let u2 = other.call("GET", "/v1/usage", Some(&k2), None).await.body;
    assert_eq!(u2["cost_usd"], Value::Null, "{u2}");
    assert_eq!(u2["priced_cost_usd"], json!(0.0), "{u2}");
}

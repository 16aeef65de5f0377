//! OpenTelemetry traces (issue 31, item 3) against a real OTLP/HTTP receiver: a small HTTP
//! server on a real port that decodes each `ExportTraceServiceRequest` (protobuf), and
//! `agentd serve` and `agentd worker` as real processes exporting to it (the offline provider
//! is the model). One trace runs from the caller's `traceparent` through the API request, the
//! job, the run, its rounds and tools down to each provider call, with the GenAI attributes on
//! the calls and no document text or personal value in any attribute; a second attempt of the
//! job is a trace of its own, linked to the first.

use crate::common;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use common::{TestDb, wait_until};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

/// A span as received, with its process's `service.name`.
#[derive(Debug, Clone)]
struct Got {
    service: String,
    /// The process's resource attributes that are strings.
    resource: HashMap<String, String>,
    trace: String,
    id: String,
    parent: String,
    name: String,
    kind: i32,
    attrs: HashMap<String, AnyValue>,
    links: Vec<(String, String)>,
    /// Every string anywhere in the span: attributes, event attributes, link attributes, the
    /// resource's attributes, its name.
    strings: Vec<String>,
}

impl Got {
    fn str(&self, key: &str) -> Option<&str> {
        match self.attrs.get(key)?.value.as_ref()? {
            any_value::Value::StringValue(s) => Some(s),
            _ => None,
        }
    }

    fn int(&self, key: &str) -> Option<i64> {
        match self.attrs.get(key)?.value.as_ref()? {
            any_value::Value::IntValue(i) => Some(*i),
            _ => None,
        }
    }
}

fn strings_of(v: &AnyValue, out: &mut Vec<String>) {
    match v.value.as_ref() {
        Some(any_value::Value::StringValue(s)) => out.push(s.clone()),
        Some(any_value::Value::ArrayValue(a)) => a.values.iter().for_each(|v| strings_of(v, out)),
        Some(any_value::Value::KvlistValue(l)) => kv_strings(&l.values, out),
        Some(any_value::Value::BytesValue(b)) => out.push(String::from_utf8_lossy(b).into()),
        _ => {}
    }
}

fn kv_strings(kvs: &[KeyValue], out: &mut Vec<String>) {
    for kv in kvs {
        out.push(kv.key.clone());
        if let Some(v) = &kv.value {
            strings_of(v, out);
        }
    }
}

/// The receiver: every span of every export it was sent.
#[derive(Clone, Default)]
struct Receiver(Arc<Mutex<Vec<Got>>>);

async fn export(
    State(r): State<Receiver>,
    body: Bytes,
) -> ([(&'static str, &'static str); 1], Vec<u8>) {
    let req = ExportTraceServiceRequest::decode(body).expect("an ExportTraceServiceRequest");
    let mut got = r.0.lock().unwrap();
    for rs in req.resource_spans {
        let resource = rs.resource.map(|r| r.attributes).unwrap_or_default();
        let texts: HashMap<String, String> = resource
            .iter()
            .filter_map(|kv| match kv.value.as_ref()?.value.as_ref()? {
                any_value::Value::StringValue(s) => Some((kv.key.clone(), s.clone())),
                _ => None,
            })
            .collect();
        let service = texts.get("service.name").cloned().unwrap_or_default();
        for span in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
            let mut strings = vec![span.name.clone()];
            kv_strings(&resource, &mut strings);
            kv_strings(&span.attributes, &mut strings);
            for e in &span.events {
                strings.push(e.name.clone());
                kv_strings(&e.attributes, &mut strings);
            }
            for l in &span.links {
                kv_strings(&l.attributes, &mut strings);
            }
            got.push(Got {
                service: service.clone(),
                resource: texts.clone(),
                trace: hex::encode(&span.trace_id),
                id: hex::encode(&span.span_id),
                parent: hex::encode(&span.parent_span_id),
                name: span.name,
                kind: span.kind,
                attrs: span
                    .attributes
                    .into_iter()
                    .filter_map(|kv| Some((kv.key, kv.value?)))
                    .collect(),
                links: span
                    .links
                    .iter()
                    .map(|l| (hex::encode(&l.trace_id), hex::encode(&l.span_id)))
                    .collect(),
                strings,
            });
        }
    }
    let answer = ExportTraceServiceResponse::default().encode_to_vec();
    ([("content-type", "application/x-protobuf")], answer)
}

impl Receiver {
    /// Listens on a real port; returns the receiver and the endpoint to configure.
    async fn start() -> (Receiver, String) {
        let r = Receiver::default();
        let app = axum::Router::new()
            .route("/v1/traces", post(export))
            .with_state(r.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (r, format!("http://{addr}"))
    }

    fn spans(&self) -> Vec<Got> {
        self.0.lock().unwrap().clone()
    }
}

/// A running `agentd` process, stopped with SIGTERM (so it flushes its spans) on [`stop`].
struct Agentd {
    child: Child,
    /// The address `agentd serve` prints.
    listening: std::sync::mpsc::Receiver<String>,
    /// Its stderr so far (read all along: a full pipe would block its logging).
    log: Arc<Mutex<String>>,
}

impl Agentd {
    fn spawn(
        db: &TestDb,
        endpoint: &str,
        service: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentd"));
        cmd.args(args)
            .env("DATABASE_URL", &db.url)
            .env("AGENTD_HTTP__ADDR", "")
            .env("OPENAI_API_KEY", "")
            .env_remove("OPENAI_BASE_URL")
            .env("AGENTD_LLM__PROVIDER", "offline")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
            .env("OTEL_SERVICE_NAME", service)
            .env(
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment.name=test",
            )
            .stderr(Stdio::piped())
            .stdout(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, listening) = std::sync::mpsc::channel::<String>();
        let log = Arc::new(Mutex::new(String::new()));
        let all = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_string());
                }
                let mut all = all.lock().unwrap();
                all.push_str(&line);
                all.push('\n');
            }
        });
        Agentd {
            child,
            listening,
            log,
        }
    }

    /// The address `agentd serve` prints.
    fn address(&mut self) -> String {
        self.listening
            .recv_timeout(std::time::Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("serve prints its address: {}", self.log.lock().unwrap()))
    }

    /// SIGTERM; asserts a clean exit (after the process's last export).
    fn stop(mut self) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}: {}", self.log.lock().unwrap());
    }
}

impl Drop for Agentd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn admin_key(db: &TestDb) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_agentd"))
        .args(["orgs", "create", "acme", "--json"])
        .env("DATABASE_URL", &db.url)
        .env("AGENTD_HTTP__ADDR", "")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let org: Value = serde_json::from_slice(&o.stdout).unwrap();
    org["key"].as_str().unwrap().to_string()
}

/// The caller's trace and span: what a producer's own tracing would send.
const CALLER_TRACE: &str = "5b8efff798038103d269b633813fc60c";
const CALLER_SPAN: &str = "eee19b7ec3c1b174";

/// Text that must never leave in a span: the document's own words and a personal value.
const SECRET_WORD: &str = "QUOKKA-ZEBRA-7731";
const SECRET_EMAIL: &str = "maria.keller@example.com";

fn document() -> Value {
    json!({
        "name": "invoice-7.txt",
        "text": format!(
            "Invoice Number: INV-2291\nCustomer reference: {SECRET_WORD}\nContact: {SECRET_EMAIL}\n\
             Invoice Date: 2026-03-04\nTotal: 1,250.00 EUR\n"
        ),
        "auto_create": true,
    })
}

/// Uploads the document with the caller's `traceparent`; returns the job's id.
async fn upload(base: &str, key: &str) -> i64 {
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/documents"))
        .bearer_auth(key)
        .header("traceparent", format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01"))
        .json(&document())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let body: Value = r.json().await.unwrap();
    body["job_id"].as_i64().expect("an auto_create job")
}

async fn status(db: &TestDb) -> String {
    sqlx::query_scalar("SELECT auto_create_status FROM documents")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

fn one<'a>(spans: &'a [Got], what: &str, f: impl Fn(&&Got) -> bool) -> &'a Got {
    let found: Vec<&Got> = spans.iter().filter(f).collect();
    let all: Vec<(&str, &str, &str, &str)> = spans
        .iter()
        .map(|s| {
            (
                s.service.as_str(),
                s.name.as_str(),
                s.trace.as_str(),
                s.parent.as_str(),
            )
        })
        .collect();
    assert_eq!(found.len(), 1, "one {what}, got {found:#?} among {all:#?}");
    found[0]
}

/// No span, event, link or resource holds the document's text or its personal value.
fn assert_no_document_text(spans: &[Got]) {
    for s in spans {
        for text in &s.strings {
            assert!(
                !text.contains(SECRET_WORD)
                    && !text.contains(SECRET_EMAIL)
                    && !text.contains("INV-2291"),
                "span {} carries document text: {text:?}",
                s.name
            );
        }
    }
}

/// Checks the run under `job`: `agent.run` → `agent.round` → (`tool` →) the provider calls,
/// with the GenAI attributes. Returns the provider-call spans.
fn assert_run_under(spans: &[Got], job: &Got) -> Vec<Got> {
    let same: Vec<Got> = spans
        .iter()
        .filter(|s| s.trace == job.trace)
        .cloned()
        .collect();
    let run = one(&same, "agent.run", |s| s.name == "agent.run");
    assert_eq!(run.parent, job.id, "agent.run under job");
    let rounds: Vec<&Got> = same.iter().filter(|s| s.name == "agent.round").collect();
    assert!(!rounds.is_empty(), "rounds: {same:#?}");
    for r in &rounds {
        assert_eq!(r.parent, run.id, "every round under agent.run");
    }
    let round_ids: Vec<&str> = rounds.iter().map(|r| r.id.as_str()).collect();
    let tools: Vec<&Got> = same.iter().filter(|s| s.name == "tool").collect();
    assert!(!tools.is_empty(), "the run called tools");
    for t in &tools {
        assert!(
            round_ids.contains(&t.parent.as_str()),
            "tool {:?} under a round",
            t.str("name")
        );
    }
    let calls: Vec<Got> = same
        .iter()
        .filter(|s| s.str("gen_ai.operation.name") == Some("chat"))
        .cloned()
        .collect();
    assert!(!calls.is_empty(), "provider calls");
    let tool_ids: Vec<&str> = tools.iter().map(|t| t.id.as_str()).collect();
    for c in &calls {
        assert!(
            round_ids.contains(&c.parent.as_str()) || tool_ids.contains(&c.parent.as_str()),
            "a provider call under a round or a tool: {c:#?}"
        );
        assert_eq!(c.kind, SpanKind::Client as i32);
        assert_eq!(c.str("gen_ai.provider.name"), Some("offline"));
        assert_eq!(c.str("gen_ai.system"), Some("offline"));
        let model = c.str("gen_ai.request.model").expect("gen_ai.request.model");
        assert!(!model.is_empty());
        assert_eq!(c.name, format!("chat {model}"));
        assert!(c.int("gen_ai.usage.input_tokens").unwrap() > 0, "{c:#?}");
        assert!(c.int("gen_ai.usage.output_tokens").unwrap() > 0, "{c:#?}");
        let reasons = match c.attrs["gen_ai.response.finish_reasons"].value.as_ref() {
            Some(any_value::Value::ArrayValue(a)) => a
                .values
                .iter()
                .map(|v| match v.value.as_ref() {
                    Some(any_value::Value::StringValue(s)) => s.clone(),
                    other => panic!("a finish reason is a string: {other:?}"),
                })
                .collect::<Vec<_>>(),
            other => panic!("finish reasons are a string array: {other:?}"),
        };
        assert_eq!(reasons.len(), 1);
        assert!(["stop", "tool_calls", "length", "other"].contains(&reasons[0].as_str()));
    }
    assert!(
        calls.iter().any(|c| tool_ids.contains(&c.parent.as_str())),
        "run_extraction's model call runs under its tool: {calls:#?}"
    );
    calls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_runs_from_the_callers_traceparent_to_every_provider_call() {
    let db = TestDb::new().await;
    let (receiver, endpoint) = Receiver::start().await;
    let key = admin_key(&db);
    let mut serve = Agentd::spawn(
        &db,
        &endpoint,
        "agentd-api",
        &["serve", "--addr", "127.0.0.1:0"],
        &[],
    );
    let base = format!("http://{}", serve.address());
    let job_id = upload(&base, &key).await;
    let worker = Agentd::spawn(
        &db,
        &endpoint,
        "agentd-worker",
        &["worker", "--no-cron"],
        &[],
    );
    wait_until(90, "the document is proposed", || async {
        status(&db).await == "proposed"
    })
    .await;
    // Both flush on the way out: everything is at the receiver once they exited.
    worker.stop();
    serve.stop();

    let spans = receiver.spans();
    assert_no_document_text(&spans);
    let ours: Vec<Got> = spans
        .iter()
        .filter(|s| s.trace == CALLER_TRACE)
        .cloned()
        .collect();
    let request = one(&ours, "API request span", |s| {
        s.name == "POST /v1/documents"
    });
    assert_eq!(
        request.parent, CALLER_SPAN,
        "the request continues the caller's span"
    );
    assert_eq!(request.kind, SpanKind::Server as i32);
    assert_eq!(request.service, "agentd-api");
    assert_eq!(request.str("http.route"), Some("/v1/documents"));
    assert_eq!(request.int("http.response.status_code"), Some(201));
    let job = one(&ours, "job span", |s| s.name == "job");
    assert_eq!(
        job.parent, request.id,
        "the job continues the request that enqueued it"
    );
    assert_eq!(job.service, "agentd-worker");
    assert_eq!(job.int("id"), Some(job_id));
    assert_eq!(job.int("attempt"), Some(1));
    assert!(job.links.is_empty());
    let calls = assert_run_under(&spans, job);
    // Every span of the worker's run is in the caller's trace.
    for s in spans.iter().filter(|s| s.service == "agentd-worker") {
        assert_eq!(s.trace, CALLER_TRACE, "{} in another trace", s.name);
    }
    for s in &spans {
        assert_eq!(
            s.resource
                .get("deployment.environment.name")
                .map(String::as_str),
            Some("test"),
            "OTEL_RESOURCE_ATTRIBUTES on every span's resource"
        );
    }
    // The run's provider calls are the calls the database charged.
    let (runs_tokens,): (i64,) =
        sqlx::query_as("SELECT (input_tokens + output_tokens)::int8 FROM agent_runs")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let traced: i64 = calls
        .iter()
        .map(|c| {
            c.int("gen_ai.usage.input_tokens").unwrap()
                + c.int("gen_ai.usage.output_tokens").unwrap()
        })
        .sum();
    assert_eq!(
        traced, runs_tokens,
        "the spans' usage is what the run was charged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_attempt_is_a_new_trace_linked_to_the_first() {
    let db = TestDb::new().await;
    let (receiver, endpoint) = Receiver::start().await;
    let key = admin_key(&db);
    let mut serve = Agentd::spawn(
        &db,
        &endpoint,
        "agentd-api",
        &["serve", "--addr", "127.0.0.1:0"],
        &[],
    );
    let base = format!("http://{}", serve.address());
    let job_id = upload(&base, &key).await;
    serve.stop();
    // The first worker's model never answers in time: at SIGTERM its grace period (1 s) ends
    // and the job is released, to be claimed again as attempt 2.
    let slow = Agentd::spawn(
        &db,
        &endpoint,
        "agentd-worker",
        &["worker", "--no-cron"],
        &[
            ("AGENTD_LLM__OFFLINE_LATENCY_MS", "600000"),
            ("AGENTD_WORKER__SHUTDOWN_GRACE_SECS", "1"),
        ],
    );
    wait_until(60, "the first attempt's run started", || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM agent_runs")
            .fetch_one(&db.pool)
            .await
            .unwrap()
            == 1
    })
    .await;
    slow.stop();
    let worker = Agentd::spawn(
        &db,
        &endpoint,
        "agentd-worker",
        &["worker", "--no-cron"],
        &[],
    );
    wait_until(90, "the document is proposed", || async {
        status(&db).await == "proposed"
    })
    .await;
    worker.stop();

    let spans = receiver.spans();
    assert_no_document_text(&spans);
    let request = one(&spans, "API request span", |s| {
        s.name == "POST /v1/documents"
    });
    let first = one(&spans, "first attempt", |s| {
        s.name == "job" && s.int("attempt") == Some(1)
    });
    assert_eq!(
        (first.trace.as_str(), first.parent.as_str()),
        (CALLER_TRACE, request.id.as_str())
    );
    let second = one(&spans, "second attempt", |s| {
        s.name == "job" && s.int("attempt") == Some(2)
    });
    assert_eq!(second.int("id"), Some(job_id));
    assert_ne!(second.trace, CALLER_TRACE, "a retry is a trace of its own");
    assert_eq!(
        second.parent, "",
        "the retry's job span is its trace's root"
    );
    assert_eq!(
        second.links,
        vec![(CALLER_TRACE.to_string(), request.id.clone())],
        "linked to the context the first attempt continued"
    );
    assert_run_under(&spans, second);
}

/// `otel.protocol = "grpc"` is accepted and a process exports (to a port nobody listens on:
/// the export fails in the background and the command still succeeds); a protocol or endpoint
/// agentd cannot use is exit 2 naming the variable or file and the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_is_accepted_and_bad_settings_are_exit_2() {
    let db = TestDb::new().await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let run = |env: &[(&str, &str)], config: Option<&std::path::Path>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentd"));
        cmd.args(["status", "--json"])
            .env("DATABASE_URL", &db.url)
            .env("AGENTD_HTTP__ADDR", "");
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };
    let endpoint = format!("http://127.0.0.1:{port}");
    let grpc = run(
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ],
        None,
    );
    assert!(
        grpc.status.success(),
        "{}",
        String::from_utf8_lossy(&grpc.stderr)
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agentd.toml");
    std::fs::write(
        &file,
        format!("[otel]\nendpoint = \"{endpoint}\"\nprotocol = \"grpc\"\n"),
    )
    .unwrap();
    let from_file = run(&[], Some(&file));
    assert!(
        from_file.status.success(),
        "{}",
        String::from_utf8_lossy(&from_file.stderr)
    );

    let json = run(
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ],
        None,
    );
    assert_eq!(json.status.code(), Some(2));
    let said = String::from_utf8_lossy(&json.stderr);
    assert!(
        said.contains("OTEL_EXPORTER_OTLP_PROTOCOL")
            && said.contains("otel.protocol")
            && said.contains("http/json"),
        "{said}"
    );
    std::fs::write(&file, "[otel]\nendpoint = \"collector:4318\"\n").unwrap();
    let bad = run(&[], Some(&file));
    assert_eq!(bad.status.code(), Some(2));
    let said = String::from_utf8_lossy(&bad.stderr);
    assert!(
        said.contains(file.to_str().unwrap())
            && said.contains("otel.endpoint")
            && said.contains("collector:4318"),
        "{said}"
    );
}

//! An HTTP fake of Anthropic's Messages API (axum on 127.0.0.1:0): `POST /v1/messages` answered
//! by a responder from what each request contains, as one JSON message or, when the request
//! says `"stream": true`, as the SSE events the real API sends for that message
//! (`message_start`, `ping`, `content_block_start` / `_delta` / `_stop` with `text_delta` and
//! `input_json_delta` fragments, `message_delta` with the stop reason and usage,
//! `message_stop`). Every request is recorded with its headers.

#![allow(dead_code)]

use agentd::llm::anthropic::{AnthropicProvider, AnthropicSettings};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const KEY: &str = "sk-ant-test-SECRETKEY-0123456789";

/// One answer of the fake.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A complete message; sent as SSE events when the request streams.
    Message(Value),
    /// Any status, headers and body as given.
    Raw {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// SSE events `(event, data)` as given, whatever the request asked (cut streams, errors).
    Events(Vec<(String, Value)>),
    /// The reply after a delay (timeouts).
    Delayed(Duration, Box<Reply>),
}

impl Reply {
    /// An Anthropic error answer (`{"type": "error", "error": {...}}`).
    pub fn error(status: u16, kind: &str, message: &str) -> Self {
        Reply::Raw {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: json!({"type": "error", "error": {"type": kind, "message": message},
                         "request_id": "req_fake"})
            .to_string(),
        }
    }

    /// The same reply with one more header.
    pub fn header(self, name: &str, value: &str) -> Self {
        match self {
            Reply::Raw {
                status,
                mut headers,
                body,
            } => {
                headers.push((name.into(), value.into()));
                Reply::Raw {
                    status,
                    headers,
                    body,
                }
            }
            other => other,
        }
    }
}

/// What the fake saw of one request.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub api_key: Option<String>,
    pub version: Option<String>,
    pub body: Value,
}

pub type Responder = Arc<dyn Fn(&Value, usize) -> Reply + Send + Sync>;

#[derive(Clone)]
struct FakeState {
    respond: Responder,
    seen: Arc<Mutex<Vec<Seen>>>,
}

pub struct AnthropicFake {
    /// The host, as ANTHROPIC_BASE_URL would be set.
    pub base_url: String,
    state: FakeState,
}

impl AnthropicFake {
    /// A fake answering with `respond(request body, request number)`.
    pub async fn start(respond: Responder) -> Self {
        let state = FakeState {
            respond,
            seen: Arc::default(),
        };
        let app = axum::Router::new()
            .fallback(serve)
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        AnthropicFake {
            base_url: format!("http://{addr}"),
            state,
        }
    }

    /// A fake answering `replies` in order (then a 500 saying the script ran out).
    pub async fn scripted(replies: Vec<Reply>) -> Self {
        let queue = Arc::new(Mutex::new(VecDeque::from(replies)));
        Self::start(Arc::new(move |_, _| {
            queue
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| Reply::error(500, "api_error", "fake: no scripted reply left"))
        }))
        .await
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    pub fn settings(&self, stream: bool, max_retries: u32, timeout: Duration) -> AnthropicSettings {
        AnthropicSettings {
            base_url: self.base_url.clone(),
            api_key: KEY.into(),
            timeout,
            max_retries,
            stream,
            max_stream_bytes: 4 << 20,
            max_response_bytes: 32 << 20,
        }
    }

    pub fn provider(&self, stream: bool, max_retries: u32, timeout: Duration) -> AnthropicProvider {
        AnthropicProvider::new(self.settings(stream, max_retries, timeout))
    }
}

async fn serve(
    State(state): State<FakeState>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let header = |k: &str| headers.get(k).map(|v| v.to_str().unwrap().to_string());
    let n = {
        let mut seen = state.seen.lock().unwrap();
        seen.push(Seen {
            path: uri.path().to_string(),
            api_key: header("x-api-key"),
            version: header("anthropic-version"),
            body: body.clone(),
        });
        seen.len() - 1
    };
    let stream = body["stream"] == true;
    let mut reply = (state.respond)(&body, n);
    loop {
        match reply {
            Reply::Delayed(d, inner) => {
                tokio::time::sleep(d).await;
                reply = *inner;
            }
            Reply::Message(m) if stream => return sse(&events_of(&m)),
            Reply::Message(m) => {
                return Response::builder()
                    .status(200)
                    .header("content-type", "application/json")
                    .body(Body::from(m.to_string()))
                    .unwrap();
            }
            Reply::Events(events) => return sse(&events),
            Reply::Raw {
                status,
                headers,
                body,
            } => {
                let mut r = Response::builder().status(status);
                for (k, v) in headers {
                    r = r.header(k, v);
                }
                return r.body(Body::from(body)).unwrap();
            }
        }
    }
}

/// An SSE response of `events`.
pub fn sse(events: &[(String, Value)]) -> Response {
    let body: String = events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect();
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .body(Body::from(body))
        .unwrap()
}

/// A message as the API answers it; `usage` left out when `None` (a server that omits it).
pub fn message(content: Value, stop_reason: &str, usage: Option<Value>) -> Value {
    let mut m = json!({"id": "msg_fake", "type": "message", "role": "assistant",
        "model": "claude-fake-1", "content": content, "stop_reason": stop_reason,
        "stop_sequence": null});
    if let Some(u) = usage {
        m["usage"] = u;
    }
    m
}

/// Usage as the API reports it.
pub fn usage(input: u64, output: u64, cache_creation: u64, cache_read: u64) -> Value {
    json!({"input_tokens": input, "output_tokens": output,
           "cache_creation_input_tokens": cache_creation, "cache_read_input_tokens": cache_read})
}

pub fn text(t: &str) -> Value {
    json!({"type": "text", "text": t})
}

pub fn tool_use(id: &str, name: &str, input: Value) -> Value {
    json!({"type": "tool_use", "id": id, "name": name, "input": input})
}

/// `s` in `n` pieces at character boundaries.
fn pieces(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    let size = chars.len().div_ceil(n).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// The SSE events the real API sends for `m`: usage split between `message_start` (input and
/// cache) and `message_delta` (output), text in two `text_delta`s, tool input in three
/// `input_json_delta` fragments after a `content_block_start` with `input: {}`, a `ping`.
pub fn events_of(m: &Value) -> Vec<(String, Value)> {
    let ev = |name: &str, data: Value| (name.to_string(), data);
    let mut start = m.clone();
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    if let Some(u) = m.get("usage") {
        let mut u = u.clone();
        u["output_tokens"] = json!(1);
        start["usage"] = u;
    }
    let mut out = vec![
        ev(
            "message_start",
            json!({"type": "message_start", "message": start}),
        ),
        ev("ping", json!({"type": "ping"})),
    ];
    for (i, block) in m["content"].as_array().into_iter().flatten().enumerate() {
        match block["type"].as_str() {
            Some("text") => {
                out.push(ev(
                    "content_block_start",
                    json!({"type": "content_block_start",
                    "index": i, "content_block": {"type": "text", "text": ""}}),
                ));
                for p in pieces(block["text"].as_str().unwrap(), 2) {
                    out.push(ev(
                        "content_block_delta",
                        json!({"type": "content_block_delta",
                        "index": i, "delta": {"type": "text_delta", "text": p}}),
                    ));
                }
            }
            Some("tool_use") => {
                out.push(ev(
                    "content_block_start",
                    json!({"type": "content_block_start",
                    "index": i, "content_block": {"type": "tool_use", "id": block["id"],
                    "name": block["name"], "input": {}}}),
                ));
                for p in pieces(&block["input"].to_string(), 3) {
                    out.push(ev(
                        "content_block_delta",
                        json!({"type": "content_block_delta",
                        "index": i, "delta": {"type": "input_json_delta", "partial_json": p}}),
                    ));
                }
            }
            _ => {}
        }
        out.push(ev(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": i}),
        ));
    }
    let mut delta = json!({"type": "message_delta",
        "delta": {"stop_reason": m["stop_reason"], "stop_sequence": null}});
    if let Some(u) = m.get("usage") {
        delta["usage"] = json!({"output_tokens": u["output_tokens"]});
    }
    out.push(ev("message_delta", delta));
    out.push(ev("message_stop", json!({"type": "message_stop"})));
    out
}

/// The text a request's last turn carries (its text blocks and tool results), where the run's
/// working-state block is.
pub fn last_turn_text(body: &Value) -> String {
    let last = body["messages"].as_array().unwrap().last().unwrap();
    match &last["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .map(|b| match b["type"].as_str() {
                Some("text") => b["text"].as_str().unwrap_or_default().to_string(),
                Some("tool_result") => match &b["content"] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                },
                _ => String::new(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Whether a request is an extraction (its one tool forced).
pub fn is_extraction(body: &Value) -> bool {
    body["tool_choice"]["type"] == "tool"
}

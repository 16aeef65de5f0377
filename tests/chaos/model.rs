//! The model server of the chaos suite: an HTTP fake of OpenAI's chat-completions API on a real
//! port. It answers as agentd's offline model would (the request is read back into the neutral
//! form and handed to `OfflineProvider`, so auto_create, extraction and nightly runs get the
//! tool calls they need), streamed as SSE when asked. The fault driver arms it: the next
//! request(s) stall past the lease, get a 429 with `Retry-After`, a 500, or a stream cut after
//! its first chunk.

use agentd::llm::offline::OfflineProvider;
use agentd::llm::{
    Block, CompletionRequest, CompletionResponse, FinishReason, LlmProvider, Message, Role,
    ToolChoice, ToolSpec,
};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::Response;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A misbehaviour of the model server, armed for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Habit {
    /// Answer, but only after this long (past the workers' lease).
    Stall(Duration),
    /// 429 with `Retry-After: 1`.
    RateLimited,
    /// 500 with an error body.
    ServerError,
    /// Send the first chunk of a streamed answer, then drop the connection (a non-streamed
    /// request gets its body cut in the middle).
    CutStream,
}

/// What the server did, for the report.
#[derive(Debug, Default)]
pub struct Served {
    pub requests: AtomicU64,
    pub answered: AtomicU64,
    pub stalled: AtomicU64,
    pub rate_limited: AtomicU64,
    pub server_errors: AtomicU64,
    pub cut: AtomicU64,
}

#[derive(Clone, Default)]
struct FakeState {
    armed: Arc<Mutex<VecDeque<Habit>>>,
    served: Arc<Served>,
}

/// The running fake.
pub struct ModelServer {
    pub base_url: String,
    state: FakeState,
    task: tokio::task::JoinHandle<()>,
}

impl ModelServer {
    pub async fn start() -> anyhow::Result<Self> {
        let state = FakeState::default();
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            base_url: format!("http://{addr}/v1"),
            state,
            task,
        })
    }

    /// The next request behaves as `h` (habits queue up, one request each).
    pub fn arm(&self, h: Habit) {
        self.state
            .armed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(h);
    }

    /// Drops habits not yet used (the settle phase runs without faults).
    pub fn disarm(&self) -> usize {
        let mut a = self.state.armed.lock().unwrap_or_else(|p| p.into_inner());
        let n = a.len();
        a.clear();
        n
    }

    pub fn served(&self) -> &Served {
        &self.state.served
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(State(state): State<FakeState>, body: Bytes) -> Response {
    let served = &state.served;
    served.requests.fetch_add(1, Ordering::Relaxed);
    let habit = state
        .armed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .pop_front();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    match habit {
        Some(Habit::RateLimited) => {
            served.rate_limited.fetch_add(1, Ordering::Relaxed);
            return plain(
                429,
                &[("retry-after", "1")],
                json!({"error": {"message": "chaos: rate limited", "type": "rate_limit_exceeded"}}),
            );
        }
        Some(Habit::ServerError) => {
            served.server_errors.fetch_add(1, Ordering::Relaxed);
            return plain(
                500,
                &[],
                json!({"error": {"message": "chaos: internal error", "type": "server_error"}}),
            );
        }
        Some(Habit::Stall(d)) => {
            served.stalled.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(d).await;
        }
        _ => {}
    }
    let resp = match OfflineProvider::default().complete(neutral(&body)).await {
        Ok(r) => r,
        Err(e) => {
            return plain(
                400,
                &[],
                json!({"error": {"message": format!("chaos fake: {e}")}}),
            );
        }
    };
    let stream = body["stream"].as_bool().unwrap_or(false);
    let cut = habit == Some(Habit::CutStream);
    if cut {
        served.cut.fetch_add(1, Ordering::Relaxed);
    } else {
        served.answered.fetch_add(1, Ordering::Relaxed);
    }
    if stream {
        sse(&resp, cut)
    } else {
        let text = completion(&resp).to_string();
        if cut {
            // Half a body, then the connection ends with an error.
            let half = text.len() / 2;
            let head = Bytes::from(text.into_bytes()).slice(..half);
            let chunks: Vec<Result<Bytes, std::io::Error>> =
                vec![Ok(head), Err(std::io::Error::other("chaos: cut"))];
            return Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .body(Body::from_stream(futures::stream::iter(chunks)))
                .unwrap_or_default();
        }
        Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .body(Body::from(text))
            .unwrap_or_default()
    }
}

fn plain(status: u16, headers: &[(&str, &str)], body: Value) -> Response {
    let mut r = Response::builder()
        .status(status)
        .header("content-type", "application/json");
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    r.body(Body::from(body.to_string())).unwrap_or_default()
}

/// The OpenAI request `body` in agentd's neutral form (what `llm/openai/request.rs` wrote,
/// read back).
fn neutral(body: &Value) -> CompletionRequest {
    let text_of = |v: &Value| -> String {
        match v {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join(""),
            _ => String::new(),
        }
    };
    let mut messages = Vec::new();
    for m in body["messages"].as_array().into_iter().flatten() {
        let text = text_of(&m["content"]);
        let msg = match m["role"].as_str().unwrap_or("user") {
            "system" => Message {
                role: Role::System,
                content: vec![Block::Text { text }],
            },
            "assistant" => {
                let mut content = Vec::new();
                if !text.is_empty() {
                    content.push(Block::Text { text });
                }
                for c in m["tool_calls"].as_array().into_iter().flatten() {
                    content.push(Block::ToolUse {
                        id: c["id"].as_str().unwrap_or_default().to_string(),
                        name: c["function"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                        arguments: c["function"]["arguments"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                    });
                }
                Message {
                    role: Role::Assistant,
                    content,
                }
            }
            "tool" => {
                let (is_error, content) = match text.strip_prefix("ERROR: ") {
                    Some(rest) => (true, rest.to_string()),
                    None => (false, text),
                };
                Message {
                    role: Role::Tool,
                    content: vec![Block::ToolResult {
                        call_id: m["tool_call_id"].as_str().unwrap_or_default().to_string(),
                        content,
                        is_error,
                    }],
                }
            }
            _ => Message {
                role: Role::User,
                content: vec![Block::Text { text }],
            },
        };
        messages.push(msg);
    }
    let tools = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| ToolSpec {
            name: t["function"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            description: t["function"]["description"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            parameters: t["function"]["parameters"].clone(),
            strict: false,
        })
        .collect();
    let tool_choice = match body["tool_choice"].as_str() {
        Some("none") => ToolChoice::None,
        Some("required") => ToolChoice::Required,
        _ => ToolChoice::Auto,
    };
    CompletionRequest {
        model: body["model"].as_str().unwrap_or_default().to_string(),
        messages,
        tools,
        tool_choice,
        max_tokens: None,
        response_format: body.get("response_format").cloned(),
    }
}

fn tool_calls(resp: &CompletionResponse) -> Vec<Value> {
    resp.message
        .content
        .iter()
        .filter_map(|b| match b {
            Block::ToolUse {
                id,
                name,
                arguments,
            } => Some((id, name, arguments)),
            _ => None,
        })
        .enumerate()
        .map(|(i, (id, name, arguments))| {
            json!({"index": i, "id": if id.is_empty() { format!("call_{i}") } else { id.clone() },
                   "type": "function", "function": {"name": name, "arguments": arguments}})
        })
        .collect()
}

fn text(resp: &CompletionResponse) -> String {
    resp.message
        .content
        .iter()
        .filter_map(|b| match b {
            Block::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn finish(resp: &CompletionResponse) -> &'static str {
    match resp.finish {
        FinishReason::ToolUse => "tool_calls",
        FinishReason::MaxTokens => "length",
        _ => "stop",
    }
}

fn usage(resp: &CompletionResponse) -> Value {
    let (p, c) = (resp.usage.input_tokens, resp.usage.output_tokens);
    json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c})
}

fn completion(resp: &CompletionResponse) -> Value {
    let calls = tool_calls(resp);
    let mut message = json!({"role": "assistant", "content": text(resp)});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    json!({"id": "chatcmpl-chaos", "object": "chat.completion", "created": 1, "model": "chaos-model",
           "choices": [{"index": 0, "message": message, "finish_reason": finish(resp)}],
           "usage": usage(resp)})
}

fn sse(resp: &CompletionResponse, cut: bool) -> Response {
    let chunk = |delta: Value, finish: Option<&str>| -> String {
        let c = json!({"id": "chatcmpl-chaos", "object": "chat.completion.chunk", "created": 1,
                       "model": "chaos-model",
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {c}\n\n")
    };
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": text(resp)}),
        None,
    )];
    let calls = tool_calls(resp);
    if !calls.is_empty() {
        events.push(chunk(json!({"tool_calls": calls}), None));
    }
    events.push(chunk(json!({}), Some(finish(resp))));
    let u = json!({"id": "chatcmpl-chaos", "object": "chat.completion.chunk", "created": 1,
                   "model": "chaos-model", "choices": [], "usage": usage(resp)});
    events.push(format!("data: {u}\n\n"));
    events.push("data: [DONE]\n\n".to_string());
    let items: Vec<Result<Bytes, std::io::Error>> = if cut {
        // The first chunk, then the connection drops mid-answer.
        let first = events.into_iter().next().unwrap_or_default();
        vec![
            Ok(Bytes::from(first)),
            Err(std::io::Error::other("chaos: stream cut")),
        ]
    } else {
        events.into_iter().map(|e| Ok(Bytes::from(e))).collect()
    };
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(futures::stream::iter(items)))
        .unwrap_or_default()
}

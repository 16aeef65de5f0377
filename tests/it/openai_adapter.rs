//! The OpenAI adapter against a scripted HTTP fake of the chat-completions API (axum on
//! 127.0.0.1:0): each request takes the next canned response and is recorded for assertions.

use agentd::llm::openai::{OpenAiProvider, OpenAiSettings};
use agentd::llm::{
    Block, CompletionRequest, FinishReason, LlmError, LlmProvider, Message, Role, ToolChoice,
    ToolSpec, Usage,
};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const KEY: &str = "sk-test-SECRETKEY-0123456789";

/// One canned answer.
#[derive(Clone)]
struct Canned {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
    /// Wait this long before answering (timeout tests).
    delay: Duration,
}

impl Canned {
    fn json(status: u16, body: Value) -> Self {
        Canned {
            status,
            headers: vec![("content-type", "application/json".into())],
            body: body.to_string(),
            delay: Duration::ZERO,
        }
    }

    /// An SSE body: each event is sent as given (already `data: …` / `event: …` lines).
    fn sse(events: &[String]) -> Self {
        let mut body: String = events.iter().map(|e| format!("{e}\n\n")).collect();
        body.push_str("data: [DONE]\n\n");
        Canned {
            status: 200,
            headers: vec![("content-type", "text/event-stream".into())],
            body,
            delay: Duration::ZERO,
        }
    }

    fn header(mut self, name: &'static str, value: &str) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    fn delayed(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// What the fake saw.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    authorization: Option<String>,
    body: Value,
}

#[derive(Clone, Default)]
struct FakeState {
    script: Arc<Mutex<VecDeque<Canned>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

struct Fake {
    base_url: String,
    state: FakeState,
}

impl Fake {
    async fn start(script: Vec<Canned>) -> Self {
        let state = FakeState {
            script: Arc::new(Mutex::new(script.into())),
            ..FakeState::default()
        };
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Fake {
            base_url: format!("http://{addr}/v1"),
            state,
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    fn provider(&self, stream: bool, max_retries: u32, timeout: Duration) -> OpenAiProvider {
        OpenAiProvider::new(OpenAiSettings {
            base_url: self.base_url.clone(),
            api_key: KEY.into(),
            timeout,
            max_retries,
            stream,
        })
    }
}

async fn answer(
    State(state): State<FakeState>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    state.seen.lock().unwrap().push(Seen {
        path: uri.path().to_string(),
        authorization: headers
            .get("authorization")
            .map(|v| v.to_str().unwrap().to_string()),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    });
    let next = state.script.lock().unwrap().pop_front();
    let canned = next.unwrap_or_else(|| {
        Canned::json(
            599,
            json!({"error": {"message": "fake: no scripted response left"}}),
        )
    });
    tokio::time::sleep(canned.delay).await;
    let mut resp = Response::builder().status(canned.status);
    for (name, value) in &canned.headers {
        resp = resp.header(*name, value);
    }
    resp.body(Body::from(canned.body)).unwrap()
}

fn completion(message: Value, finish: &str) -> Value {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "fake-model-1",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
    })
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    let c = json!({
        "id": "chatcmpl-2", "object": "chat.completion.chunk", "created": 1, "model": "fake-model-2",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
    });
    format!("data: {c}")
}

fn usage_chunk(prompt: u64, completion: u64) -> String {
    let c = json!({
        "id": "chatcmpl-2", "object": "chat.completion.chunk", "created": 1, "model": "fake-model-2",
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": prompt + completion}
    });
    format!("data: {c}")
}

fn weather_tool() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: "Weather for a city".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        strict: false,
    }
}

fn request(tools: Vec<ToolSpec>, tool_choice: ToolChoice) -> CompletionRequest {
    CompletionRequest {
        model: "fake-model".into(),
        messages: vec![
            Message::text(Role::System, "You are terse."),
            Message::text(Role::User, "Weather in Paris?"),
        ],
        tools,
        tool_choice,
        max_tokens: Some(256),
        response_format: None,
    }
}

const SECOND: Duration = Duration::from_secs(5);

#[tokio::test]
async fn non_streaming_text_answer_maps_text_usage_and_finish() {
    let fake = Fake::start(vec![Canned::json(
        200,
        completion(json!({"role": "assistant", "content": "Sunny."}), "stop"),
    )])
    .await;
    let resp = fake
        .provider(false, 0, SECOND)
        .complete(request(vec![], ToolChoice::Auto))
        .await
        .unwrap();
    assert_eq!(resp.message.role, Role::Assistant);
    assert_eq!(
        resp.message.content,
        vec![Block::Text {
            text: "Sunny.".into()
        }]
    );
    assert_eq!(
        resp.usage,
        Usage {
            input_tokens: 12,
            output_tokens: 3,
            ..Default::default()
        }
    );
    assert_eq!(resp.finish, FinishReason::EndTurn);
    assert_eq!(resp.model, "fake-model-1");

    let seen = fake.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/v1/chat/completions");
    assert_eq!(
        seen[0].authorization.as_deref(),
        Some(&*format!("Bearer {KEY}"))
    );
    let body = &seen[0].body;
    assert_eq!(body["model"], "fake-model");
    assert_eq!(body["max_completion_tokens"], 256);
    assert_eq!(
        body["messages"][0],
        json!({"role": "system", "content": "You are terse."})
    );
    // Without tools, OpenAI rejects tool_choice and parallel_tool_calls: neither is sent.
    assert!(body.get("tools").is_none() && body.get("parallel_tool_calls").is_none());
    assert!(body.get("tool_choice").is_none());
}

#[tokio::test]
async fn non_streaming_tool_call_with_empty_content_is_only_a_tool_use() {
    let message = json!({
        "role": "assistant", "content": "",
        "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]
    });
    let fake = Fake::start(vec![Canned::json(200, completion(message, "tool_calls"))]).await;
    let resp = fake
        .provider(false, 0, SECOND)
        .complete(request(vec![weather_tool()], ToolChoice::Auto))
        .await
        .unwrap();
    assert_eq!(
        resp.message.content,
        vec![Block::ToolUse {
            id: "call_1".into(),
            name: "get_weather".into(),
            arguments: "{\"city\":\"Paris\"}".into(),
        }]
    );
    assert_eq!(resp.finish, FinishReason::ToolUse);
}

#[tokio::test]
async fn streaming_tool_calls_assemble_by_index_with_repeated_ids_and_names() {
    // id and name repeated in every delta (as some servers do); two calls interleaved by index.
    let delta = |index: u64, id: &str, name: &str, args: &str| {
        json!({"content": "", "tool_calls": [{"index": index, "id": id, "type": "function",
                                              "function": {"name": name, "arguments": args}}]})
    };
    let events = vec![
        // Some models emit a stray newline before their tool calls: not an answer either.
        chunk(json!({"role": "assistant", "content": "\n"}), None),
        chunk(delta(0, "call_abc", "get_weather", "{\"city\":"), None),
        chunk(delta(1, "call_def", "get_time", "{\"tz\":"), None),
        chunk(delta(0, "call_abc", "get_weather", "\"Par"), None),
        chunk(delta(0, "call_abc", "get_weather", "is\"}"), None),
        chunk(delta(1, "call_def", "get_time", "\"CET\"}"), None),
        chunk(json!({}), Some("tool_calls")),
        usage_chunk(40, 9),
    ];
    let fake = Fake::start(vec![Canned::sse(&events)]).await;
    let resp = fake
        .provider(true, 0, SECOND)
        .complete(request(vec![weather_tool()], ToolChoice::Auto))
        .await
        .unwrap();
    assert_eq!(
        resp.message.content,
        vec![
            Block::ToolUse {
                id: "call_abc".into(),
                name: "get_weather".into(),
                arguments: "{\"city\":\"Paris\"}".into(),
            },
            Block::ToolUse {
                id: "call_def".into(),
                name: "get_time".into(),
                arguments: "{\"tz\":\"CET\"}".into(),
            },
        ]
    );
    assert_eq!(
        resp.usage,
        Usage {
            input_tokens: 40,
            output_tokens: 9,
            ..Default::default()
        }
    );
    assert_eq!(resp.finish, FinishReason::ToolUse);
    assert_eq!(resp.model, "fake-model-2");
    let body = &fake.seen()[0].body;
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
}

#[tokio::test]
async fn streaming_text_is_concatenated() {
    let events = vec![
        chunk(json!({"role": "assistant", "content": "Hel"}), None),
        chunk(json!({"content": "lo"}), None),
        chunk(json!({}), Some("length")),
        usage_chunk(5, 2),
    ];
    let fake = Fake::start(vec![Canned::sse(&events)]).await;
    let resp = fake
        .provider(true, 0, SECOND)
        .complete(request(vec![], ToolChoice::Auto))
        .await
        .unwrap();
    assert_eq!(
        resp.message.content,
        vec![Block::Text {
            text: "Hello".into()
        }]
    );
    assert_eq!(resp.finish, FinishReason::MaxTokens);
    assert_eq!(resp.usage.total(), 7);
}

#[tokio::test]
async fn rate_limit_with_retry_after_is_waited_out_then_succeeds() {
    let fake = Fake::start(vec![
        Canned::json(
            429,
            json!({"error": {"message": "slow down", "type": "rate_limit_error"}}),
        )
        .header("retry-after", "1"),
        Canned::json(
            200,
            completion(json!({"role": "assistant", "content": "ok"}), "stop"),
        ),
    ])
    .await;
    let started = Instant::now();
    let resp = fake
        .provider(false, 1, SECOND)
        .complete(request(vec![], ToolChoice::Auto))
        .await
        .unwrap();
    let elapsed = started.elapsed();
    assert_eq!(resp.message.joined_text(), "ok");
    assert_eq!(fake.seen().len(), 2);
    assert!(
        elapsed >= Duration::from_millis(900),
        "Retry-After ignored: {elapsed:?}"
    );
}

#[tokio::test]
async fn server_500_for_unparseable_model_output_is_a_retryable_error() {
    let body = json!({"error": {"message": "could not parse output: expected tool call JSON",
                                "type": "server_error"}});
    let fake = Fake::start(vec![Canned::json(500, body); 8]).await;
    let err = fake
        .provider(false, 0, SECOND)
        .complete(request(vec![], ToolChoice::Auto))
        .await
        .unwrap_err();
    assert!(err.retryable);
    assert!(err.message.contains("500"), "{err}");
    assert!(err.message.contains("could not parse output"), "{err}");
    assert_eq!(err.provider, "openai");
    // async-openai retried the 5xx before giving up.
    assert!(fake.seen().len() >= 2);
}

#[tokio::test]
async fn sse_error_event_after_200_is_an_error_with_its_message() {
    let events = vec![
        chunk(json!({"role": "assistant", "content": "Partial"}), None),
        "event: error\ndata: {\"error\":{\"message\":\"model worker crashed\",\"type\":\"server_error\"}}"
            .to_string(),
    ];
    let fake = Fake::start(vec![Canned::sse(&events)]).await;
    let err = fake
        .provider(true, 0, SECOND)
        .complete(request(vec![], ToolChoice::Auto))
        .await
        .unwrap_err();
    assert!(err.message.contains("model worker crashed"), "{err}");
    assert!(err.message.contains("after HTTP 200"), "{err}");
    assert!(err.retryable);
}

#[tokio::test]
async fn sse_error_event_is_retried_up_to_max_retries() {
    let broken = Canned::sse(&[
        "data: {\"error\":{\"message\":\"engine hiccup\",\"type\":\"server_error\"}}".to_string(),
    ]);
    let good = Canned::sse(&[
        chunk(json!({"content": "fine"}), Some("stop")),
        usage_chunk(1, 1),
    ]);
    let fake = Fake::start(vec![broken, good]).await;
    let resp = fake
        .provider(true, 1, SECOND)
        .complete(request(vec![], ToolChoice::Auto))
        .await
        .unwrap();
    assert_eq!(resp.message.joined_text(), "fine");
    assert_eq!(fake.seen().len(), 2);
}

#[tokio::test]
async fn request_body_has_tools_choice_none_no_parallel_calls_and_tool_results() {
    let fake = Fake::start(vec![Canned::json(
        200,
        completion(json!({"role": "assistant", "content": "Summary."}), "stop"),
    )])
    .await;
    let schema = json!({"type": "json_schema",
                        "json_schema": {"name": "answer", "strict": true,
                                        "schema": {"type": "object", "properties": {}}}});
    let mut req = request(vec![weather_tool()], ToolChoice::None);
    req.response_format = Some(schema.clone());
    req.messages.push(Message {
        role: Role::Assistant,
        content: vec![
            Block::Text {
                text: "Checking.".into(),
            },
            Block::ToolUse {
                id: "call_1".into(),
                name: "get_weather".into(),
                arguments: "{\"city\":\"Paris\"}".into(),
            },
        ],
    });
    req.messages.push(Message {
        role: Role::Tool,
        content: vec![Block::ToolResult {
            call_id: "call_1".into(),
            content: "18C, sunny".into(),
            is_error: false,
        }],
    });
    let resp = fake.provider(false, 0, SECOND).complete(req).await.unwrap();
    assert_eq!(resp.message.joined_text(), "Summary.");

    let body = &fake.seen()[0].body;
    assert_eq!(body["parallel_tool_calls"], false);
    assert_eq!(body["tool_choice"], "none");
    assert_eq!(body["tools"][0]["type"], "function");
    assert_eq!(body["tools"][0]["function"]["name"], "get_weather");
    assert_eq!(
        body["tools"][0]["function"]["parameters"],
        weather_tool().parameters
    );
    assert_eq!(body["response_format"], schema);
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4);
    assert_eq!(messages[2]["role"], "assistant");
    assert_eq!(messages[2]["content"], "Checking.");
    assert_eq!(messages[2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(messages[2]["tool_calls"][0]["type"], "function");
    assert_eq!(
        messages[2]["tool_calls"][0]["function"]["arguments"],
        "{\"city\":\"Paris\"}"
    );
    assert_eq!(
        messages[3],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"})
    );
}

#[tokio::test]
async fn tool_choice_auto_is_sent_with_tools() {
    let fake = Fake::start(vec![Canned::json(
        200,
        completion(json!({"role": "assistant", "content": "x"}), "stop"),
    )])
    .await;
    fake.provider(false, 0, SECOND)
        .complete(request(vec![weather_tool()], ToolChoice::Auto))
        .await
        .unwrap();
    let body = &fake.seen()[0].body;
    assert_eq!(body["tool_choice"], "auto");
    assert_eq!(body["parallel_tool_calls"], false);
}

#[tokio::test]
async fn slow_server_times_out_with_a_retryable_error_and_is_retried() {
    let slow = Canned::json(
        200,
        completion(json!({"role": "assistant", "content": "late"}), "stop"),
    )
    .delayed(Duration::from_secs(3));
    let fake = Fake::start(vec![slow.clone(), slow]).await;
    let err = fake
        .provider(false, 1, Duration::from_millis(200))
        .complete(request(vec![], ToolChoice::Auto))
        .await
        .unwrap_err();
    assert!(err.retryable);
    assert!(err.message.contains("timed out"), "{err}");
    assert_eq!(fake.seen().len(), 2, "one retry after the timeout");
}

#[tokio::test]
async fn empty_choices_is_a_clean_error() {
    let mut body = completion(json!({"role": "assistant", "content": "x"}), "stop");
    body["choices"] = json!([]);
    let fake = Fake::start(vec![Canned::json(200, body)]).await;
    let err = fake
        .provider(false, 0, SECOND)
        .complete(request(vec![], ToolChoice::Auto))
        .await
        .unwrap_err();
    assert!(err.message.contains("no choices"), "{err}");
}

#[tokio::test]
async fn vllm_style_400_is_not_retryable_and_names_the_status() {
    let body = json!({"object": "error", "message": "context length exceeded",
                      "type": "BadRequestError", "param": null, "code": 400});
    let fake = Fake::start(vec![Canned::json(400, body)]).await;
    let err = fake
        .provider(false, 2, SECOND)
        .complete(request(vec![], ToolChoice::Auto))
        .await
        .unwrap_err();
    assert!(!err.retryable);
    assert!(
        err.message.contains("400") && err.message.contains("context length"),
        "{err}"
    );
    assert_eq!(fake.seen().len(), 1);
}

#[tokio::test]
async fn wrong_base_url_is_not_retried_and_says_so() {
    // FastAPI-style 404 body: async-openai cannot read it as an OpenAI error and drops the status.
    let fake = Fake::start(vec![Canned::json(404, json!({"detail": "Not Found"}))]).await;
    let err = fake
        .provider(false, 2, SECOND)
        .complete(request(vec![], ToolChoice::Auto))
        .await
        .unwrap_err();
    assert!(!err.retryable, "{err}");
    assert!(err.message.contains("llm.base_url"), "{err}");
    assert_eq!(fake.seen().len(), 1);
}

/// The error `script` produces (a fresh fake each time, so scripts cannot interfere).
async fn error_from(script: Vec<Canned>, stream: bool) -> LlmError {
    let fake = Fake::start(script).await;
    fake.provider(stream, 0, SECOND)
        .complete(request(vec![], ToolChoice::Auto))
        .await
        .unwrap_err()
}

#[tokio::test]
async fn api_key_never_appears_in_error_messages() {
    // A server that echoes the key back in its error text.
    let echo = json!({"error": {"message": format!("Incorrect API key provided: {KEY}"),
                                "type": "invalid_request_error", "code": "invalid_api_key"}});
    let unauthorized = error_from(vec![Canned::json(401, echo.clone())], false).await;
    assert!(
        !unauthorized.retryable,
        "401 is not retryable: {unauthorized}"
    );
    assert!(unauthorized.message.contains("401"), "{unauthorized}");
    assert!(
        unauthorized.message.contains("[redacted]"),
        "{unauthorized}"
    );

    let server = error_from(vec![Canned::json(500, echo.clone()); 8], false).await;
    let in_stream = error_from(vec![Canned::sse(&[format!("data: {echo}")])], true).await;
    let not_json = error_from(vec![Canned::sse(&[format!("data: oops {KEY}")])], true).await;

    // Nothing listening: a connection error.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let provider = OpenAiProvider::new(OpenAiSettings {
        base_url: format!("http://127.0.0.1:{port}/v1"),
        api_key: KEY.into(),
        timeout: SECOND,
        max_retries: 0,
        stream: false,
    });
    let refused = provider
        .complete(request(vec![], ToolChoice::Auto))
        .await
        .unwrap_err();
    assert!(refused.retryable, "{refused}");
    assert!(refused.message.contains("connect"), "{refused}");

    for err in [unauthorized, server, in_stream, not_json, refused] {
        assert!(!err.to_string().contains(KEY), "key leaked: {err}");
        assert!(!format!("{err:?}").contains(KEY), "key leaked: {err:?}");
    }
    assert!(!format!("{provider:?}").contains(KEY));
}

#[tokio::test]
async fn a_streamed_answer_past_max_stream_bytes_is_an_error_naming_the_setting() {
    // A model that never stops: 40 chunks of 100 bytes against a 1,024-byte bound.
    let mut events: Vec<String> = (0..40)
        .map(|_| chunk(json!({"content": "x".repeat(100)}), None))
        .collect();
    events.push(chunk(json!({}), Some("stop")));
    let fake = Fake::start(vec![Canned::sse(&events)]).await;
    let err = fake
        .provider(true, 2, SECOND)
        .with_max_stream_bytes(1024)
        .complete(request(vec![], ToolChoice::Auto))
        .await
        .unwrap_err();
    assert!(
        err.message.contains("llm.max_stream_bytes (1024 bytes)"),
        "{err}"
    );
    assert!(!err.retryable);
    assert_eq!(fake.seen().len(), 1, "not retried");
}

#[tokio::test]
async fn tool_choice_required_is_sent_as_required() {
    let fake = Fake::start(vec![Canned::json(
        200,
        completion(json!({"role": "assistant", "content": "ok"}), "stop"),
    )])
    .await;
    fake.provider(false, 0, SECOND)
        .complete(request(vec![weather_tool()], ToolChoice::Required))
        .await
        .unwrap();
    assert_eq!(fake.seen()[0].body["tool_choice"], "required");
}

#[tokio::test]
async fn an_sse_parse_error_is_not_retried_verbatim_by_the_adapter() {
    // llama.cpp: the server cannot parse the model's tool call mid-stream. The loop retries
    // once with a hint (tests/it/real_models.rs); the adapter must not repeat the same request.
    let events = vec![
        chunk(
            json!({"role": "assistant", "content": "<tool_call>{\"na"}),
            None,
        ),
        format!(
            "data: {}",
            json!({"error": {"message": "Failed to parse tool call: unexpected end", "type": "server_error"}})
        ),
    ];
    let fake = Fake::start(vec![Canned::sse(&events), Canned::sse(&events)]).await;
    let err = fake
        .provider(true, 3, SECOND)
        .complete(request(vec![weather_tool()], ToolChoice::Auto))
        .await
        .unwrap_err();
    assert!(err.is_unparsed_output() && err.after_generation(), "{err}");
    assert_eq!(fake.seen().len(), 1);
}

/// Review N15: a response body past `llm.max_response_bytes` is refused at the cap — with a
/// `Content-Length` that says so before anything is read, and without one (chunked) while it is
/// read — in both modes, not retried, naming the setting.
#[tokio::test]
async fn a_body_past_max_response_bytes_is_refused_in_both_modes() {
    const CAP: usize = 1 << 20;
    let big_text = "x".repeat(8 * CAP);
    let whole = Canned::json(
        200,
        completion(json!({"role": "assistant", "content": big_text}), "stop"),
    );
    let sse: Vec<String> = (0..200)
        .map(|_| chunk(json!({"content": "y".repeat(64 * 1024)}), None))
        .collect();
    // A chunked body (no Content-Length) of 64 MB, for the case nothing announces the size.
    async fn endless() -> Response {
        let part = Bytes::from(vec![b' '; 1 << 20]);
        let body =
            futures::stream::iter((0..64).map(move |_| Ok::<_, std::io::Error>(part.clone())));
        Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .body(Body::from_stream(body))
            .unwrap()
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let chunked_url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(listener, axum::Router::new().fallback(endless))
            .await
            .unwrap()
    });
    for (what, script, stream) in [
        ("json", Some(whole), false),
        ("sse", Some(Canned::sse(&sse)), true),
        ("chunked", None, false),
    ] {
        let (provider, fake) = match script {
            Some(s) => {
                let fake = Fake::start(vec![s]).await;
                (fake.provider(stream, 2, SECOND), Some(fake))
            }
            None => (
                OpenAiProvider::new(OpenAiSettings {
                    base_url: chunked_url.clone(),
                    api_key: KEY.into(),
                    timeout: SECOND,
                    max_retries: 2,
                    stream,
                }),
                None,
            ),
        };
        let err = provider
            .with_max_stream_bytes(64 * CAP)
            .with_max_response_bytes(CAP)
            .complete(request(vec![], ToolChoice::Auto))
            .await
            .unwrap_err();
        assert!(
            err.message.contains("llm.max_response_bytes"),
            "{what}: {err}"
        );
        if what != "sse" {
            assert!(!err.retryable, "{what}: {err}");
        }
        if let Some(fake) = fake.filter(|_| what != "sse") {
            assert_eq!(fake.seen().len(), 1, "{what}: not retried");
        }
    }
}

#[tokio::test]
async fn a_redirect_is_not_followed_and_the_key_goes_nowhere_else() {
    // Review D10: a provider endpoint answering 307 (which keeps the body) to a second server
    // on a real port: the second receives nothing, and the call fails on the 3xx, not retried.
    let elsewhere = Fake::start(vec![Canned::json(
        200,
        completion(json!({"role": "assistant", "content": "Sunny."}), "stop"),
    )])
    .await;
    for (status, stream) in [(307, false), (308, true), (302, false)] {
        let target = format!("{}/chat/completions", elsewhere.base_url);
        let endpoint = Fake::start(vec![
            Canned::json(status, json!({}))
                .header("location", &target);
            3
        ])
        .await;
        let err = endpoint
            .provider(stream, 2, SECOND)
            .complete(request(vec![], ToolChoice::Auto))
            .await
            .unwrap_err();
        assert!(!err.retryable, "{status}: {err}");
        assert!(err.message.contains(&status.to_string()), "{err}");
        assert!(err.message.contains("redirect"), "{err}");
        assert!(!err.to_string().contains(KEY), "{err}");
        assert_eq!(endpoint.seen().len(), 1, "{status}: sent once, not retried");
    }
    assert!(
        elsewhere.seen().is_empty(),
        "the redirect target received {:?}",
        elsewhere.seen()
    );
}

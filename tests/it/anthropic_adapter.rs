//! The Anthropic adapter against an HTTP fake of the Messages API (tests/it/anthropic_support),
//! streamed and not, in every mode the OpenAI adapter is tested in (tests/it/openai_adapter.rs):
//! answers, tool calls, the request body, retries (429 with retry-after, 529, 500, a cut
//! stream, an error event), errors not retried (400, 401, 403, 404), timeouts, the key kept out
//! of errors, and the stream and body bounds; plus what only Anthropic has (cache usage,
//! prompt caching, the forced extraction tool, stop reasons).

use crate::anthropic_support;
use agentd::llm::anthropic::AnthropicProvider;
use agentd::llm::{
    Block, CompletionRequest, FinishReason, LlmError, LlmProvider, Message, Role, ToolChoice,
    ToolSpec, Usage,
};
use anthropic_support::*;
use axum::body::{Body, Bytes};
use axum::response::Response;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const SECOND: Duration = Duration::from_secs(5);

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
        model: "claude-test".into(),
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

fn sunny() -> Value {
    message(
        json!([text("Sunny.")]),
        "end_turn",
        Some(usage(12, 3, 0, 0)),
    )
}

async fn complete(
    fake: &AnthropicFake,
    stream: bool,
    req: CompletionRequest,
) -> agentd::llm::CompletionResponse {
    fake.provider(stream, 0, SECOND)
        .complete(req)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_text_answer_maps_text_usage_finish_and_the_request_carries_the_sdk_headers() {
    for stream in [false, true] {
        let fake = AnthropicFake::scripted(vec![Reply::Message(sunny())]).await;
        let resp = complete(&fake, stream, request(vec![], ToolChoice::Auto)).await;
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
        assert_eq!(resp.model, "claude-fake-1");

        let seen = fake.seen();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].path, "/v1/messages");
        assert_eq!(seen[0].api_key.as_deref(), Some(KEY));
        assert_eq!(seen[0].version.as_deref(), Some("2023-06-01"));
        let body = &seen[0].body;
        assert_eq!(body["model"], "claude-test");
        assert_eq!(body["max_tokens"], 256);
        assert_eq!(
            body["system"],
            json!([{"type": "text", "text": "You are terse.",
                    "cache_control": {"type": "ephemeral"}}]),
            "the system prompt is a cached prefix"
        );
        assert_eq!(
            body["messages"],
            json!([{"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]}])
        );
        assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());
        assert_eq!(body.get("stream").is_some(), stream);
    }
}

#[tokio::test]
async fn max_tokens_is_always_sent() {
    let fake = AnthropicFake::scripted(vec![Reply::Message(sunny())]).await;
    let mut req = request(vec![], ToolChoice::Auto);
    req.max_tokens = None;
    complete(&fake, false, req).await;
    assert_eq!(fake.seen()[0].body["max_tokens"], 4096);
}

#[tokio::test]
async fn prose_before_a_tool_call_is_kept_beside_the_call_in_both_modes() {
    for stream in [false, true] {
        let m = message(
            json!([
                text("Let me check the weather."),
                tool_use("toolu_01", "get_weather", json!({"city": "Paris"}))
            ]),
            "tool_use",
            Some(usage(40, 9, 0, 0)),
        );
        let fake = AnthropicFake::scripted(vec![Reply::Message(m)]).await;
        let resp = complete(
            &fake,
            stream,
            request(vec![weather_tool()], ToolChoice::Auto),
        )
        .await;
        assert_eq!(
            resp.message.content,
            vec![
                Block::Text {
                    text: "Let me check the weather.".into()
                },
                Block::ToolUse {
                    id: "toolu_01".into(),
                    name: "get_weather".into(),
                    arguments: "{\"city\":\"Paris\"}".into(),
                }
            ],
            "stream: {stream}"
        );
        assert_eq!(resp.finish, FinishReason::ToolUse);
        assert_eq!(resp.usage.total(), 49);
    }
}

#[tokio::test]
async fn streamed_tool_input_assembles_from_input_json_delta_fragments() {
    // Two calls, fragments cut mid-token, a ping between, a whitespace text block first.
    let ev = |name: &str, data: Value| (name.to_string(), data);
    let delta = |i: u64, p: &str| {
        ev(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": i,
            "delta": {"type": "input_json_delta", "partial_json": p}}),
        )
    };
    let events = vec![
        ev(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1",
            "type": "message", "role": "assistant", "model": "claude-fake-2", "content": [],
            "stop_reason": null, "usage": {"input_tokens": 30, "output_tokens": 1,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 2000}}}),
        ),
        ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}),
        ),
        ev(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "\n"}}),
        ),
        ev(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_a", "name": "get_weather",
            "input": {}}}),
        ),
        delta(1, ""),
        delta(1, "{\"ci"),
        ev("ping", json!({"type": "ping"})),
        delta(1, "ty\": \"Par"),
        delta(1, "is\"}"),
        ev(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 1}),
        ),
        ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": 2,
            "content_block": {"type": "tool_use", "id": "toolu_b", "name": "get_time",
            "input": {}}}),
        ),
        ev(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 2}),
        ),
        ev(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use",
            "stop_sequence": null}, "usage": {"output_tokens": 21}}),
        ),
        ev("message_stop", json!({"type": "message_stop"})),
    ];
    let fake = AnthropicFake::scripted(vec![Reply::Events(events)]).await;
    let resp = complete(&fake, true, request(vec![weather_tool()], ToolChoice::Auto)).await;
    assert_eq!(
        resp.message.content,
        vec![
            Block::ToolUse {
                id: "toolu_a".into(),
                name: "get_weather".into(),
                arguments: "{\"city\": \"Paris\"}".into(),
            },
            Block::ToolUse {
                id: "toolu_b".into(),
                name: "get_time".into(),
                arguments: "{}".into(),
            },
        ]
    );
    assert_eq!(resp.finish, FinishReason::ToolUse);
    assert_eq!(resp.model, "claude-fake-2");
    assert_eq!(
        resp.usage,
        Usage {
            input_tokens: 2030,
            output_tokens: 21,
            cache_read_tokens: 2000,
            cache_write_tokens: 0,
        },
        "cache reads are input; output from message_delta"
    );
}

#[tokio::test]
async fn usage_counts_cache_creation_and_reads_as_input_in_both_modes() {
    for stream in [false, true] {
        let m = message(
            json!([text("ok")]),
            "end_turn",
            Some(usage(5, 2, 1200, 3400)),
        );
        let fake = AnthropicFake::scripted(vec![Reply::Message(m)]).await;
        let resp = complete(&fake, stream, request(vec![], ToolChoice::Auto)).await;
        assert_eq!(
            resp.usage,
            Usage {
                input_tokens: 4605,
                output_tokens: 2,
                cache_read_tokens: 3400,
                cache_write_tokens: 1200,
            },
            "stream: {stream}"
        );
    }
}

#[tokio::test]
async fn missing_usage_is_zero_for_the_meter_to_estimate() {
    for stream in [false, true] {
        let m = message(json!([text("ok")]), "end_turn", None);
        let fake = AnthropicFake::scripted(vec![Reply::Message(m)]).await;
        let resp = complete(&fake, stream, request(vec![], ToolChoice::Auto)).await;
        assert_eq!(resp.usage.total(), 0);
        assert_eq!(resp.message.joined_text(), "ok");
    }
}

#[tokio::test]
async fn stringified_input_is_read_as_the_arguments_it_holds() {
    for stream in [false, true] {
        let m = message(
            json!([tool_use(
                "toolu_s",
                "get_weather",
                json!("{\"city\": \"Oslo\"}")
            )]),
            "tool_use",
            Some(usage(1, 1, 0, 0)),
        );
        let fake = AnthropicFake::scripted(vec![Reply::Message(m)]).await;
        let resp = complete(
            &fake,
            stream,
            request(vec![weather_tool()], ToolChoice::Auto),
        )
        .await;
        let calls = resp.message.tool_calls();
        assert_eq!(
            calls,
            vec![("toolu_s", "get_weather", "{\"city\": \"Oslo\"}")],
            "{stream}"
        );
    }
}

#[tokio::test]
async fn a_tool_call_written_as_text_stays_text_for_the_loop_to_recover() {
    let written = "```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n```";
    for stream in [false, true] {
        let m = message(json!([text(written)]), "end_turn", Some(usage(1, 1, 0, 0)));
        let fake = AnthropicFake::scripted(vec![Reply::Message(m)]).await;
        let mut resp = complete(
            &fake,
            stream,
            request(vec![weather_tool()], ToolChoice::Auto),
        )
        .await;
        assert_eq!(resp.message.joined_text(), written);
        // What the tool loop does with every provider's answer (agent::round).
        assert_eq!(
            agentd::llm::textcalls::recover(&mut resp, &["get_weather".into()]),
            1
        );
        assert_eq!(resp.message.tool_calls()[0].2, "{\"city\":\"Rome\"}");
    }
}

#[tokio::test]
async fn stop_reasons_map_in_both_modes() {
    for (reason, finish) in [
        ("end_turn", FinishReason::EndTurn),
        ("stop_sequence", FinishReason::EndTurn),
        ("max_tokens", FinishReason::MaxTokens),
        ("refusal", FinishReason::Other),
        ("pause_turn", FinishReason::Other),
    ] {
        for stream in [false, true] {
            let m = message(json!([text("Hel")]), reason, Some(usage(1, 1, 0, 0)));
            let fake = AnthropicFake::scripted(vec![Reply::Message(m)]).await;
            let resp = complete(&fake, stream, request(vec![], ToolChoice::Auto)).await;
            assert_eq!(resp.finish, finish, "{reason}, stream: {stream}");
        }
    }
}

#[tokio::test]
async fn the_request_carries_tools_cached_tool_choices_and_the_transcript_as_blocks() {
    for (choice, wire) in [
        (
            ToolChoice::Auto,
            json!({"type": "auto", "disable_parallel_tool_use": true}),
        ),
        (
            ToolChoice::Required,
            json!({"type": "any", "disable_parallel_tool_use": true}),
        ),
        (ToolChoice::None, json!({"type": "none"})),
    ] {
        let fake = AnthropicFake::scripted(vec![Reply::Message(sunny())]).await;
        let mut req = request(vec![weather_tool()], choice);
        // A constrained round's response_format has no Messages API form: not sent.
        req.response_format = Some(json!({"type": "json_schema", "json_schema": {"name": "x",
            "schema": {"type": "object"}}}));
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
                Block::ToolUse {
                    id: "call_2".into(),
                    name: "get_weather".into(),
                    arguments: "{\"city\":".into(),
                },
            ],
        });
        req.messages.push(Message {
            role: Role::Tool,
            content: vec![
                Block::ToolResult {
                    call_id: "call_1".into(),
                    content: "18C, sunny".into(),
                    is_error: false,
                },
                Block::ToolResult {
                    call_id: "call_2".into(),
                    content: "arguments are not valid JSON".into(),
                    is_error: true,
                },
            ],
        });
        req.messages
            .push(Message::text(Role::User, "[run state] nothing yet"));
        complete(&fake, false, req).await;
        let body = &fake.seen()[0].body;
        assert_eq!(body["tool_choice"], wire);
        assert_eq!(
            body["tools"],
            json!([{"name": "get_weather", "description": "Weather for a city",
                    "input_schema": weather_tool().parameters,
                    "cache_control": {"type": "ephemeral"}}])
        );
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "call_1", "name": "get_weather",
                     "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "call_2", "name": "get_weather",
                     "input": {"unparsed_arguments": "{\"city\":"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "18C, sunny"},
                    {"type": "tool_result", "tool_use_id": "call_2",
                     "content": "arguments are not valid JSON", "is_error": true},
                    {"type": "text", "text": "[run state] nothing yet"}]}
            ])
        );
        assert!(body.get("response_format").is_none() && body.get("output_format").is_none());
    }
}

fn extraction_request() -> CompletionRequest {
    CompletionRequest {
        model: "claude-extract".into(),
        messages: vec![
            Message::text(Role::System, "Extract the invoice number."),
            Message::text(Role::User, "Invoice Number: INV-9"),
        ],
        tools: vec![],
        tool_choice: ToolChoice::None,
        max_tokens: Some(1000),
        response_format: Some(
            json!({"type": "json_schema", "json_schema": {"name": "invoice",
            "strict": true, "schema": {"type": "object", "additionalProperties": false,
            "required": ["invoice_number"],
            "properties": {"invoice_number": {"type": "string"}}}}}),
        ),
    }
}

#[tokio::test]
async fn an_extraction_is_a_forced_tool_whose_input_is_the_answer() {
    for stream in [false, true] {
        let m = message(
            json!([tool_use(
                "toolu_x",
                "invoice",
                json!({"invoice_number": "INV-9"})
            )]),
            "tool_use",
            Some(usage(50, 10, 0, 0)),
        );
        let fake = AnthropicFake::scripted(vec![Reply::Message(m)]).await;
        let resp = complete(&fake, stream, extraction_request()).await;
        assert_eq!(
            resp.message.content,
            vec![Block::Text {
                text: "{\"invoice_number\":\"INV-9\"}".into()
            }],
            "stream: {stream}"
        );
        assert_eq!(resp.finish, FinishReason::EndTurn);
        let body = &fake.seen()[0].body;
        assert_eq!(
            body["tool_choice"],
            json!({"type": "tool", "name": "invoice", "disable_parallel_tool_use": true})
        );
        assert_eq!(body["tools"][0]["name"], "invoice");
        assert_eq!(
            body["tools"][0]["input_schema"],
            extraction_request().response_format.unwrap()["json_schema"]["schema"]
        );
        assert_eq!(
            body["tools"][0]["cache_control"],
            json!({"type": "ephemeral"})
        );
    }
}

#[tokio::test]
async fn a_cut_off_extraction_keeps_max_tokens() {
    let m = message(
        json!([tool_use(
            "toolu_x",
            "invoice",
            json!({"invoice_number": "INV"})
        )]),
        "max_tokens",
        Some(usage(50, 1000, 0, 0)),
    );
    let fake = AnthropicFake::scripted(vec![Reply::Message(m)]).await;
    let resp = complete(&fake, false, extraction_request()).await;
    assert_eq!(resp.finish, FinishReason::MaxTokens);
}

#[tokio::test]
async fn a_429_with_retry_after_is_waited_out_then_succeeds() {
    let fake = AnthropicFake::scripted(vec![
        Reply::error(
            429,
            "rate_limit_error",
            "Number of request tokens has exceeded your per-minute rate limit",
        )
        .header("retry-after", "1"),
        Reply::Message(sunny()),
    ])
    .await;
    let started = Instant::now();
    let resp = fake
        .provider(false, 1, SECOND)
        .complete(request(vec![], ToolChoice::Auto))
        .await
        .unwrap();
    let elapsed = started.elapsed();
    assert_eq!(resp.message.joined_text(), "Sunny.");
    assert_eq!(fake.seen().len(), 2);
    assert!(
        elapsed >= Duration::from_millis(900),
        "retry-after ignored: {elapsed:?}"
    );
}

#[tokio::test]
async fn a_retry_after_longer_than_a_minute_ends_the_call_retryable() {
    let fake = AnthropicFake::scripted(vec![
        Reply::error(429, "rate_limit_error", "slow down").header("retry-after", "3600"),
    ])
    .await;
    let err = fake
        .provider(false, 3, SECOND)
        .complete(request(vec![], ToolChoice::Auto))
        .await
        .unwrap_err();
    assert!(err.retryable, "{err}");
    assert!(
        err.message.contains("429") && err.message.contains("rate_limit_error"),
        "{err}"
    );
    assert!(err.message.contains("3600s"), "{err}");
    assert_eq!(fake.seen().len(), 1);
}

#[tokio::test]
async fn a_529_overloaded_and_a_500_are_retried_in_both_modes() {
    for stream in [false, true] {
        let fake = AnthropicFake::scripted(vec![
            Reply::error(529, "overloaded_error", "Overloaded").header("retry-after-ms", "10"),
            Reply::error(500, "api_error", "Internal server error").header("retry-after", "0"),
            Reply::Message(sunny()),
        ])
        .await;
        let resp = fake
            .provider(stream, 2, SECOND)
            .complete(request(vec![], ToolChoice::Auto))
            .await
            .unwrap();
        assert_eq!(resp.message.joined_text(), "Sunny.");
        assert_eq!(fake.seen().len(), 3, "stream: {stream}");
    }
    // Past max_retries: the last failure, retryable, naming the status and the type.
    let fake = AnthropicFake::scripted(vec![
        Reply::error(529, "overloaded_error", "Overloaded")
            .header("retry-after", "0");
        3
    ])
    .await;
    let err = fake
        .provider(false, 1, SECOND)
        .complete(request(vec![], ToolChoice::Auto))
        .await
        .unwrap_err();
    assert!(err.retryable);
    assert!(
        err.message.contains("HTTP 529") && err.message.contains("overloaded_error"),
        "{err}"
    );
    assert_eq!(err.provider, "anthropic");
    assert_eq!(fake.seen().len(), 2);
}

/// The error `script` produces, and how many requests it took (a fresh fake each time).
async fn error_from(script: Vec<Reply>, stream: bool, retries: u32) -> (LlmError, usize) {
    let fake = AnthropicFake::scripted(script).await;
    let err = fake
        .provider(stream, retries, SECOND)
        .complete(request(vec![], ToolChoice::Auto))
        .await
        .unwrap_err();
    (err, fake.seen().len())
}

#[tokio::test]
async fn client_errors_are_not_retried_and_name_status_type_and_fix() {
    for (status, kind, fix) in [
        (400, "invalid_request_error", "prompt is too long"),
        (401, "authentication_error", "ANTHROPIC_API_KEY"),
        (403, "permission_error", "permission"),
        (404, "not_found_error", "ANTHROPIC_BASE_URL"),
        (413, "request_too_large", "too large"),
    ] {
        let message = match status {
            400 => "prompt is too long: 210000 tokens > 200000 maximum",
            403 => "Your API key does not have permission to use the specified resource.",
            413 => "Request exceeds the maximum allowed number of bytes: too large",
            _ => "not found or invalid",
        };
        for stream in [false, true] {
            let (err, sent) =
                error_from(vec![Reply::error(status, kind, message)], stream, 3).await;
            assert!(!err.retryable, "{status}: {err}");
            assert_eq!(sent, 1, "{status} is not retried");
            assert!(err.message.contains(&format!("HTTP {status}")), "{err}");
            assert!(
                err.message.contains(kind) && err.message.contains(fix),
                "{err}"
            );
        }
    }
    // x-should-retry overrides the status, as in Anthropic's SDKs.
    let (err, sent) = error_from(
        vec![Reply::error(500, "api_error", "no").header("x-should-retry", "false")],
        false,
        3,
    )
    .await;
    assert!(!err.retryable && sent == 1, "{err}");
}

#[tokio::test]
async fn an_error_event_after_200_is_retried_and_says_it_came_after_generation() {
    let ev = |name: &str, data: Value| (name.to_string(), data);
    let broken = vec![
        ev(
            "message_start",
            json!({"type": "message_start", "message": {"id": "m",
            "type": "message", "role": "assistant", "model": "claude-fake-1", "content": [],
            "usage": {"input_tokens": 5, "output_tokens": 1}}}),
        ),
        ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}),
        ),
        ev(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "Partial"}}),
        ),
        ev(
            "error",
            json!({"type": "error", "error": {"type": "overloaded_error",
            "message": "Overloaded"}}),
        ),
    ];
    let (err, sent) = error_from(vec![Reply::Events(broken.clone())], true, 0).await;
    assert!(err.retryable, "{err}");
    assert!(
        err.message.contains("overloaded_error") && err.message.contains("after HTTP 200"),
        "{err}"
    );
    assert!(
        err.after_generation(),
        "the loop charges the spent input: {err}"
    );
    assert_eq!(sent, 1);

    let fake = AnthropicFake::scripted(vec![Reply::Events(broken), Reply::Message(sunny())]).await;
    let resp = fake
        .provider(true, 1, SECOND)
        .complete(request(vec![], ToolChoice::Auto))
        .await
        .unwrap();
    assert_eq!(resp.message.joined_text(), "Sunny.");
    assert_eq!(fake.seen().len(), 2);
}

#[tokio::test]
async fn a_cut_stream_is_retried() {
    let mut cut = events_of(&sunny());
    cut.truncate(4); // message_start, ping, content_block_start, one text_delta
    let (err, _) = error_from(vec![Reply::Events(cut.clone())], true, 0).await;
    assert!(
        err.retryable && err.message.contains("ended before the model finished"),
        "{err}"
    );
    let (err, _) = error_from(vec![Reply::Events(vec![])], true, 0).await;
    assert!(
        err.retryable && err.message.contains("without any event"),
        "{err}"
    );

    let fake = AnthropicFake::scripted(vec![Reply::Events(cut), Reply::Message(sunny())]).await;
    let resp = fake
        .provider(true, 1, SECOND)
        .complete(request(vec![], ToolChoice::Auto))
        .await
        .unwrap();
    assert_eq!(resp.message.joined_text(), "Sunny.");
    assert_eq!(fake.seen().len(), 2);
}

#[tokio::test]
async fn a_slow_server_times_out_retryable_and_is_retried() {
    let slow = Reply::Delayed(Duration::from_secs(3), Box::new(Reply::Message(sunny())));
    let fake = AnthropicFake::scripted(vec![slow.clone(), slow]).await;
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
async fn a_body_that_is_no_message_is_not_retried_and_names_the_base_url() {
    let page = Reply::Raw {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        body: json!({"object": "list", "data": []}).to_string(),
    };
    let (err, sent) = error_from(vec![page], false, 2).await;
    assert!(!err.retryable && sent == 1, "{err}");
    assert!(err.message.contains("ANTHROPIC_BASE_URL"), "{err}");
}

#[tokio::test]
async fn the_api_key_never_appears_in_error_messages() {
    let echo = format!("invalid x-api-key: {KEY}");
    let (unauthorized, _) = error_from(
        vec![Reply::error(401, "authentication_error", &echo)],
        false,
        0,
    )
    .await;
    assert!(
        unauthorized.message.contains("[redacted]"),
        "{unauthorized}"
    );
    let (server, _) = error_from(vec![Reply::error(500, "api_error", &echo)], false, 0).await;
    let event = vec![(
        "error".to_string(),
        json!({"type": "error", "error": {"type": "api_error", "message": echo}}),
    )];
    let (in_stream, _) = error_from(vec![Reply::Events(event)], true, 0).await;
    let not_json = Reply::Raw {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        body: format!("oops {KEY}"),
    };
    let (garbled, _) = error_from(vec![not_json], false, 0).await;

    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let provider = AnthropicProvider::new(agentd::llm::anthropic::AnthropicSettings {
        base_url: format!("http://127.0.0.1:{port}"),
        ..AnthropicFake::scripted(vec![])
            .await
            .settings(false, 0, SECOND)
    });
    let refused = provider
        .complete(request(vec![], ToolChoice::Auto))
        .await
        .unwrap_err();
    assert!(
        refused.retryable && refused.message.contains("connect"),
        "{refused}"
    );

    for err in [unauthorized, server, in_stream, garbled, refused] {
        assert!(!err.to_string().contains(KEY), "key leaked: {err}");
        assert!(!format!("{err:?}").contains(KEY), "key leaked: {err:?}");
    }
    assert!(!format!("{provider:?}").contains(KEY));
}

#[tokio::test]
async fn no_key_for_anthropics_own_api_is_refused_before_sending() {
    let provider = AnthropicProvider::new(agentd::llm::anthropic::AnthropicSettings {
        base_url: "https://api.anthropic.com".into(),
        api_key: String::new(),
        ..AnthropicFake::scripted(vec![])
            .await
            .settings(false, 0, SECOND)
    });
    let err = provider
        .complete(request(vec![], ToolChoice::Auto))
        .await
        .unwrap_err();
    assert!(
        !err.retryable && err.message.contains("ANTHROPIC_API_KEY"),
        "{err}"
    );
}

#[tokio::test]
async fn a_streamed_answer_past_max_stream_bytes_fails_naming_the_setting() {
    let long = message(
        json!([text(&"x".repeat(4000))]),
        "end_turn",
        Some(usage(1, 1, 0, 0)),
    );
    let fake = AnthropicFake::scripted(vec![Reply::Message(long)]).await;
    let mut settings = fake.settings(true, 2, SECOND);
    settings.max_stream_bytes = 1024;
    let err = AnthropicProvider::new(settings)
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

/// Review N15 for this provider: a body past `llm.max_response_bytes` is refused — announced by
/// Content-Length, and chunked without one — in both modes, not retried, naming the setting.
#[tokio::test]
async fn a_body_past_max_response_bytes_is_refused_in_both_modes() {
    const CAP: usize = 1 << 20;
    let big = message(
        json!([text(&"x".repeat(2 * CAP))]),
        "end_turn",
        Some(usage(1, 1, 0, 0)),
    );
    async fn endless() -> Response {
        let part = Bytes::from(vec![b' '; 1 << 20]);
        let body =
            futures::stream::iter((0..64).map(move |_| Ok::<_, std::io::Error>(part.clone())));
        Response::builder()
            .status(200)
            .header("content-type", "text/event-stream")
            .body(Body::from_stream(body))
            .unwrap()
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let chunked = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(listener, axum::Router::new().fallback(endless))
            .await
            .unwrap()
    });
    for (what, stream) in [
        ("json", false),
        ("sse", true),
        ("chunked json", false),
        ("chunked sse", true),
    ] {
        let fake = AnthropicFake::scripted(vec![Reply::Message(big.clone())]).await;
        let mut settings = fake.settings(stream, 2, SECOND);
        settings.max_response_bytes = CAP;
        settings.max_stream_bytes = 64 * CAP;
        if what.starts_with("chunked") {
            settings.base_url = chunked.clone();
        }
        let err = AnthropicProvider::new(settings)
            .complete(request(vec![], ToolChoice::Auto))
            .await
            .unwrap_err();
        assert!(
            err.message.contains("llm.max_response_bytes"),
            "{what}: {err}"
        );
        assert!(!err.retryable, "{what}: {err}");
        if !what.starts_with("chunked") {
            assert_eq!(fake.seen().len(), 1, "{what}: not retried");
        }
    }
}

#[tokio::test]
async fn a_redirect_is_not_followed_and_the_key_goes_nowhere_else() {
    // Review D10: reqwest keeps `x-api-key` (and, for 307/308, the body) on a redirect to
    // another host. The endpoint answers 307 to a second server on a real port: the second
    // receives nothing, and the call fails on the 3xx without a retry.
    let elsewhere = AnthropicFake::scripted(vec![Reply::Message(sunny())]).await;
    for (status, stream) in [(307, false), (308, true), (302, false)] {
        let endpoint = AnthropicFake::scripted(vec![
            Reply::Raw {
                status,
                headers: vec![(
                    "location".into(),
                    format!("{}/v1/messages", elsewhere.base_url),
                )],
                body: String::new(),
            };
            3
        ])
        .await;
        let err = endpoint
            .provider(stream, 2, SECOND)
            .complete(request(vec![], ToolChoice::Auto))
            .await
            .unwrap_err();
        assert!(!err.retryable, "{status}: {err}");
        assert!(err.message.contains(&format!("HTTP {status}")), "{err}");
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

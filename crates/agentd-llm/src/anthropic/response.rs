//! Assembling answers from a Messages API body or from its stream of events
//! (`message_start`, `content_block_start` / `_delta` / `_stop`, `message_delta`,
//! `message_stop`, `ping`, `error`; unknown events are skipped, as Anthropic asks).

use super::request::Extraction;
use crate::{Block, CompletionResponse, FinishReason, Message, Role, Usage};
use serde_json::Value;
use std::collections::BTreeMap;

/// One content block being put together.
#[derive(Debug)]
enum Part {
    Text(String),
    ToolUse {
        id: Option<String>,
        name: Option<String>,
        /// `input` as sent whole (`content_block_start`, or a non-streamed body), as JSON text;
        /// a string `input` (a model that stringified it) as that string.
        input: String,
        /// `input_json_delta` fragments; when any came they are the input.
        partial: String,
    },
    /// Blocks this adapter does not use (thinking, server tools' results).
    Other,
}

impl Part {
    /// What the block counts toward `llm.max_stream_bytes`: its text, id, name and input, plus
    /// 64 so that empty blocks count too.
    fn cost(&self) -> usize {
        64 + match self {
            Part::Text(t) => t.len(),
            Part::ToolUse {
                id,
                name,
                input,
                partial,
            } => {
                id.as_ref().map_or(0, String::len)
                    + name.as_ref().map_or(0, String::len)
                    + input.len()
                    + partial.len()
            }
            Part::Other => 0,
        }
    }
}

/// Usage as the API reports it; later reports overwrite the fields they carry.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct WireUsage {
    input: u64,
    output: u64,
    cache_creation: u64,
    cache_read: u64,
}

impl WireUsage {
    fn merge(&mut self, v: &Value) {
        let set = |field: &mut u64, key: &str| {
            if let Some(n) = v[key].as_u64() {
                *field = n;
            }
        };
        set(&mut self.input, "input_tokens");
        set(&mut self.output, "output_tokens");
        set(&mut self.cache_creation, "cache_creation_input_tokens");
        set(&mut self.cache_read, "cache_read_input_tokens");
    }

    /// Cache writes and reads are prompt tokens the call processed (Anthropic's `input_tokens`
    /// excludes them): they are charged as input, as OpenAI's `prompt_tokens` include cached
    /// ones.
    fn neutral(self) -> Usage {
        if self.cache_read > 0 {
            metrics::counter!("agentd_llm_cached_tokens_total").increment(self.cache_read);
        }
        if self.cache_read > 0 || self.cache_creation > 0 {
            tracing::debug!(
                cache_read_input_tokens = self.cache_read,
                cache_creation_input_tokens = self.cache_creation,
                "anthropic prompt cache"
            );
        }
        Usage {
            input_tokens: self
                .input
                .saturating_add(self.cache_creation)
                .saturating_add(self.cache_read),
            output_tokens: self.output,
            cache_read_tokens: self.cache_read,
            cache_write_tokens: self.cache_creation,
        }
    }
}

/// An answer being put together.
#[derive(Debug, Default)]
pub struct Assembled {
    /// Keyed by the API's `index`. Changed only through [`Assembled::put`] and
    /// [`Assembled::append`], which keep `bytes` equal to the sum of [`Part::cost`].
    parts: BTreeMap<u64, Part>,
    /// The running total [`Assembled::bytes`] returns (D16: summing `parts` on every event
    /// made a stream of n blocks cost O(n²)).
    bytes: usize,
    stop_reason: Option<String>,
    usage: Option<WireUsage>,
    model: Option<String>,
    /// Stream events seen (a stream with none never started).
    pub(super) events: usize,
    /// `message_stop` seen.
    pub(super) stopped: bool,
}

/// What a stream event means for the reader.
pub enum Event {
    /// Keep reading.
    More,
    /// An `error` event: the failure is in the value.
    Error,
}

impl Assembled {
    /// Bytes accumulated so far (text, ids, names, inputs, plus a fixed cost per block so a
    /// million empty blocks count too): what `llm.max_stream_bytes` bounds. A running total,
    /// O(1) per event: every change to `parts` adds what it added and takes away what it
    /// replaced, so it is always the sum of the blocks' [`Part::cost`].
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Puts `part` at `index`, counting it and uncounting the block it replaces (a repeated
    /// `content_block_start` for one index).
    fn put(&mut self, index: u64, part: Part) {
        self.bytes = self.bytes.saturating_add(part.cost());
        if let Some(old) = self.parts.insert(index, part) {
            // `old.cost()` was added when it was put and every growth since went through
            // `append`, which added it too: the total holds at least that much.
            self.bytes = self.bytes.saturating_sub(old.cost());
        }
    }

    /// Appends `more` to a block's text (`Part::Text`) or partial input (`Part::ToolUse`).
    fn append(bytes: &mut usize, to: &mut String, more: &str) {
        to.push_str(more);
        *bytes = bytes.saturating_add(more.len());
    }

    /// A non-streamed message body (`{"type": "message", "content": [...], ...}`); `None`
    /// when `v` is not one.
    pub fn from_body(v: &Value) -> Option<Self> {
        let content = v.get("content")?.as_array()?;
        let mut acc = Assembled::default();
        for (i, block) in content.iter().enumerate() {
            acc.put(i as u64, part_of(block));
        }
        acc.stop_reason = v["stop_reason"].as_str().map(str::to_string);
        acc.model = v["model"].as_str().map(str::to_string);
        if v["usage"].is_object() {
            let mut u = WireUsage::default();
            u.merge(&v["usage"]);
            acc.usage = Some(u);
        }
        Some(acc)
    }

    /// One stream event's data.
    pub fn push_event(&mut self, v: &Value) -> Event {
        self.events += 1;
        let index = v["index"].as_u64().unwrap_or(0);
        match v["type"].as_str().unwrap_or_default() {
            "message_start" => {
                let m = &v["message"];
                self.model = m["model"]
                    .as_str()
                    .filter(|s| !s.is_empty())
                    .map(str::to_string);
                if m["usage"].is_object() {
                    self.usage.get_or_insert_default().merge(&m["usage"]);
                }
            }
            "content_block_start" => {
                self.put(index, part_of(&v["content_block"]));
            }
            "content_block_delta" => {
                let d = &v["delta"];
                match (self.parts.get_mut(&index), d["type"].as_str()) {
                    (Some(Part::Text(t)), Some("text_delta")) => {
                        Self::append(&mut self.bytes, t, d["text"].as_str().unwrap_or_default())
                    }
                    (Some(Part::ToolUse { partial, .. }), Some("input_json_delta")) => {
                        Self::append(
                            &mut self.bytes,
                            partial,
                            d["partial_json"].as_str().unwrap_or_default(),
                        )
                    }
                    // A delta without its start: a text block the server did not announce.
                    (None, Some("text_delta")) => {
                        let text = d["text"].as_str().unwrap_or_default().to_string();
                        self.put(index, Part::Text(text));
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(r) = v["delta"]["stop_reason"].as_str() {
                    self.stop_reason = Some(r.to_string());
                }
                if v["usage"].is_object() {
                    self.usage.get_or_insert_default().merge(&v["usage"]);
                }
            }
            "message_stop" => self.stopped = true,
            "error" => return Event::Error,
            // content_block_stop, ping, and event types added later.
            _ => {}
        }
        Event::More
    }

    /// Whether the answer is complete: a stop reason came (a stream cut before it is not).
    pub fn finished(&self) -> bool {
        self.stop_reason.is_some() || self.stopped
    }

    /// The neutral answer. `model` names the model when the server did not; `extraction`
    /// turns the forced tool's input into the JSON text an extraction caller reads.
    pub fn into_response(self, model: &str, extraction: Option<&Extraction>) -> CompletionResponse {
        let mut content = Vec::new();
        for part in self.parts.into_values() {
            match part {
                Part::Text(text) if !text.is_empty() => content.push(Block::Text { text }),
                Part::ToolUse {
                    id,
                    name,
                    input,
                    partial,
                } => content.push(Block::ToolUse {
                    id: id.unwrap_or_else(|| format!("toolu_{}", uuid::Uuid::new_v4().simple())),
                    name: name.unwrap_or_default(),
                    arguments: unstringified(if partial.is_empty() { input } else { partial }),
                }),
                _ => {}
            }
        }
        let has_calls = content.iter().any(|b| matches!(b, Block::ToolUse { .. }));
        if has_calls {
            // A stray newline beside calls is not an answer.
            content.retain(|b| !matches!(b, Block::Text { text } if text.trim().is_empty()));
        }
        let mut finish = match self.stop_reason.as_deref() {
            Some("max_tokens" | "model_context_window_exceeded") => FinishReason::MaxTokens,
            Some("tool_use") => FinishReason::ToolUse,
            _ if has_calls => FinishReason::ToolUse,
            Some("end_turn" | "stop_sequence") => FinishReason::EndTurn,
            // refusal, pause_turn (server tools, which are not offered), unknown.
            Some(other) => {
                tracing::warn!(stop_reason = other, "anthropic: the answer ended unusually");
                FinishReason::Other
            }
            None => FinishReason::Other,
        };
        if let Some(ext) = extraction
            && let Some(answer) = content.iter().find_map(|b| match b {
                Block::ToolUse {
                    name, arguments, ..
                } if *name == ext.tool => Some(arguments.clone()),
                _ => None,
            })
        {
            let text = if ext.wrapped {
                serde_json::from_str::<Value>(&answer)
                    .ok()
                    .and_then(|v| v.get("value").map(Value::to_string))
                    .unwrap_or(answer)
            } else {
                answer
            };
            content = vec![Block::Text { text }];
            if finish != FinishReason::MaxTokens {
                finish = FinishReason::EndTurn;
            }
        }
        CompletionResponse {
            message: Message {
                role: Role::Assistant,
                content,
            },
            usage: self.usage.map(WireUsage::neutral).unwrap_or_default(),
            finish,
            model: self.model.unwrap_or_else(|| model.to_string()),
        }
    }
}

/// Arguments a model sent as one JSON string (`"input": "{\"a\": 1}"`, streamed or not) are
/// that string's text; anything else stays as written.
fn unstringified(arguments: String) -> String {
    match serde_json::from_str::<Value>(&arguments) {
        Ok(Value::String(inner)) => inner,
        _ => arguments,
    }
}

/// A content block of a body, or the start of one in a stream.
fn part_of(block: &Value) -> Part {
    let text = |k: &str| {
        block[k]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    match block["type"].as_str() {
        Some("text") => Part::Text(block["text"].as_str().unwrap_or_default().to_string()),
        Some("tool_use") => Part::ToolUse {
            id: text("id"),
            name: text("name"),
            input: match &block["input"] {
                Value::Null => String::new(),
                // A stringified input is the model's arguments as written.
                Value::String(s) => s.clone(),
                // `{}` at a stream's start is a placeholder for the deltas.
                Value::Object(o) if o.is_empty() => "{}".to_string(),
                other => other.to_string(),
            },
            partial: String::new(),
        },
        _ => Part::Other,
    }
}

/// The adapter's assembly without the HTTP around it (fuzz targets, tests): a body, and a
/// stream's event data in order. Errors are the server's message.
#[doc(hidden)]
pub mod assembly {
    use super::*;

    /// The answer in a non-streamed `body`.
    pub fn body(body: &Value, model: &str) -> Result<CompletionResponse, String> {
        if let Some((kind, message)) = super::super::failure::error_in(body) {
            return Err(format!("{kind}: {message}"));
        }
        Assembled::from_body(body)
            .map(|a| a.into_response(model, None))
            .ok_or_else(|| "not a message".to_string())
    }

    /// The answer `events` assemble to, and the largest [`Assembled::bytes`] after an event.
    pub fn stream(events: &[Value], model: &str) -> Result<(CompletionResponse, usize), String> {
        let mut acc = Assembled::default();
        let mut most = 0;
        for e in events {
            if let Event::Error = acc.push_event(e) {
                let (kind, message) = super::super::failure::error_in(e).unwrap_or_default();
                return Err(format!("{kind}: {message}"));
            }
            most = most.max(acc.bytes());
        }
        if !acc.finished() {
            return Err("the stream ended before the model finished".into());
        }
        Ok((acc.into_response(model, None), most))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What `bytes` returned before D16's fix: the sum over every block, walked.
    fn walked(acc: &Assembled) -> usize {
        acc.parts.values().map(Part::cost).sum()
    }

    /// Every kind of event that changes the blocks: starts of each type, deltas of both kinds
    /// and of the wrong kind, a delta without its start, a start repeated for an index (once
    /// larger, once smaller), events that change nothing.
    fn mixed_stream() -> Vec<Value> {
        vec![
            json!({"type": "message_start", "message": {"model": "claude-x",
                   "usage": {"input_tokens": 3}}}),
            json!({"type": "content_block_start", "index": 0,
                   "content_block": {"type": "text", "text": "hello"}}),
            json!({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "text_delta", "text": " world"}}),
            json!({"type": "content_block_start", "index": 1,
                   "content_block": {"type": "tool_use", "id": "toolu_1", "name": "make",
                                     "input": {}}}),
            json!({"type": "content_block_delta", "index": 1,
                   "delta": {"type": "input_json_delta", "partial_json": "{\"a\":"}}),
            json!({"type": "content_block_delta", "index": 1,
                   "delta": {"type": "input_json_delta", "partial_json": " 12345}"}}),
            // The wrong kind of delta for each block: ignored, counted nowhere.
            json!({"type": "content_block_delta", "index": 1,
                   "delta": {"type": "text_delta", "text": "ignored"}}),
            json!({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "input_json_delta", "partial_json": "ignored"}}),
            json!({"type": "content_block_start", "index": 2,
                   "content_block": {"type": "thinking", "thinking": "hmm"}}),
            // A delta with no start makes a text block.
            json!({"type": "content_block_delta", "index": 7,
                   "delta": {"type": "text_delta", "text": "unannounced"}}),
            json!({"type": "ping"}),
            // A start repeated for an index replaces the block: larger, then smaller.
            json!({"type": "content_block_start", "index": 0,
                   "content_block": {"type": "text", "text": "a much longer replacement text"}}),
            json!({"type": "content_block_start", "index": 1,
                   "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                   "usage": {"output_tokens": 9}}),
            json!({"type": "message_stop"}),
        ]
    }

    #[test]
    fn the_running_byte_count_is_the_walked_sum_after_every_event() {
        let mut acc = Assembled::default();
        for (i, e) in mixed_stream().iter().enumerate() {
            acc.push_event(e);
            assert_eq!(acc.bytes(), walked(&acc), "after event {i}: {e}");
        }
        // Blocks 0 (replaced by 30 bytes of text), 1 (replaced by an empty text), 2 (thinking),
        // 7 (11 bytes): 4 × 64 + 30 + 0 + 0 + 11.
        assert_eq!(acc.bytes(), 4 * 64 + 30 + 11);
        let body = json!({"type": "message", "content": [
            {"type": "text", "text": "abc"},
            {"type": "tool_use", "id": "toolu_9", "name": "t", "input": {"k": "v"}},
            {"type": "redacted_thinking", "data": "x"}]});
        let acc = Assembled::from_body(&body).expect("a message body");
        assert_eq!(acc.bytes(), walked(&acc));
        assert_eq!(
            acc.bytes(),
            3 * 64 + 3 + "toolu_9".len() + 1 + r#"{"k":"v"}"#.len()
        );
    }

    /// The transport refuses a stream after the first event that takes `bytes` past
    /// `llm.max_stream_bytes` (`transport.rs`: `acc.bytes() > max_stream_bytes`): the running
    /// count trips at the same event as the walked sum, for every limit up to the stream's
    /// largest count.
    #[test]
    fn the_stream_limit_trips_at_the_same_event_as_before() {
        let first_past = |events: &[Value], limit: usize, count: fn(&Assembled) -> usize| {
            let mut acc = Assembled::default();
            events.iter().position(|e| {
                acc.push_event(e);
                count(&acc) > limit
            })
        };
        let events = mixed_stream();
        let most = assembly::stream(&events, "m").expect("a finished stream").1;
        assert!(most > 300, "{most}");
        for limit in 0..=most {
            assert_eq!(
                first_past(&events, limit, Assembled::bytes),
                first_past(&events, limit, walked),
                "limit {limit}"
            );
        }
        assert_eq!(first_past(&events, most, Assembled::bytes), None);
        // 20 empty blocks count 64 each: a limit of 1,000 is passed by the 16th (1,024).
        let empty: Vec<Value> = (0..20)
            .map(|i| {
                json!({"type": "content_block_start", "index": i,
                            "content_block": {"type": "text", "text": ""}})
            })
            .collect();
        assert_eq!(first_past(&empty, 1000, Assembled::bytes), Some(15));
        assert_eq!(first_past(&empty, 1000, walked), Some(15));
    }

    /// D16's stream: 60,000 empty blocks. Each event now adds to the count instead of walking
    /// the blocks, so the 60,000 events cost 60,000 steps, not the ~1.8·10⁹ the walked sum took;
    /// every block is still counted.
    #[test]
    fn sixty_thousand_empty_blocks_are_counted_one_step_an_event() {
        let mut events: Vec<Value> = (0..60_000)
            .map(|i| {
                json!({"type": "content_block_start", "index": i,
                            "content_block": {"type": "text", "text": ""}})
            })
            .collect();
        events.push(json!({"type": "message_stop"}));
        let (_, most) = assembly::stream(&events, "m").expect("a finished stream");
        assert_eq!(most, 60_000 * 64);
    }

    #[test]
    fn stop_reasons_map_to_finish_reasons() {
        let body = |reason: &str, content: Value| {
            json!({"type": "message", "model": "claude-x", "content": content,
                   "stop_reason": reason, "usage": {"input_tokens": 1, "output_tokens": 1}})
        };
        let text = json!([{"type": "text", "text": "hi"}]);
        let call = json!([{"type": "tool_use", "id": "toolu_1", "name": "t", "input": {}}]);
        for (reason, content, finish) in [
            ("end_turn", &text, FinishReason::EndTurn),
            ("stop_sequence", &text, FinishReason::EndTurn),
            ("max_tokens", &text, FinishReason::MaxTokens),
            ("tool_use", &call, FinishReason::ToolUse),
            ("refusal", &text, FinishReason::Other),
            ("pause_turn", &text, FinishReason::Other),
            ("end_turn", &call, FinishReason::ToolUse),
        ] {
            let r = assembly::body(&body(reason, content.clone()), "m").unwrap();
            assert_eq!(r.finish, finish, "{reason}");
        }
    }

    #[test]
    fn usage_counts_cache_writes_and_reads_as_input() {
        let v = json!({"type": "message", "content": [], "stop_reason": "end_turn",
            "usage": {"input_tokens": 7, "output_tokens": 3,
                      "cache_creation_input_tokens": 100, "cache_read_input_tokens": 1000}});
        let r = assembly::body(&v, "m").unwrap();
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 1107,
                output_tokens: 3,
                cache_read_tokens: 1000,
                cache_write_tokens: 100,
            }
        );
        assert_eq!(r.model, "m", "the model asked when the body names none");
    }
}

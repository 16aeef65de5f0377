//! Assembling answers from bodies and stream chunks; errors inside bodies.

#[allow(unused_imports)]
use super::*;

/// A tool call being put together.
#[derive(Debug, Default)]
pub(super) struct PartialCall {
    pub(super) id: Option<String>,
    pub(super) name: Option<String>,
    pub(super) arguments: String,
}

/// An answer being put together, from one body or from stream chunks.
#[derive(Debug, Default)]
pub(super) struct Assembled {
    pub(super) text: String,
    /// Keyed by the server's `index`.
    pub(super) calls: BTreeMap<u64, PartialCall>,
    pub(super) finish: Option<String>,
    pub(super) usage: Option<Usage>,
    pub(super) model: Option<String>,
    pub(super) saw_choice: bool,
}

impl Assembled {
    /// Bytes accumulated so far: text, and per call its id, name and arguments plus a fixed
    /// cost for the entry itself, so a million distinct `index` values or megabyte-long ids
    /// count against the cap too (review N15).
    pub(super) fn bytes(&self) -> usize {
        self.text.len()
            + self
                .calls
                .values()
                .map(|c| {
                    64 + c.arguments.len()
                        + c.id.as_ref().map_or(0, String::len)
                        + c.name.as_ref().map_or(0, String::len)
                })
                .sum::<usize>()
    }

    /// A non-streamed answer: `choice` (the first of `body`'s choices) with `body`'s usage and
    /// model.
    pub(super) fn from_choice(body: &Value, choice: &Value) -> Self {
        let msg = &choice["message"];
        let mut acc = Assembled {
            text: content_text(&msg["content"]),
            ..Assembled::default()
        };
        if acc.text.is_empty() {
            acc.text = msg["refusal"].as_str().unwrap_or_default().to_string();
        }
        acc.push_call_deltas(&msg["tool_calls"]);
        acc.finish = choice["finish_reason"].as_str().map(str::to_string);
        acc.usage = usage_from(&body["usage"]);
        acc.model = body["model"].as_str().map(str::to_string);
        acc
    }

    /// A message's or a stream delta's `tool_calls` (absent: none).
    pub(super) fn push_call_deltas(&mut self, calls: &Value) {
        for (pos, call) in calls.as_array().into_iter().flatten().enumerate() {
            self.push_call_delta(pos, call);
        }
    }

    /// One entry of `tool_calls` (a whole call, or a stream delta of one).
    fn push_call_delta(&mut self, position: usize, call: &Value) {
        let index = call["index"].as_u64().unwrap_or(position as u64);
        let entry = self.calls.entry(index).or_default();
        let non_empty = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
        // Some servers repeat id and name in every delta: keep the first, never concatenate.
        if entry.id.is_none() {
            entry.id = non_empty(&call["id"]);
        }
        if entry.name.is_none() {
            entry.name = non_empty(&call["function"]["name"]);
        }
        match &call["function"]["arguments"] {
            Value::String(fragment) => entry.arguments.push_str(fragment),
            Value::Null => {}
            // Some servers send the arguments as an object rather than a JSON string.
            other => entry.arguments.push_str(&other.to_string()),
        }
    }

    pub(super) fn push_chunk(&mut self, chunk: &Value) {
        if self.model.is_none() {
            self.model = chunk["model"]
                .as_str()
                .filter(|m| !m.is_empty())
                .map(str::to_string);
        }
        if let Some(usage) = usage_from(&chunk["usage"]) {
            self.usage = Some(usage);
        }
        for choice in chunk["choices"].as_array().into_iter().flatten() {
            if choice["index"].as_u64().unwrap_or(0) != 0 {
                continue;
            }
            self.saw_choice = true;
            let delta = &choice["delta"];
            self.text
                .push_str(delta["content"].as_str().unwrap_or_default());
            self.text
                .push_str(delta["refusal"].as_str().unwrap_or_default());
            self.push_call_deltas(&delta["tool_calls"]);
            if let Some(reason) = choice["finish_reason"].as_str() {
                self.finish = Some(reason.to_string());
            }
        }
    }

    pub(super) fn into_response(self, fallback_model: String) -> CompletionResponse {
        let mut content = Vec::new();
        // `content: ""` (or a stray newline) beside tool calls is not an answer.
        if !self.text.is_empty() && (self.calls.is_empty() || !self.text.trim().is_empty()) {
            content.push(Block::Text { text: self.text });
        }
        let has_calls = !self.calls.is_empty();
        for call in self.calls.into_values() {
            content.push(Block::ToolUse {
                // A server without ids: invent a unique one (the loop is idempotent on it).
                id: call
                    .id
                    .unwrap_or_else(|| format!("call_{}", uuid::Uuid::new_v4().simple())),
                name: call.name.unwrap_or_default(),
                arguments: call.arguments,
            });
        }
        let finish = match self.finish.as_deref() {
            Some("length") => FinishReason::MaxTokens,
            Some("tool_calls" | "function_call") => FinishReason::ToolUse,
            // Some servers say "stop" beside tool calls.
            _ if has_calls => FinishReason::ToolUse,
            Some("stop") => FinishReason::EndTurn,
            _ => FinishReason::Other,
        };
        CompletionResponse {
            message: Message {
                role: Role::Assistant,
                content,
            },
            usage: self.usage.unwrap_or_default(),
            finish,
            model: self.model.unwrap_or(fallback_model),
        }
    }
}

/// An error reported inside a body or stream event.
#[derive(Debug)]
pub(super) struct BodyError {
    pub(super) message: String,
    pub(super) status: Option<u16>,
    pub(super) kind: String,
}

impl BodyError {
    pub(super) fn unknown(v: &Value) -> Self {
        BodyError {
            message: format!(
                "not a chat completion (check llm.base_url; it usually ends in /v1): {}",
                clip(&v.to_string(), 300)
            ),
            status: None,
            kind: String::new(),
        }
    }

    pub(super) fn retryable(&self, in_stream: bool) -> bool {
        match self.status {
            Some(429) => self.kind != "insufficient_quota",
            Some(s) => s == 408 || s >= 500,
            None => {
                let k = self.kind.to_lowercase();
                if ["rate_limit", "server", "timeout", "overload", "unavailable"]
                    .iter()
                    .any(|w| k.contains(w))
                {
                    true
                } else if k.is_empty() {
                    // A failure mid-generation is usually the server's; a bare error body is not.
                    in_stream
                } else {
                    false
                }
            }
        }
    }
}

/// The error in `v`, in OpenAI's (`{"error": {...}}`), vLLM's (`{"object": "error", ...}`) or
/// a bare (`{"message": ...}` without choices) shape.
pub(super) fn error_in_body(v: &Value) -> Option<BodyError> {
    let err = if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
        e
    } else if v["object"] == "error" || (v.get("choices").is_none() && v["message"].is_string()) {
        v
    } else {
        return None;
    };
    let message = match err {
        Value::String(s) => s.clone(),
        _ => err["message"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| clip(&err.to_string(), 300)),
    };
    let status = [&err["code"], &err["status"], &v["code"]]
        .into_iter()
        .find_map(|c| {
            c.as_u64()
                .or_else(|| c.as_str().and_then(|s| s.parse().ok()))
        })
        .filter(|c| (400..600).contains(c))
        .map(|c| c as u16);
    let kind = [&err["type"], &err["code"]]
        .into_iter()
        .find_map(|k| k.as_str().filter(|s| s.parse::<u16>().is_err()))
        .unwrap_or_default()
        .to_string();
    Some(BodyError {
        message,
        status,
        kind,
    })
}

/// Message content: a string, or an array of `{"type": "text", "text": …}` parts.
pub(super) fn content_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    }
}

pub(super) fn usage_from(v: &Value) -> Option<Usage> {
    let tokens = |a: &str, b: &str| v[a].as_u64().or_else(|| v[b].as_u64()).unwrap_or(0);
    // Prefix-cache hits, where the server reports them (OpenAI, vLLM with prefix caching):
    // part of the prompt tokens, priced at the cached-input price.
    let cached = v["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .or_else(|| v["input_tokens_details"]["cached_tokens"].as_u64())
        .unwrap_or(0);
    if cached > 0 {
        metrics::counter!("agentd_llm_cached_tokens_total").increment(cached);
        tracing::debug!(cached_tokens = cached, "provider prefix cache hit");
    }
    v.is_object().then(|| Usage {
        input_tokens: tokens("prompt_tokens", "input_tokens"),
        output_tokens: tokens("completion_tokens", "output_tokens"),
        cache_read_tokens: cached,
        cache_write_tokens: 0,
    })
}

/// At most `max` characters of `s`.
pub(super) fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]), // checked: `i` is a char boundary of `s`
        None => s.to_string(),
    }
}

/// The adapter's assembly without the HTTP around it, for the fuzz targets (`fuzz/`): what the
/// adapter makes of a body, and of a stream's chunks (each one parsed SSE event), with the same
/// error checks in the same order. Errors are the server's message.
#[doc(hidden)]
pub mod assembly {
    use super::*;

    /// The answer in a non-streamed `body`.
    pub fn body(body: &Value, fallback_model: &str) -> Result<CompletionResponse, String> {
        if let Some(err) = error_in_body(body) {
            return Err(err.message);
        }
        match body
            .get("choices")
            .map(|c| c.as_array().and_then(|c| c.first()))
        {
            Some(Some(choice)) => {
                Ok(Assembled::from_choice(body, choice).into_response(fallback_model.into()))
            }
            Some(None) => Err("no choices".into()),
            None => Err(BodyError::unknown(body).message),
        }
    }

    /// The answer a stream of `chunks` assembles to, and the largest [`Assembled::bytes`] seen
    /// after a chunk (what `llm.max_stream_bytes` is compared with).
    pub fn stream(
        chunks: &[Value],
        fallback_model: &str,
    ) -> Result<(CompletionResponse, usize), String> {
        let mut acc = Assembled::default();
        let mut most = 0;
        for chunk in chunks {
            if let Some(err) = error_in_body(chunk) {
                return Err(err.message);
            }
            acc.push_chunk(chunk);
            most = most.max(acc.bytes());
        }
        if !acc.saw_choice {
            return Err("no choices".into());
        }
        Ok((acc.into_response(fallback_model.into()), most))
    }
}

//! A scripted provider for tests: replays a list of turns in order. It fails loudly on a call
//! it has no turn for, and `assert_complete` fails if turns were left unconsumed.

use super::{
    Block, CompletionRequest, CompletionResponse, FinishReason, LlmError, LlmProvider, Message,
    Role, Usage,
};
use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Turn {
    /// A text answer (the run ends).
    Text(String),
    /// Tool calls: (call id, tool name, raw arguments).
    Tools(Vec<(String, String, String)>),
    /// A provider error.
    Error { message: String, retryable: bool },
    /// Answer computed from the request (e.g. run_extraction's structured output).
    Dynamic(fn(&CompletionRequest) -> Result<CompletionResponse, LlmError>),
}

impl Turn {
    /// A single tool call.
    pub fn tool(id: &str, name: &str, args: serde_json::Value) -> Self {
        Turn::Tools(vec![(id.into(), name.into(), args.to_string())])
    }

    /// A single tool call with raw (possibly malformed) argument text.
    pub fn tool_raw(id: &str, name: &str, raw: &str) -> Self {
        Turn::Tools(vec![(id.into(), name.into(), raw.into())])
    }

    /// A text answer.
    pub fn text(t: &str) -> Self {
        Turn::Text(t.into())
    }

    /// This turn as the answer to `req`, reporting `usage` (what the scripted provider sends;
    /// a `Dynamic` turn may build its answer from another turn the same way).
    pub fn answer(
        self,
        req: &CompletionRequest,
        usage: Usage,
    ) -> Result<CompletionResponse, LlmError> {
        let (content, finish) = match self {
            Turn::Text(t) => (vec![Block::Text { text: t }], FinishReason::EndTurn),
            Turn::Tools(calls) => (
                calls
                    .into_iter()
                    .map(|(id, name, arguments)| Block::ToolUse {
                        id,
                        name,
                        arguments,
                    })
                    .collect(),
                FinishReason::ToolUse,
            ),
            Turn::Error { message, retryable } => {
                return Err(LlmError::new("scripted", message, retryable));
            }
            Turn::Dynamic(f) => return f(req),
        };
        Ok(CompletionResponse {
            message: Message {
                role: Role::Assistant,
                content,
            },
            usage,
            finish,
            model: req.model.clone(),
        })
    }
}

/// Replays turns; counts calls.
#[derive(Debug, Default)]
pub struct ScriptedProvider {
    turns: Mutex<VecDeque<Turn>>,
    calls: AtomicUsize,
    /// Every request seen, for assertions.
    pub requests: Mutex<Vec<CompletionRequest>>,
    /// Tokens reported per call.
    pub usage: Usage,
}

impl ScriptedProvider {
    /// A provider that answers with `turns`, reporting 100 input and 20 output tokens a call.
    pub fn new(turns: Vec<Turn>) -> Self {
        Self {
            turns: Mutex::new(turns.into()),
            calls: AtomicUsize::new(0),
            requests: Mutex::new(Vec::new()),
            usage: Usage {
                input_tokens: 100,
                output_tokens: 20,
                ..Default::default()
            },
        }
    }

    /// Calls made so far.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Turns not consumed yet.
    pub fn remaining(&self) -> usize {
        self.turns.lock().expect("turns").len()
    }

    /// Panics if any turn was not consumed.
    pub fn assert_complete(&self) {
        let left = self.remaining();
        assert_eq!(left, 0, "scripted provider: {left} turn(s) never consumed");
    }
}

#[async_trait::async_trait]
impl LlmProvider for ScriptedProvider {
    fn name(&self) -> &str {
        "scripted"
    }

    async fn complete(&self, req: CompletionRequest) -> Result<CompletionResponse, LlmError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        self.requests.lock().expect("requests").push(req.clone());
        let turn = self
            .turns
            .lock()
            .expect("turns")
            .pop_front()
            .ok_or_else(|| {
                LlmError::new(
                    "scripted",
                    format!("unexpected call #{n}: the script has no turn left"),
                    false,
                )
            })?;
        turn.answer(&req, self.usage)
    }
}

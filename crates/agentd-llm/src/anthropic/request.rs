//! Neutral requests to Messages API bodies.
//!
//! - System messages become the top-level `system` (one text block); user and tool messages
//!   become user turns, tool results `tool_result` blocks first; neighbouring turns of one role
//!   are merged (the API wants them alternating), empty text blocks dropped (it refuses them).
//! - A `tool_use` input must be an object: arguments that are not one (a model's broken JSON,
//!   kept in the transcript so the model can correct it) are sent as
//!   `{"unparsed_arguments": "<what it wrote>"}`. Ids are made unique and limited to the
//!   characters the API accepts, results following their call.
//! - Prompt caching: `cache_control: {"type": "ephemeral"}` on the last tool definition and on
//!   the system prompt, the prefix every round of a run repeats.
//! - An extraction (a `response_format` JSON Schema, no tools) gets one tool, forced with
//!   `tool_choice: {"type": "tool"}`, whose `input_schema` is the schema; a schema whose root is
//!   not an object is wrapped as `{"value": …}` and unwrapped from the answer.

use super::DEFAULT_MAX_TOKENS;
use crate::{Block, CompletionRequest, Message, Role, ToolChoice};
use serde_json::{Map, Value, json};
use std::collections::HashMap;

/// The forced tool of an extraction request.
#[derive(Debug, Clone)]
pub struct Extraction {
    /// The tool's name (the schema's name, in the characters tool names allow).
    pub tool: String,
    /// The schema was wrapped as `{"value": schema}`: the answer is the input's `value`.
    pub wrapped: bool,
}

/// One request, ready to send.
#[derive(Debug)]
pub(super) struct Plan {
    pub(super) body: Value,
    /// The model asked (the answer's model when the server names none).
    pub(super) model: String,
    pub(super) extraction: Option<Extraction>,
}

const EPHEMERAL: &str = "ephemeral";

/// The body for `req`.
pub(super) fn build(req: &CompletionRequest, stream: bool) -> Result<Plan, String> {
    let mut system = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let mut ids = Ids::default();
    for (i, msg) in req.messages.iter().enumerate() {
        if msg.role == Role::System {
            let text = msg.joined_text();
            if !text.is_empty() {
                system.push(text);
            }
            continue;
        }
        for (role, blocks) in convert(i, msg, &mut ids)? {
            match turns.last_mut() {
                Some((last, content)) if *last == role => content.extend(blocks),
                _ if blocks.is_empty() => {}
                _ => turns.push((role, blocks)),
            }
        }
    }
    let messages: Vec<Value> = turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let mut body = json!({
        "model": req.model,
        "max_tokens": req.max_tokens.filter(|n| *n > 0).unwrap_or(DEFAULT_MAX_TOKENS),
        "messages": messages,
    });
    if !system.is_empty() {
        body["system"] = json!([{"type": "text", "text": system.join("\n\n"),
                                 "cache_control": {"type": EPHEMERAL}}]);
    }
    let mut extraction = None;
    let mut tools: Vec<Value> = req
        .tools
        .iter()
        .map(|t| {
            let mut tool = json!({"name": t.name, "input_schema": t.parameters});
            if !t.description.is_empty() {
                tool["description"] = json!(t.description);
            }
            tool
        })
        .collect();
    let tool_choice = if !tools.is_empty() {
        // A response_format beside tools (constrained calls) has no Messages API form: the
        // tool_choice below already asks for a call.
        Some(match req.tool_choice {
            ToolChoice::Auto => json!({"type": "auto", "disable_parallel_tool_use": true}),
            ToolChoice::Required => json!({"type": "any", "disable_parallel_tool_use": true}),
            ToolChoice::None => json!({"type": "none"}),
        })
    } else if let Some((tool, ext)) = req.response_format.as_ref().and_then(extraction_tool) {
        let choice = json!({"type": "tool", "name": ext.tool, "disable_parallel_tool_use": true});
        tools.push(tool);
        extraction = Some(ext);
        Some(choice)
    } else {
        None
    };
    if let Some(last) = tools.last_mut() {
        last["cache_control"] = json!({"type": EPHEMERAL});
    }
    if let Some(choice) = tool_choice {
        body["tools"] = Value::Array(tools);
        body["tool_choice"] = choice;
    }
    if stream {
        body["stream"] = json!(true);
    }
    Ok(Plan {
        body,
        model: req.model.clone(),
        extraction,
    })
}

/// The forced tool for an OpenAI `response_format` (`{"type": "json_schema", "json_schema":
/// {"name", "schema", "description"?}}`); `None` for any other form (then the prompt alone
/// asks for JSON).
fn extraction_tool(rf: &Value) -> Option<(Value, Extraction)> {
    let spec = rf.get("json_schema").filter(|s| s.is_object())?;
    let schema = spec.get("schema").filter(|s| s.is_object())?;
    let name: String = spec["name"]
        .as_str()
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    let name = if name.is_empty() {
        "extraction".to_string()
    } else {
        name
    };
    let wrapped = schema["type"] != "object";
    let input_schema = if wrapped {
        json!({"type": "object", "properties": {"value": schema}, "required": ["value"]})
    } else {
        schema.clone()
    };
    let description = spec["description"]
        .as_str()
        .filter(|d| !d.is_empty())
        .unwrap_or(
            "Record the data extracted from the document: call this tool once, with every field \
             of its input schema.",
        );
    let tool = json!({"name": name, "description": description, "input_schema": input_schema});
    Some((
        tool,
        Extraction {
            tool: name,
            wrapped,
        },
    ))
}

/// Tool-use ids as sent: unique in the request and in `[A-Za-z0-9_-]`, a result following the
/// latest call of its id.
#[derive(Default)]
struct Ids {
    /// The wire id of each transcript id's latest call.
    latest: HashMap<String, String>,
    /// Wire ids handed out.
    used: std::collections::HashSet<String>,
}

impl Ids {
    fn clean(id: &str) -> String {
        let id: String = id
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .take(64)
            .collect();
        if id.is_empty() { "toolu".into() } else { id }
    }

    fn call(&mut self, id: &str) -> String {
        let base = Self::clean(id);
        let mut wire = base.clone();
        let mut n = 1;
        while self.used.contains(&wire) {
            n += 1;
            wire = format!("{base}_{n}");
        }
        self.used.insert(wire.clone());
        self.latest.insert(id.to_string(), wire.clone());
        wire
    }

    fn result(&self, id: &str) -> String {
        self.latest
            .get(id)
            .cloned()
            .unwrap_or_else(|| Self::clean(id))
    }
}

/// The turns of neutral message `index`: (role, blocks), usually one.
fn convert(
    index: usize,
    msg: &Message,
    ids: &mut Ids,
) -> Result<Vec<(&'static str, Vec<Value>)>, String> {
    let mut said = Vec::new();
    let mut results = Vec::new();
    for b in &msg.content {
        match b {
            Block::Text { text } if text.is_empty() => {}
            Block::Text { text } => said.push(json!({"type": "text", "text": text})),
            Block::ToolUse {
                id,
                name,
                arguments,
            } => {
                if msg.role != Role::Assistant {
                    return Err(format!(
                        "messages[{index}]: tool_use blocks belong to assistant messages (role \
                         is {:?})",
                        msg.role
                    ));
                }
                said.push(json!({"type": "tool_use", "id": ids.call(id), "name": name,
                                 "input": input_object(arguments)}));
            }
            Block::ToolResult {
                call_id,
                content,
                is_error,
            } => {
                let mut r = json!({"type": "tool_result", "tool_use_id": ids.result(call_id),
                                   "content": content});
                if content.is_empty() {
                    r["content"] = json!("(empty)");
                }
                if *is_error {
                    r["is_error"] = json!(true);
                }
                results.push(r);
            }
        }
    }
    Ok(match msg.role {
        // Results answer the calls of the assistant turn before: they lead the user turn.
        Role::User | Role::Tool | Role::System => {
            results.extend(said);
            vec![("user", results)]
        }
        // Results carried by an assistant message answer its own calls: a user turn after it.
        Role::Assistant => vec![("assistant", said), ("user", results)],
    })
}

/// A tool call's arguments as the object `input` must be.
fn input_object(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(o)) => Value::Object(o),
        _ if arguments.trim().is_empty() => Value::Object(Map::new()),
        _ => json!({"unparsed_arguments": arguments}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: Role, content: Vec<Block>) -> Message {
        Message { role, content }
    }

    #[test]
    fn turns_alternate_and_ids_stay_unique() {
        let call = |id: &str| Block::ToolUse {
            id: id.into(),
            name: "t".into(),
            arguments: "{\"a\":1}".into(),
        };
        let result = |id: &str| Block::ToolResult {
            call_id: id.into(),
            content: "ok".into(),
            is_error: false,
        };
        let req = CompletionRequest {
            model: "m".into(),
            messages: vec![
                Message::text(Role::System, "sys"),
                Message::text(Role::User, "go"),
                msg(Role::Assistant, vec![call("text_0")]),
                msg(Role::Tool, vec![result("text_0")]),
                Message::text(Role::User, "[run state] x"),
                msg(
                    Role::Assistant,
                    vec![
                        Block::Text {
                            text: String::new(),
                        },
                        call("text_0"),
                    ],
                ),
                msg(Role::Tool, vec![result("text_0")]),
            ],
            tools: vec![],
            tool_choice: ToolChoice::Auto,
            max_tokens: None,
            response_format: None,
        };
        let plan = build(&req, false).unwrap();
        let m = plan.body["messages"].as_array().unwrap();
        let roles: Vec<&str> = m.iter().map(|t| t["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "assistant", "user", "assistant", "user"]);
        assert_eq!(m[1]["content"][0]["id"], "text_0");
        assert_eq!(m[2]["content"][0]["tool_use_id"], "text_0");
        assert_eq!(
            m[2]["content"][1],
            json!({"type": "text", "text": "[run state] x"})
        );
        assert_eq!(
            m[3]["content"].as_array().unwrap().len(),
            1,
            "empty text dropped"
        );
        assert_eq!(m[3]["content"][0]["id"], "text_0_2");
        assert_eq!(m[4]["content"][0]["tool_use_id"], "text_0_2");
        assert_eq!(plan.body["max_tokens"], DEFAULT_MAX_TOKENS);
        assert!(plan.body.get("tools").is_none() && plan.body.get("tool_choice").is_none());
    }

    #[test]
    fn arguments_that_are_no_object_are_sent_as_one() {
        assert_eq!(input_object("{\"a\": 1}"), json!({"a": 1}));
        assert_eq!(input_object(""), json!({}));
        assert_eq!(
            input_object("{\"a\": "),
            json!({"unparsed_arguments": "{\"a\": "})
        );
        assert_eq!(input_object("[1]"), json!({"unparsed_arguments": "[1]"}));
    }

    #[test]
    fn a_schema_without_an_object_root_is_wrapped() {
        let rf = json!({"type": "json_schema", "json_schema": {"name": "my list!", "schema":
            {"type": "array", "items": {"type": "string"}}}});
        let (tool, ext) = extraction_tool(&rf).unwrap();
        assert_eq!(ext.tool, "my_list_");
        assert!(ext.wrapped);
        assert_eq!(tool["input_schema"]["properties"]["value"]["type"], "array");
        assert!(extraction_tool(&json!({"type": "json_object"})).is_none());
    }
}

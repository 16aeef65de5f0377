//! The `offline` provider: a deterministic heuristic model, the default when no API key or base
//! URL is configured, so the whole pipeline runs anywhere. It is not a language model and is
//! labelled `offline` on runs, audit rows and output. What it does:
//!
//! - **auto_create** (tools include `create_schema`): the text of the first message (else
//!   `get_document`) → the document analysis ([`crate::analysis`]: label–value lines in many
//!   languages, tables, totals, local dates and amounts, OCR repairs) → its candidates as the
//!   fields (`offline/proposal.rs`; the ones the first message lists, which cover the whole
//!   document, else those of the text it has) → `create_schema` (the compact `fields` form) →
//!   `create_prompt` → `run_extraction` → a summary. A tool error is retried once with the same
//!   plan, then it stops with a summary. A schema, prompt or tags the first message says a
//!   person chose (`jobs/start.rs`) are reused: no `create_schema` for a chosen schema, only
//!   `run_extraction` for a chosen prompt, the tags on the prompt.
//! - **the one call** (a `response_format` named `proposal`, under constrained calls): the
//!   same schema and prompt as one JSON answer.
//! - **extraction requests** (a `response_format` is given): answers with JSON holding, for each
//!   schema property, the value of the candidate of that name (or label) in the analysis of the
//!   request's text (numbers and `YYYY-MM-DD` dates normalised, missing values `null`).
//! - **proactive_suggestion** (tools include `org_overview`): `org_overview` → (`list_tags`
//!   when documents lack tags) → one `create_suggestion` per signal found (up to 3; an untagged
//!   document's carries a proposed `update_document` giving it the org's first tag) → a
//!   summary (`offline/nightly.rs`); resumed with the decisions on its proposals (a run that
//!   waited for them), a summary counting them.
//! - **refine** (the first message carries `<reviewer_instructions>`): "add field X", "rename X
//!   to Y", "remove field X" applied to the proposal's schema → `update_schema` →
//!   `update_prompt` → `run_extraction` → a summary naming each change (`offline/refine.rs`).
//! - **re-proposal** (the first message says `went stale: <tool> with <args>`): the same call
//!   again, unchanged, for a person to decide on the current data → a summary
//!   (`offline/repropose.rs`).
//! - `tool_choice: none`, or nothing it knows how to do: a one-line summary of the transcript.
//!
//! Token usage is estimated as characters / 4. `llm.offline_latency_ms` adds a fixed delay to
//! every call (to mimic a real model in demos and load tests).

use super::{
    Block, CompletionRequest, CompletionResponse, FinishReason, LlmError, LlmProvider, Message,
    Role, ToolChoice, Usage,
};
use serde_json::{Map, Value, json};
use std::collections::HashMap;

pub mod names;
mod nightly;
mod proposal;
mod refine;
mod repropose;

pub use proposal::{
    Field, extract, extract_from, fields_arg, fields_listed, fields_of, infer_fields,
    prompt_content, response_format,
};

/// The answers' `model`: this prefix and the model asked for. No provider answered, so
/// nothing is priced (`budget::charge_answer`): the heuristic costs nothing, whatever
/// `llm.model` names.
pub const ANSWER_MODEL_PREFIX: &str = "offline:";

/// What people decided on the run's proposals, when a message after the model's last answer
/// tells it (a run that waited for its decisions and goes on: `agent/wait.rs`).
fn decided(req: &CompletionRequest) -> Option<String> {
    let answered = req
        .messages
        .iter()
        .rposition(|m| m.role == Role::Assistant)?;
    req.messages
        .get(answered + 1..)?
        .iter()
        .filter(|m| m.role == Role::User)
        .map(Message::joined_text)
        .find(|t| t.starts_with(crate::store::decisions::RUN_DECIDED))
}

/// The deterministic heuristic model.
#[derive(Debug, Default, Clone, Copy)]
pub struct OfflineProvider {
    /// Added to every call to mimic a model's latency (`llm.offline_latency_ms`; demos, load
    /// and crash tests). Zero by default.
    pub latency: std::time::Duration,
}

fn estimate(req: &CompletionRequest, out_chars: usize) -> Usage {
    let input: usize = req
        .messages
        .iter()
        .flat_map(|m| m.content.iter())
        .map(|b| match b {
            Block::Text { text } => text.len(),
            Block::ToolUse { arguments, .. } => arguments.len() + 16,
            Block::ToolResult { content, .. } => content.len(),
        })
        .sum();
    Usage {
        input_tokens: (input / 4 + 1) as u64,
        output_tokens: (out_chars / 4 + 1) as u64,
        ..Default::default()
    }
}

/// Tool results so far, by tool name: (succeeded results, error count).
fn results(req: &CompletionRequest) -> HashMap<String, (Vec<Value>, u32)> {
    let mut names = HashMap::new();
    let mut out: HashMap<String, (Vec<Value>, u32)> = HashMap::new();
    for m in &req.messages {
        for b in &m.content {
            match b {
                Block::ToolUse { id, name, .. } => {
                    names.insert(id.clone(), name.clone());
                }
                Block::ToolResult {
                    call_id,
                    content,
                    is_error,
                } => {
                    let Some(name) = names.get(call_id) else {
                        continue;
                    };
                    let e = out.entry(name.clone()).or_default();
                    if *is_error {
                        e.1 += 1;
                    } else {
                        e.0.push(
                            serde_json::from_str(content)
                                .unwrap_or_else(|_| compacted_fields(content)),
                        );
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// The `key=value` pairs of a result the loop compacted to one line
/// (`[earlier result, compacted] create_schema ok: schema_revid=…, status=proposed`).
fn compacted_fields(content: &str) -> Value {
    let Some((_, pairs)) = content.split_once(" ok: ") else {
        return Value::String(content.to_string());
    };
    let map: Map<String, Value> = pairs
        .split(", ")
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), Value::String(v.trim().to_string())))
        .collect();
    Value::Object(map)
}

/// The document the first message carries (`name: …` and the text between `<document>`
/// markers), as a `get_document` result would give it.
fn document_in_first_message(req: &CompletionRequest) -> Option<Value> {
    let first = req
        .messages
        .iter()
        .find(|m| m.role == Role::User)?
        .joined_text();
    let (_, from) = first.split_once("<document>\n")?;
    let (text, _) = from.split_once("\n</document>")?;
    let name = first
        .lines()
        .find_map(|l| l.strip_prefix("name: "))
        .unwrap_or("document");
    // What follows the document: the candidate list (`agent::context`).
    let candidates = from
        .split_once("\n</document>")
        .map_or("", |(_, rest)| rest);
    Some(json!({"name": name, "text": text, "candidates": candidates}))
}

/// The text of the first user message.
fn first_user_text(req: &CompletionRequest) -> Option<String> {
    Some(
        req.messages
            .iter()
            .find(|m| m.role == Role::User)?
            .joined_text(),
    )
}

fn find_str<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a str> {
    keys.iter().find_map(|k| v.get(*k).and_then(Value::as_str))
}

enum Next {
    Call(&'static str, Value),
    /// A call of a tool the first message names (a re-proposal's).
    CallNamed(String, Value),
    Say(String),
}

/// What a person chose to start from, as the first message names it (`jobs/start.rs`): a
/// schema revid, a prompt revid, tag ids.
#[derive(Default)]
struct Start {
    schema: Option<String>,
    prompt: Option<String>,
    tags: Vec<String>,
}

impl Start {
    fn of(first: Option<&str>) -> Self {
        let Some(f) = first else {
            return Start::default();
        };
        let quoted = |key: &str| {
            let (_, from) = f.split_once(&format!("{key} \""))?;
            Some(from.split_once('"')?.0.to_string())
        };
        let tags = f
            .split_once("(tag_ids ")
            .and_then(|(_, rest)| rest.split_once(')'))
            .and_then(|(list, _)| serde_json::from_str(list).ok())
            .unwrap_or_default();
        Start {
            schema: quoted("Pass schema_revid"),
            prompt: quoted("run_extraction with prompt_revid"),
            tags,
        }
    }
}

/// The document's name and the fields the offline model proposes for it: the candidates the
/// first message lists (the whole document), else the text's own.
fn document_fields(doc: &Value) -> (&str, Vec<Field>) {
    let text = find_str(doc, &["text", "excerpt", "content"]).unwrap_or("");
    let name = find_str(doc, &["name"]).unwrap_or("document");
    let listed = doc
        .get("candidates")
        .and_then(Value::as_str)
        .map(crate::analysis::parse_brief)
        .unwrap_or_default();
    let fields = if listed.is_empty() {
        infer_fields(text)
    } else {
        fields_listed(&listed)
    };
    (name, fields)
}

/// The one call for the schema and the prompt (`agent::one_call`, a `response_format` named
/// `proposal`): the same schema and prompt the step-by-step path makes, as one JSON answer
/// (the schema in the `fields` form its step path sends, list fields included: a heuristic,
/// not a server that constrains decoding).
fn one_call(req: &CompletionRequest) -> Option<String> {
    let named = req
        .response_format
        .as_ref()
        .and_then(|f| f.pointer("/json_schema/name"))
        .is_some_and(|n| n == "proposal");
    if !named {
        return None;
    }
    let doc = document_in_first_message(req)?;
    let (name, fields) = document_fields(&doc);
    let answer = json!({
        "schema": {"name": format!("{name} fields"), "fields": fields_arg(&fields)},
        "prompt": {"name": format!("Extract {name}"), "content": prompt_content(&fields)},
    });
    Some(answer.to_string())
}

fn auto_create(
    r: &HashMap<String, (Vec<Value>, u32)>,
    shown: Option<&Value>,
    start: &Start,
) -> Next {
    let ok = |t: &str| r.get(t).and_then(|(v, _)| v.last());
    let errors = |t: &str| r.get(t).map(|(_, e)| *e).unwrap_or(0);
    // A prompt a person chose: only the extraction is left to do.
    if let Some(prompt_revid) = &start.prompt {
        if ok(names::RUN_EXTRACTION).is_none() && errors(names::RUN_EXTRACTION) < 2 {
            return Next::Call(names::RUN_EXTRACTION, json!({"prompt_revid": prompt_revid}));
        }
        return Next::Say(format!(
            "offline model: reused prompt {prompt_revid} and ran the extraction."
        ));
    }
    // The text shown in the first message needs no get_document call.
    let Some(doc) = shown.or_else(|| ok(names::GET_DOCUMENT)) else {
        return if errors(names::GET_DOCUMENT) > 0 {
            Next::Say("offline model: the document could not be read; nothing proposed.".into())
        } else {
            Next::Call(names::GET_DOCUMENT, json!({}))
        };
    };
    let (name, fields) = document_fields(doc);
    let chosen = start.schema.as_ref().map(|s| json!({"schema_revid": s}));
    let Some(schema) = ok(names::CREATE_SCHEMA).or(chosen.as_ref()) else {
        if errors(names::CREATE_SCHEMA) >= 2 {
            return Next::Say(
                "offline model: create_schema was refused twice; stopping without a proposal."
                    .into(),
            );
        }
        return Next::Call(
            names::CREATE_SCHEMA,
            json!({"name": format!("{name} fields"), "fields": fields_arg(&fields)}),
        );
    };
    let schema_revid = find_str(schema, &["schema_revid", "revid"])
        .unwrap_or_default()
        .to_string();
    let Some(prompt) = ok(names::CREATE_PROMPT) else {
        if errors(names::CREATE_PROMPT) >= 2 {
            return Next::Say("offline model: create_prompt was refused twice; stopping.".into());
        }
        let mut args = json!({"name": format!("Extract {name}"), "schema_revid": schema_revid,
            "content": prompt_content(&fields)});
        if !start.tags.is_empty() {
            args["tag_ids"] = json!(start.tags);
        }
        return Next::Call(names::CREATE_PROMPT, args);
    };
    let prompt_revid = find_str(prompt, &["prompt_revid", "revid"])
        .unwrap_or_default()
        .to_string();
    if ok(names::RUN_EXTRACTION).is_none() {
        if errors(names::RUN_EXTRACTION) >= 2 {
            return Next::Say("offline model: run_extraction failed twice; schema and prompt are proposed without an extraction.".into());
        }
        return Next::Call(names::RUN_EXTRACTION, json!({"prompt_revid": prompt_revid}));
    }
    Next::Say(format!(
        "offline model: proposed schema {schema_revid} with {} field(s) ({}), prompt {prompt_revid}, and ran the extraction.",
        fields.len(),
        fields
            .iter()
            .map(|f| f.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

#[async_trait::async_trait]
impl LlmProvider for OfflineProvider {
    fn name(&self) -> &str {
        "offline"
    }

    /// No model answers: runs are recorded with the model `heuristic`, not the one the settings
    /// name (a run labelled `offline / gpt-4o-mini` said a model ran that never did).
    fn model_for<'a>(&'a self, _requested: &'a str) -> &'a str {
        "heuristic"
    }

    async fn complete(&self, req: CompletionRequest) -> Result<CompletionResponse, LlmError> {
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        // An extraction request carries a response_format and no tools (an agent round under
        // `llm.constrained_calls` carries both).
        let extraction = req
            .response_format
            .as_ref()
            .filter(|_| req.tools.is_empty());
        let (content, finish) = if let Some(text) = one_call(&req) {
            (vec![Block::Text { text }], FinishReason::EndTurn)
        } else if let Some(rf) = extraction {
            // The document, not agentd's readings of it (which come from the same analysis).
            let text = req
                .messages
                .iter()
                .filter(|m| m.role == Role::User)
                .map(|m| m.joined_text())
                .filter(|t| !t.starts_with(crate::analysis::READINGS_START))
                .collect::<Vec<_>>()
                .join("\n");
            let schema = &rf["json_schema"]["schema"];
            (
                vec![Block::Text {
                    text: extract(&text, schema).to_string(),
                }],
                FinishReason::EndTurn,
            )
        } else {
            let r = results(&req);
            let has = |t: &str| req.tools.iter().any(|s| s.name == t);
            let next = if req.tool_choice == ToolChoice::None || req.tools.is_empty() {
                Next::Say(format!(
                    "offline model: stopping; {} tool result(s) so far.",
                    r.values().map(|(v, e)| v.len() as u32 + e).sum::<u32>()
                ))
            } else if has(names::ORG_OVERVIEW) {
                nightly::proactive(&r, decided(&req).as_deref())
            } else if let Some(first) = first_user_text(&req).filter(|t| refine::is_refine(t)) {
                refine::next(&first, &r)
            } else if let Some(action) = first_user_text(&req)
                .as_deref()
                .and_then(repropose::stale_action)
            {
                let offered: Vec<String> = req.tools.iter().map(|t| t.name.clone()).collect();
                repropose::next(action, &offered, &r)
            } else if has(names::CREATE_SCHEMA)
                || has(names::CREATE_PROMPT)
                || has(names::RUN_EXTRACTION)
            {
                // Any auto_create stage (guided mode offers one stage's tools at a time).
                let start = Start::of(first_user_text(&req).as_deref());
                auto_create(&r, document_in_first_message(&req).as_ref(), &start)
            } else {
                Next::Say("offline model: nothing to do for this job.".into())
            };
            let call = match next {
                Next::Call(name, args) => Ok((name.to_string(), args)),
                Next::CallNamed(name, args) => Ok((name, args)),
                Next::Say(t) => Err(t),
            };
            match call {
                Ok((name, args)) => {
                    let n = req
                        .messages
                        .iter()
                        .filter(|m| m.role == Role::Assistant)
                        .count();
                    (
                        vec![Block::ToolUse {
                            id: format!("offline_{n}"),
                            name,
                            arguments: args.to_string(),
                        }],
                        FinishReason::ToolUse,
                    )
                }
                Err(t) => (vec![Block::Text { text: t }], FinishReason::EndTurn),
            }
        };
        let out_len: usize = content
            .iter()
            .map(|b| match b {
                Block::Text { text } => text.len(),
                Block::ToolUse { arguments, .. } => arguments.len(),
                _ => 0,
            })
            .sum();
        let usage = estimate(&req, out_len);
        Ok(CompletionResponse {
            message: Message {
                role: Role::Assistant,
                content,
            },
            usage,
            finish,
            model: format!("{ANSWER_MODEL_PREFIX}{}", req.model),
        })
    }
}

//! Constrained calls (`llm.constrained_calls`): in a round that requires a tool call, the
//! request also carries a `response_format` JSON Schema that only a call of an offered tool
//! satisfies — `{"name": <one of the offered tools>, "arguments": <that tool's parameters>}` —
//! with the ids the run already has pinned (the run's schema for `create_prompt`, its prompt
//! for `run_extraction`, its document). Servers that constrain decoding to a schema
//! (llama.cpp, vLLM, Ollama) then cannot answer with prose, an echo of the last tool result or
//! an invented id; `textcalls` turns the JSON text into the call. `tool_choice: "required"`
//! alone does not bind a small local model: measured against Qwen2.5-0.5B on llama.cpp, it
//! echoed the previous tool result instead of calling `create_prompt`.
//!
//! The tools stay in the request (the chat template shows them to the model); the schema only
//! narrows what may be generated. A server that honours `tool_choice` over the format (OpenAI)
//! answers with a tool call, which is used. One that takes the format and enforces neither it
//! nor `tool_choice` — its answer neither a call nor readable as the format's ([`ignored`]) — is
//! never asked that constraint again: the answer is discarded, the run asks the round again
//! with plain tool calls and goes on so, and the endpoint is remembered as not constraining
//! (`llm::schema_output`, decided for a run by `round::constrained`).
//!
//! `create_schema`'s field names offer the run's candidate names (the analysis listed in the
//! first message, [`crate::analysis::names_in_brief`]) as an enum beside a free-form name: a
//! hint, not a cage — a field the analysis missed can still be named.

use super::goals::GoalState;
use super::one_call;
use super::transcript::CallRecord;
use crate::llm::{CompletionRequest, CompletionResponse, ToolSpec};
use crate::tools::Declaration;
use crate::tools::Registry;
use crate::tools::suggestions::{OrgOverview, SIGNALS, SuggestionKind};
use serde_json::{Map, Value, json};
use uuid::Uuid;

/// The `json_schema` name of a constrained round's format (how its answer is told apart).
pub const FORMAT_NAME: &str = "tool_call";

/// Whether `resp`, the answer to `req` as the loop read it (the one call split, text calls
/// recovered), shows that the server did not constrain a round that offered tools to its format
/// ([`FORMAT_NAME`] or the one call's): no tool call came of it. The review (no tools) and the
/// extraction are not such rounds.
pub fn ignored(req: &CompletionRequest, resp: &CompletionResponse) -> bool {
    let name = req
        .response_format
        .as_ref()
        .and_then(|f| f.pointer("/json_schema/name"))
        .and_then(Value::as_str);
    matches!(name, Some(FORMAT_NAME | one_call::FORMAT_NAME))
        && !req.tools.is_empty()
        && resp.message.tool_calls().is_empty()
}

/// The `response_format` of a round whose answer must be one call of `tools`, or `None`
/// when no tool is offered. Each tool's arguments are its guided parameters
/// ([`crate::tools::Tool::guided_parameters`]) where `registry` has it.
pub fn call_format(
    tools: &[ToolSpec],
    registry: &Registry,
    goal: Option<&GoalState>,
    document_id: Option<Uuid>,
    candidates: &[String],
) -> Option<Value> {
    let pins = pins(goal, document_id);
    let calls: Vec<Value> = tools
        .iter()
        .map(|t| {
            let args = registry
                .get(&t.name)
                .map(|x| x.guided_parameters(candidates))
                .unwrap_or_else(|| t.parameters.clone());
            call_schema(&t.name, args, &pins)
        })
        .collect();
    let schema = match <[Value; 1]>::try_from(calls) {
        Ok([one]) => one,
        Err(calls) if calls.is_empty() => return None,
        Err(calls) => json!({ "anyOf": calls }),
    };
    Some(json!({
        "type": "json_schema",
        "json_schema": {
            "name": FORMAT_NAME,
            "description": "One call of an offered tool.",
            "schema": schema,
        }
    }))
}

/// Arguments whose only right value this run already knows.
pub(super) fn pins(
    goal: Option<&GoalState>,
    document_id: Option<Uuid>,
) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if let Some(g) = goal {
        if let Some(s) = &g.schema {
            out.push(("schema_revid", s.clone()));
        }
        if let Some(p) = &g.prompt {
            out.push(("prompt_revid", p.clone()));
        }
    }
    if let Some(d) = document_id {
        out.push(("document_id", d.to_string()));
    }
    out
}

/// Whether a tool's parameters take no arguments (`org_overview`, `list_tags`): no
/// properties, or an empty object of them.
pub fn takes_no_arguments(parameters: &Value) -> bool {
    match parameters.get("properties") {
        None | Some(Value::Null) => true,
        Some(Value::Object(p)) => p.is_empty(),
        Some(_) => false,
    }
}

/// Output tokens a round gets when every tool it offers takes no arguments and a call is
/// required: `{"name": "org_overview", "arguments": {}}` in any chat template's wrapping fits
/// in far fewer; the model has nothing else to write (a small model at the general cap pasted a
/// JSON Schema into `org_overview`'s arguments until 4,096 tokens, issue 28).
pub const NO_ARGUMENTS_OUTPUT_TOKENS: u32 = 128;

/// Whether every tool of `tools` takes no arguments (as the registry offers them in a
/// constrained call).
pub fn all_without_arguments(tools: &[ToolSpec], registry: &Registry) -> bool {
    !tools.is_empty()
        && tools.iter().all(|t| {
            let args = registry
                .get(&t.name)
                .map(|x| x.guided_parameters(&[]))
                .unwrap_or_else(|| t.parameters.clone());
            takes_no_arguments(&args)
        })
}

/// `{"name": const, "arguments": args}` for one tool, with known ids pinned. A tool without
/// arguments gets exactly `{}`: the model writes none.
fn call_schema(name: &str, mut args: Value, pins: &[(&'static str, String)]) -> Value {
    if takes_no_arguments(&args) {
        args = json!({"type": "object", "properties": {}, "additionalProperties": false});
    }
    if let Some(props) = args.get_mut("properties").and_then(Value::as_object_mut) {
        for (name, value) in pins {
            if let Some(p) = props.get_mut(*name) {
                let mut pinned = Map::new();
                if let Some(d) = p.get("description") {
                    pinned.insert("description".into(), d.clone());
                }
                pinned.insert("type".into(), json!("string"));
                pinned.insert("enum".into(), json!([value]));
                *p = Value::Object(pinned);
            }
        }
    }
    json!({
        "type": "object",
        "properties": {
            "name": { "type": "string", "const": name },
            "arguments": args,
        },
        "required": ["name", "arguments"],
        "additionalProperties": false,
    })
}

/// Document ids a constrained call offers at most ([`offer_documents`]).
pub const MAX_OFFERED_DOCUMENTS: usize = 50;

/// What the run's `org_overview` results listed under their signals: per signal (in
/// [`SIGNALS`]' order) the kind of suggestion it asks for and the ids of its documents, in the
/// overview's order, without repeats within a signal, at most [`MAX_OFFERED_DOCUMENTS`] ids in
/// all. A result shown cut (not JSON) lists none.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Signalled {
    pub lists: Vec<(SuggestionKind, Vec<String>)>,
}

impl Signalled {
    /// Every listed document id once, in order.
    pub fn documents(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for id in self.lists.iter().flat_map(|(_, ids)| ids) {
            if !out.contains(id) {
                out.push(id.clone());
            }
        }
        out
    }
}

/// The signals of the run's successful `org_overview` results ([`Signalled`]). A signal's
/// item names its document by `document_id` (an outdated extraction) or by `id`.
pub fn overview_signals(history: &[CallRecord]) -> Signalled {
    let mut lists: Vec<(SuggestionKind, Vec<String>)> = SIGNALS
        .iter()
        .map(|(_, kind)| (*kind, Vec::new()))
        .collect();
    let mut total = 0;
    for r in history
        .iter()
        .filter(|r| r.tool == OrgOverview::NAME && !r.is_error)
    {
        let Ok(v) = serde_json::from_str::<Value>(&r.content) else {
            continue;
        };
        for ((key, _), (_, list)) in SIGNALS.iter().zip(lists.iter_mut()) {
            let items = v
                .pointer(&format!("/signals/{key}"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten();
            for item in items {
                let id = item
                    .get("document_id")
                    .or_else(|| item.get("id"))
                    .and_then(Value::as_str)
                    .filter(|id| Uuid::parse_str(id).is_ok());
                let Some(id) = id else { continue };
                if total == MAX_OFFERED_DOCUMENTS {
                    break;
                }
                if !list.iter().any(|o| o == id) {
                    list.push(id.to_string());
                    total += 1;
                }
            }
        }
    }
    lists.retain(|(_, ids)| !ids.is_empty());
    Signalled { lists }
}

/// In a constrained call's format (from [`call_format`]), a `document_id` argument that is not
/// pinned becomes one of the documents the run's overview listed (`signalled`): a small model
/// copies a 36-character id badly — measured with the 0.5B model in a nightly run, an id one
/// digit off the overview's, asked again until `max_repeats`. A call that also names a
/// suggestion's `kind` (`create_suggestion`) gets one alternative per signal: that signal's
/// kind with one of its documents (measured: the 0.5B model wrote `review_proposal` about an
/// untagged document). Nothing changes when the overview listed no document.
pub fn offer_documents(format: &mut Value, signalled: &Signalled) {
    let documents = signalled.documents();
    if documents.is_empty() {
        return;
    }
    let Some(schema) = format.pointer_mut("/json_schema/schema") else {
        return;
    };
    let calls: Vec<&mut Value> = match schema.get_mut("anyOf").and_then(Value::as_array_mut) {
        Some(calls) => calls.iter_mut().collect(),
        None => vec![schema],
    };
    for call in calls {
        let Some(args) = call.pointer_mut("/properties/arguments") else {
            continue;
        };
        let Some(doc) = args.pointer("/properties/document_id") else {
            continue;
        };
        if doc.get("enum").is_some() {
            continue;
        }
        let description = doc.get("description").cloned();
        let offered = |ids: &[String]| {
            let mut m = Map::new();
            if let Some(d) = &description {
                m.insert("description".into(), d.clone());
            }
            m.insert("type".into(), json!("string"));
            m.insert("enum".into(), json!(ids));
            Value::Object(m)
        };
        if args.pointer("/properties/kind").is_none() {
            args["properties"]["document_id"] = offered(&documents);
            continue;
        }
        let variants: Vec<Value> = signalled
            .lists
            .iter()
            .filter(|(_, ids)| !ids.is_empty())
            .map(|(kind, ids)| {
                let mut v = args.clone();
                v["properties"]["kind"] = json!({"type": "string", "enum": [kind.as_str()]});
                v["properties"]["document_id"] = offered(ids);
                let mut required: Vec<Value> = v
                    .get("required")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for k in ["kind", "document_id"] {
                    if !required.iter().any(|r| r == k) {
                        required.push(json!(k));
                    }
                }
                v["required"] = Value::Array(required);
                v
            })
            .collect();
        *args = json!({"anyOf": variants});
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::goals::Part;
    use crate::tools::Declaration;
    use crate::tools::{extraction::RunExtraction, prompts::CreatePrompt, schemas::CreateSchema};

    fn tool(name: &str, props: Value) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters: json!({"type": "object", "properties": props, "additionalProperties": false}),
            strict: false,
        }
    }

    #[test]
    fn an_answer_without_a_call_to_a_constrained_round_with_tools_ignored_it() {
        use crate::llm::{Block, FinishReason, Message, Role, ToolChoice, Usage};
        let t = tool(CreateSchema::NAME, json!({"fields": {"type": "object"}}));
        let req = CompletionRequest {
            model: "m".into(),
            messages: vec![],
            tools: vec![t.clone()],
            tool_choice: ToolChoice::Required,
            max_tokens: None,
            response_format: call_format(&[t], &Registry::default(), None, None, &[]),
        };
        let answer = |content: Vec<Block>| CompletionResponse {
            message: Message {
                role: Role::Assistant,
                content,
            },
            usage: Usage::default(),
            finish: FinishReason::EndTurn,
            model: "m".into(),
        };
        let prose = answer(vec![Block::Text {
            text: "{\"invoice_number\": \"INV-1\"}".into(),
        }]);
        assert!(ignored(&req, &prose));
        let call = answer(vec![Block::ToolUse {
            id: "c".into(),
            name: CreateSchema::NAME.into(),
            arguments: "{}".into(),
        }]);
        assert!(
            !ignored(&req, &call),
            "a tool call (tool_choice honoured) is used"
        );
        let mut plain = req.clone();
        plain.response_format = None;
        assert!(!ignored(&plain, &prose), "not constrained");
        let mut review = req.clone();
        review.tools.clear();
        assert!(!ignored(&review, &prose), "no tools offered");
    }

    #[test]
    fn one_tool_is_its_call_and_known_ids_are_pinned() {
        let goal = GoalState {
            missing: vec![Part::Prompt, Part::Extraction],
            schema: Some("s:1".into()),
            ..GoalState::default()
        };
        let t = tool(
            CreatePrompt::NAME,
            json!({"schema_revid": {"type": "string", "description": "from create_schema"},
                   "content": {"type": "string"}}),
        );
        let f = call_format(&[t], &Registry::default(), Some(&goal), None, &[]).expect("a format");
        assert_eq!(f["type"], "json_schema");
        let s = &f["json_schema"]["schema"];
        assert_eq!(s["properties"]["name"]["const"], CreatePrompt::NAME);
        let args = &s["properties"]["arguments"];
        assert_eq!(args["properties"]["schema_revid"]["enum"], json!(["s:1"]));
        assert_eq!(
            args["properties"]["schema_revid"]["description"],
            "from create_schema"
        );
        assert_eq!(args["properties"]["content"], json!({"type": "string"}));
        assert_eq!(s["required"], json!(["name", "arguments"]));
    }

    #[test]
    fn built_in_tools_offer_their_guided_arguments() {
        let registry = crate::tools::builtin_registry();
        let goal = GoalState {
            missing: vec![Part::Extraction],
            schema: Some("s:1".into()),
            prompt: Some("p:2".into()),
            ..GoalState::default()
        };
        let specs = registry.specs(&[CreateSchema::NAME.into(), RunExtraction::NAME.into()]);
        let f = call_format(&specs, &registry, Some(&goal), None, &[]).expect("a format");
        let any = &f["json_schema"]["schema"]["anyOf"];
        let args = |i: usize| any[i]["properties"]["arguments"].clone();
        let (schema, extraction) = if any[0]["properties"]["name"]["const"] == CreateSchema::NAME {
            (args(0), args(1))
        } else {
            (args(1), args(0))
        };
        // create_schema: a list of named, typed fields; no response_format.
        assert_eq!(schema["required"], json!(["fields"]));
        assert!(schema["properties"].get("response_format").is_none());
        let item = &schema["properties"]["fields"]["items"];
        assert_eq!(item["required"], json!(["name", "type"]));
        assert_eq!(item["properties"]["type"]["enum"][0], "string");
        // run_extraction: the run's prompt, pinned.
        assert_eq!(extraction["required"], json!(["prompt_revid"]));
        assert_eq!(
            extraction["properties"]["prompt_revid"]["enum"],
            json!(["p:2"])
        );
    }

    #[test]
    fn several_tools_are_alternatives_and_unknown_ids_stay_free() {
        let tools = [
            tool(CreateSchema::NAME, json!({"fields": {"type": "object"}})),
            tool(
                CreatePrompt::NAME,
                json!({"schema_revid": {"type": "string"}}),
            ),
        ];
        let f = call_format(
            &tools,
            &Registry::default(),
            Some(&GoalState::default()),
            None,
            &[],
        )
        .expect("a format");
        let any = f["json_schema"]["schema"]["anyOf"]
            .as_array()
            .expect("anyOf");
        assert_eq!(any.len(), 2);
        assert_eq!(
            any[1]["properties"]["arguments"]["properties"]["schema_revid"],
            json!({"type": "string"})
        );
        assert!(call_format(&[], &Registry::default(), None, None, &[]).is_none());
    }

    #[test]
    fn candidate_names_are_offered_beside_free_names() {
        let registry = crate::tools::builtin_registry();
        let specs = registry.specs(&[CreateSchema::NAME.into()]);
        let names = vec!["invoice_number".to_string(), "total".to_string()];
        let f = call_format(&specs, &registry, None, None, &names).expect("a format");
        let name = f
            .pointer(
                "/json_schema/schema/properties/arguments/properties/fields/items/properties/name",
            )
            .expect("the field name schema");
        assert_eq!(name["anyOf"][0]["enum"], json!(["invoice_number", "total"]));
        assert_eq!(name["anyOf"][1]["type"], "string");
        assert!(
            name["description"]
                .as_str()
                .unwrap_or("")
                .contains("invoice_number, total")
        );
        // Without candidates the name stays as the tool declares it.
        let plain = call_format(&specs, &registry, None, None, &[]).expect("a format");
        let plain_name = plain
            .pointer(
                "/json_schema/schema/properties/arguments/properties/fields/items/properties/name",
            )
            .expect("the field name schema");
        assert!(plain_name.get("anyOf").is_none());
    }

    #[test]
    fn a_document_id_not_pinned_is_one_of_the_overviews_documents() {
        use crate::tools::documents::GetDocument;
        use crate::tools::suggestions::CreateSuggestion;
        let a = "01a21eb2-4688-7295-8d29-ab1e624bf6da";
        let b = "01a21eb2-4685-7680-a7a3-af9c68b1c9af";
        let extraction = "01a21eb2-0000-7000-8000-000000000001";
        let overview = json!({"signals": {
            "untagged_documents": [{"id": a, "name": "x.txt"}, {"id": b, "name": "y.txt"}],
            "failed_auto_creates": [{"id": a, "name": "x.txt"}, {"id": "not-an-id"}],
            "proposals_waiting_over_3_days": [],
            // An outdated extraction names its document by document_id (its id is the
            // extraction's).
            "extractions_on_old_schema_version": [{"id": extraction, "document_id": b}],
            "untagged_documents_total": 2,
        }, "tags": 1});
        let record = |tool: &str, content: String, is_error: bool| CallRecord {
            call_id: "c".into(),
            tool: tool.into(),
            raw_args: "{}".into(),
            is_error,
            decision: "auto_approved".into(),
            content,
            round: 0,
        };
        let history = [
            record(OrgOverview::NAME, overview.to_string(), false),
            record(OrgOverview::NAME, "cut {".into(), false),
            record(
                GetDocument::NAME,
                json!({"signals": {"untagged_documents": [{"id": extraction}]}}).to_string(),
                false,
            ),
        ];
        let signalled = overview_signals(&history);
        let (ua, ub) = (a.to_string(), b.to_string());
        assert_eq!(
            signalled.lists,
            vec![
                (SuggestionKind::RetryFailed, vec![ua.clone()]),
                (SuggestionKind::TagDocuments, vec![ua.clone(), ub.clone()]),
                (SuggestionKind::RerunExtraction, vec![ub.clone()]),
            ]
        );
        assert_eq!(signalled.documents(), vec![ua.clone(), ub.clone()]);
        let specs = [
            tool(
                CreateSuggestion::NAME,
                json!({"kind": {"type": "string", "enum": ["review_proposal", "other"]},
                       "document_id": {"type": "string", "description": "the document"},
                       "title": {"type": "string"}}),
            ),
            tool(
                GetDocument::NAME,
                json!({"document_id": {"type": "string"}}),
            ),
            tool(OrgOverview::NAME, json!({})),
        ];
        let mut f = call_format(&specs, &Registry::default(), None, None, &[]).expect("a format");
        offer_documents(&mut f, &signalled);
        let calls = f["json_schema"]["schema"]["anyOf"].as_array().unwrap();
        // A suggestion: one alternative per signal, its kind with one of its documents.
        let variants = calls[0]["properties"]["arguments"]["anyOf"]
            .as_array()
            .unwrap_or_else(|| panic!("alternatives in {}", calls[0]));
        let pairs: Vec<(Value, Value)> = variants
            .iter()
            .map(|v| {
                (
                    v["properties"]["kind"]["enum"].clone(),
                    v["properties"]["document_id"]["enum"].clone(),
                )
            })
            .collect();
        assert_eq!(
            pairs,
            vec![
                (json!(["retry_failed"]), json!([a])),
                (json!(["tag_documents"]), json!([a, b])),
                (json!(["rerun_extraction"]), json!([b])),
            ]
        );
        for v in variants {
            assert_eq!(v["required"], json!(["kind", "document_id"]), "{v}");
            assert_eq!(
                v["properties"]["document_id"]["description"],
                "the document"
            );
            assert_eq!(v["properties"]["title"], json!({"type": "string"}));
        }
        // Another tool's document: any the overview listed.
        assert_eq!(
            calls[1]["properties"]["arguments"]["properties"]["document_id"]["enum"],
            json!([a, b])
        );
        // A pinned id stays pinned; no ids, nothing changes.
        let mut pinned = call_format(
            &specs[1..2],
            &Registry::default(),
            None,
            Some(Uuid::nil()),
            &[],
        )
        .unwrap();
        let before = pinned.clone();
        offer_documents(&mut pinned, &signalled);
        assert_eq!(pinned, before);
        let mut none = call_format(&specs, &Registry::default(), None, None, &[]).unwrap();
        let before = none.clone();
        offer_documents(&mut none, &Signalled::default());
        assert_eq!(none, before);
    }
}

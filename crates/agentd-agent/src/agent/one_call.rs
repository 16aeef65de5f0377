//! One call for the schema and the prompt (issue 28, item 5). Where constrained calls are on
//! for the endpoint (`llm.constrained_calls`, probed or configured), the first round of an
//! auto_create run that starts from nothing and shows the whole document asks once, with a
//! `response_format` built from the candidates, for `{"schema": <create_schema's arguments>,
//! "prompt": <create_prompt's arguments without schema_revid>}`. The answer becomes three calls
//! of the existing tools — `create_schema`, `create_prompt` (its `schema_revid` filled in with
//! the schema the first call made, [`fill_pins`]) and `run_extraction` (the run's prompt by
//! default) — checkpointed as the model's answer and run one by one like any calls: each gets its
//! audit row, its caps, its policy decision and snapshot. The extraction's own model call is the
//! second call; when its result flags nothing ([`nothing_to_add`]) the run ends with a summary
//! built from its records instead of a third call.
//!
//! A server that honours `tool_choice` over the format answers with a tool call, and the
//! step-by-step path goes on from it. One that refuses the format, or answers outside it with no
//! call (JSON of another shape, prose: it enforces neither), gets the same round without it and
//! without the instruction (the round as it was before, [`super::round::call`]); the run goes on
//! with plain tool calls and the endpoint is remembered (`llm::schema_output`), so the next
//! run there is not asked the one call.

use super::constrain;
use super::goals::{GoalState, Part};
use super::transcript::{ToolCall, Transcript};
use super::{RunSpec, context};
use crate::analysis::lexicon::snake;
use crate::analysis::{self, Listed};
use crate::llm::{Block, CompletionRequest, CompletionResponse, FinishReason, Message, Role};
use crate::tools::Registry;
use crate::tools::extraction::{RunExtraction, UpdateExtractionField};
use crate::tools::prompts::CreatePrompt;
use crate::tools::schemas::CreateSchema;
use crate::tools::typed::Declaration;
use serde_json::{Map, Value, json};

/// The `json_schema` name of the one-call format (how its answer is told apart).
pub const FORMAT_NAME: &str = "proposal";

/// The round's instruction, after the working-state block, when the analysis listed no
/// candidates: the model names the fields itself.
pub const INSTRUCTION: &str = "Answer with one JSON object and nothing else: \"schema\" holds \
    the arguments of `create_schema` (the fields worth extracting from this document, \
    preferably named after the candidates), \"prompt\" those of `create_prompt` without \
    schema_revid (a name, and content: the instructions the extraction model gets with the \
    document text). agentd creates the schema, then the prompt for it, then runs the extraction.";

/// The instruction when the analysis listed candidates: every candidate becomes a field; the
/// model adds what they miss and writes the prompt.
pub const INSTRUCTION_DECIDE: &str = "Answer with one JSON object and nothing else. \
    \"schema\": every candidate becomes a field, with the name and type listed; \"more\" lists \
    fields the candidates miss, if any, as {name, type}. \"prompt\": a name, and content: short \
    instructions the extraction model gets with the document text. agentd creates the schema, \
    then the prompt for it, then runs the extraction.";

/// Longest prompt content the one call asks for, in characters: instructions, not a copy of
/// the document (a 0.5B model otherwise writes until the output cap).
pub const MAX_PROMPT_CHARS: u64 = 600;

/// Fields the decision form lets a model add beside the candidates.
pub const MAX_MORE_FIELDS: u64 = 4;

/// Whether the next round of this run is the one call: constrained calls on, an auto_create
/// goal missing all three parts (nothing to start from, not a refine), no call made yet, the
/// whole document in the first message, the three tools allowed.
pub fn applies(
    spec: &RunSpec,
    constrained: bool,
    goal: Option<&GoalState>,
    t: &Transcript,
    first_message: &str,
) -> bool {
    let fresh = goal.is_some_and(|g| {
        g.missing == [Part::Schema, Part::Prompt, Part::Extraction]
            && g.revise_prompt.is_none()
            && g.suggestions.is_none()
    });
    constrained
        && spec.settings.compact
        && spec.settings.tool_choice_required
        && fresh
        && t.history.is_empty()
        && t.pending.is_empty()
        && !context::shows_excerpt(first_message)
        && [CreateSchema::NAME, CreatePrompt::NAME, RunExtraction::NAME]
            .iter()
            .all(|n| spec.policy.allows(n))
}

/// Makes `req` (a constrained round as built) the one call: its `response_format` and the
/// instruction. `candidates`: the first message's candidate list.
pub fn shape(req: &mut CompletionRequest, registry: &Registry, candidates: &[Listed]) {
    req.response_format = Some(format(registry, candidates));
    let instruction = match candidates.is_empty() {
        true => INSTRUCTION,
        false => INSTRUCTION_DECIDE,
    };
    req.messages.push(Message::text(Role::User, instruction));
}

/// The `response_format`: an object of the schema and the prompt, the prompt's `schema_revid`
/// left out (agentd fills it in). With candidates the schema part is the decision form
/// ([`decision_form`]); without, `create_schema`'s guided arguments.
pub fn format(registry: &Registry, candidates: &[Listed]) -> Value {
    let guided = |name: &str| {
        registry
            .get(name)
            .map(|t| t.guided_parameters(&[]))
            .unwrap_or_else(|| json!({"type": "object"}))
    };
    let schema = match candidates.is_empty() {
        true => guided(CreateSchema::NAME),
        false => decision_form(),
    };
    let mut prompt = guided(CreatePrompt::NAME);
    if let Some(p) = prompt.get_mut("properties").and_then(Value::as_object_mut) {
        p.remove("schema_revid");
        if let Some(content) = p.get_mut("content").and_then(Value::as_object_mut) {
            content.insert("maxLength".into(), json!(MAX_PROMPT_CHARS));
        }
    }
    if let Some(r) = prompt.get_mut("required").and_then(Value::as_array_mut) {
        r.retain(|k| k != "schema_revid");
    }
    json!({
        "type": "json_schema",
        "json_schema": {
            "name": FORMAT_NAME,
            "description": "The schema and the extraction prompt proposed for this document.",
            "schema": {
                "type": "object",
                "properties": {"schema": schema, "prompt": prompt},
                "required": ["schema", "prompt"],
                "additionalProperties": false,
            },
        }
    })
}

/// The schema part as a decision on the analysis' candidates (issue 28): `more`, at most
/// [`MAX_MORE_FIELDS`] `{name, type}` fields the candidates miss; every candidate is kept.
/// Under a grammar a model can neither rename a value the analysis found after the document's
/// own words nor mistype it: agentd builds the fields from the candidates' names and types
/// ([`decided_fields`]). A capable model still adds what the analysis missed; a reviewer (or a
/// later round's `update_schema`) removes what is not wanted, as with any proposal.
///
/// The form let the model leave candidates out (`drop`, up to a quarter of those the lexicon
/// does not name) until 2026-11-28. Scored against the documents' acceptable fields as well as
/// the expected ones, the 0.5B model's choices were the wrong way round: on 21 dev documents it
/// left out 38 candidates, 32 of them real fields (13 expected, 19 acceptable), and its
/// proposals scored recall 89.3 % and value accuracy 88.4 % against 94.4 % and 94.0 % for the
/// same candidates all kept, at the same precision (92.0 %). Asked before that as `keep`, a
/// required boolean per candidate, it said false to most good candidates of some documents.
pub fn decision_form() -> Value {
    json!({
        "type": "object",
        "properties": {
            "more": {
                "description": "Fields the candidates miss (usually none), snake_case.",
                "type": "array",
                "maxItems": MAX_MORE_FIELDS,
                "items": crate::tools::schemas::guided_field(),
            },
        },
        "required": ["more"],
        "additionalProperties": false,
    })
}

/// `create_schema`'s `fields` from a decision-form answer: every candidate, with its listed
/// type (a table's rows a list of its columns), then the `more` fields not already there (a
/// candidate's name added there keeps its listed type) whose names are `document`'s words or the
/// lexicon's ([`named_from`]). `None` when `schema` is not a decision (it has `fields`, or
/// neither candidates nor `more`). A `drop` list a server let through the grammar (the form
/// of before 2026-11-28) is not followed.
pub fn decided_fields(
    schema: &Map<String, Value>,
    candidates: &[Listed],
    document: &str,
) -> Option<Value> {
    if schema.contains_key("fields") || (candidates.is_empty() && !schema.contains_key("more")) {
        return None;
    }
    let mut fields = Map::new();
    for c in candidates {
        fields.insert(c.name.clone(), listed_type(c));
    }
    // The document's words, read once and only when a field is added.
    let mut words: Option<Vec<String>> = None;
    for m in schema
        .get("more")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        // Named as create_schema names fields (a 0.5B model added `Dispositionskredit` beside
        // the candidate `dispositionskredit`: the schema then had one field twice).
        let Some(name) = m.get("name").and_then(Value::as_str).map(|n| snake(n, 64)) else {
            continue;
        };
        let name = name.as_str();
        if name.is_empty() || fields.contains_key(name) {
            continue;
        }
        let words = words.get_or_insert_with(|| {
            snake(document, usize::MAX)
                .split('_')
                .map(str::to_string)
                .collect()
        });
        if !named_from(name, words) {
            continue;
        }
        let ty = match candidates.iter().find(|c| c.name == name) {
            Some(c) => listed_type(c),
            None => m.get("type").cloned().unwrap_or_else(|| json!("string")),
        };
        fields.insert(name.to_string(), ty);
    }
    Some(Value::Object(fields))
}

/// Whether a field the model adds is named after the document: a name the lexicon gives
/// (`vat_rate`), or one whose every word of two letters or more opens a word of the document
/// (`codice_cliente` beside `Codice cliente: …`). On 21 dev documents the 0.5B model added 24
/// fields and none matched a label: 18 were words of the request around the document (`name`,
/// `length` and `document` from its header, `type` and `value` from the candidates' format).
pub fn named_from(name: &str, document_words: &[String]) -> bool {
    if analysis::lexicon::class_of(name).is_some() {
        return true;
    }
    let mut parts = name.split('_').filter(|p| p.len() >= 2).peekable();
    parts.peek().is_some() && parts.all(|p| document_words.iter().any(|w| w.starts_with(p)))
}

/// The document's text in the first user message that holds it (between its `<document>`
/// markers, [`context::document_intro`]), or "".
pub(super) fn document_in(req: &CompletionRequest) -> String {
    req.messages
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| m.joined_text())
        .find_map(|t| {
            let (_, rest) = t.split_once("<document>\n")?;
            let (doc, _) = rest.rsplit_once("\n</document>")?;
            Some(doc.to_string())
        })
        .unwrap_or_default()
}

/// A listed candidate's type in `create_schema`'s `fields` form.
fn listed_type(c: &Listed) -> Value {
    if c.field_type != "array" {
        return json!(c.field_type);
    }
    let mut item = Map::new();
    for (n, t) in &c.items {
        item.insert(n.clone(), json!(t));
    }
    match item.is_empty() {
        true => json!(["string"]),
        false => json!([item]),
    }
}

/// The candidates listed in the first user message of `req` that holds a brief.
fn listed_in(req: &CompletionRequest) -> Vec<Listed> {
    req.messages
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| m.joined_text())
        .find(|t| t.contains("<candidates"))
        .map(|t| analysis::parse_brief(&t))
        .unwrap_or_default()
}

/// If `req` was the one call and `resp` holds its answer as text (no calls), replaces the text
/// with the three calls. Returns how many calls it made (0: `resp` unchanged).
pub fn split(req: &CompletionRequest, resp: &mut CompletionResponse) -> usize {
    let ours = req
        .response_format
        .as_ref()
        .and_then(|f| f.pointer("/json_schema/name"))
        .is_some_and(|n| n == FORMAT_NAME);
    if !ours || !resp.message.tool_calls().is_empty() {
        return 0;
    }
    let Some((mut schema, mut prompt)) = parse(&resp.message.joined_text()) else {
        return 0;
    };
    // A decision-form answer becomes `create_schema`'s fields (the candidates it kept).
    if let Some(fields) = decided_fields(&schema, &listed_in(req), &document_in(req)) {
        let name = schema.remove("name");
        schema = Map::new();
        if let Some(name) = name {
            schema.insert("name".into(), name);
        }
        schema.insert("fields".into(), fields);
    }
    // The prompt is for the schema the first call makes; an id written here is invented.
    prompt.remove("schema_revid");
    let calls = [
        (CreateSchema::NAME, Value::Object(schema)),
        (CreatePrompt::NAME, Value::Object(prompt)),
        (RunExtraction::NAME, json!({})),
    ];
    resp.message.content = calls
        .into_iter()
        .enumerate()
        .map(|(i, (name, args))| Block::ToolUse {
            id: format!("one_{i}"),
            name: name.to_string(),
            arguments: args.to_string(),
        })
        .collect();
    resp.finish = FinishReason::ToolUse;
    3
}

/// The two objects of an answer (`{"schema": {…}, "prompt": {…}}`), also inside a code fence.
fn parse(text: &str) -> Option<(Map<String, Value>, Map<String, Value>)> {
    let t = text.trim();
    let t = t
        .strip_prefix("```json")
        .or_else(|| t.strip_prefix("```"))
        .and_then(|s| s.trim_end().strip_suffix("```"))
        .unwrap_or(t);
    let Value::Object(mut o) = serde_json::from_str::<Value>(t.trim()).ok()? else {
        return None;
    };
    match (o.remove("schema")?, o.remove("prompt")?) {
        (Value::Object(s), Value::Object(p)) => Some((s, p)),
        _ => None,
    }
}

/// A pending call with a required argument missing whose only right value the run holds (the
/// run's schema for `create_prompt`'s `schema_revid`, as constrained calls pin it): the call
/// with that argument filled in. Other calls are returned unchanged.
pub fn fill_pins(registry: &Registry, goal: Option<&GoalState>, call: &ToolCall) -> ToolCall {
    let Some(tool) = registry.get(&call.name) else {
        return call.clone();
    };
    let Ok(Value::Object(mut args)) = serde_json::from_str::<Value>(&call.args) else {
        return call.clone();
    };
    let params = tool.parameters();
    let required: Vec<&str> = params["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut filled = false;
    for (key, value) in constrain::pins(goal, None) {
        if required.contains(&key) && !args.contains_key(key) {
            args.insert(key.to_string(), json!(value));
            filled = true;
        }
    }
    match filled {
        true => ToolCall {
            args: Value::Object(args).to_string(),
            ..call.clone()
        },
        false => call.clone(),
    }
}

/// Whether an auto_create goal is met: schema, prompt and extraction made.
pub(super) fn proposal_made(goal: Option<&GoalState>) -> bool {
    goal.is_some_and(|g| g.met() && g.suggestions.is_none() && g.extraction.is_some())
}

/// Whether the model has nothing to add once the goal is met: the run's last call is a
/// successful extraction whose result flags nothing (no value the document lacks outside a
/// table's cells, no field empty while the document has it, not cut, the whole text read), or
/// only corrections
/// (`update_extraction_field`, as the review makes: [`super::review`]) followed it. Then the
/// run ends with a summary from its records instead of a summary round.
pub fn nothing_to_add(constrained: bool, goal: Option<&GoalState>, t: &Transcript) -> bool {
    let met = proposal_made(goal);
    let Some(last) = t.history.last() else {
        return false;
    };
    // The corrections of a review (or of the model's own look) came after the extraction:
    // what was flagged has had its look.
    let extracted = t
        .history
        .iter()
        .rposition(|c| c.tool == RunExtraction::NAME && !c.is_error);
    let corrected = extracted.is_some_and(|i| {
        t.history.get(i + 1..).is_some_and(|after| {
            !after.is_empty() && after.iter().all(|c| c.tool == UpdateExtractionField::NAME)
        })
    });
    if constrained && met && corrected && t.pending.is_empty() {
        return true;
    }
    if !(constrained && met && last.tool == RunExtraction::NAME && !last.is_error) {
        return false;
    }
    let Ok(Value::Object(result)) = serde_json::from_str::<Value>(&last.content) else {
        // Truncated for the model, or not JSON: let the model look.
        return false;
    };
    // A flagged cell of a table (`/transactions/6/debit`) is left to the reviewer: a whole
    // round for it cost the 0.5B model 3,500 tokens and brought a summary, no correction.
    let top_level_ungrounded = result
        .get("ungrounded")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .any(|p| analysis::ground::top_level_field(p).is_some());
    let flagged = top_level_ungrounded
        || ["empty_but_in_document", "finish_reason"]
            .iter()
            .any(|k| result.contains_key(*k));
    !flagged && result.get("input_truncated") != Some(&json!(true))
}

/// The final text of a run that ended with nothing for the model to add.
pub fn summary(goal: &GoalState) -> String {
    format!(
        "Proposed schema {} (fields: {}), prompt {} and extraction {}; values the document \
         does not contain are flagged on the extraction. (Summary written by agentd from the \
         run's records.)",
        goal.schema.as_deref().unwrap_or("?"),
        goal.schema_fields.join(", "),
        goal.prompt.as_deref().unwrap_or("?"),
        goal.extraction.map(|e| e.to_string()).unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::Usage;

    fn answer(text: &str) -> CompletionResponse {
        CompletionResponse {
            message: Message::text(Role::Assistant, text),
            usage: Usage::default(),
            finish: FinishReason::EndTurn,
            model: "m".into(),
        }
    }

    fn req(registry: &Registry) -> CompletionRequest {
        let mut r = CompletionRequest {
            model: "m".into(),
            messages: vec![],
            tools: vec![],
            tool_choice: crate::llm::ToolChoice::Required,
            max_tokens: None,
            response_format: None,
        };
        shape(&mut r, registry, &[]);
        r
    }

    fn listed(name: &str, field_type: &str, items: &[(&str, &str)]) -> Listed {
        Listed {
            name: name.into(),
            field_type: field_type.into(),
            label: None,
            items: items
                .iter()
                .map(|(n, t)| (n.to_string(), t.to_string()))
                .collect(),
        }
    }

    #[test]
    fn the_format_asks_for_a_decision_on_each_candidate_and_the_prompt() {
        let registry = crate::tools::builtin_registry();
        let candidates = [
            listed("invoice_number", "string", &[]),
            listed("total", "number", &[]),
            listed("standing_charges", "number", &[]),
            listed("kfz_haftpflicht", "number", &[]),
        ];
        let f = format(&registry, &candidates);
        let s = &f["json_schema"]["schema"];
        assert_eq!(f["json_schema"]["name"], FORMAT_NAME);
        assert_eq!(s["required"], json!(["schema", "prompt"]));
        // Every candidate is kept: the decision is what to add.
        assert!(
            s.pointer("/properties/schema/properties/drop").is_none(),
            "{s}"
        );
        assert_eq!(
            s.pointer("/properties/schema/required"),
            Some(&json!(["more"]))
        );
        assert_eq!(
            s.pointer("/properties/schema/properties/more/maxItems"),
            Some(&json!(MAX_MORE_FIELDS))
        );
        let prompt = &s["properties"]["prompt"];
        assert!(
            prompt["properties"].get("schema_revid").is_none(),
            "{prompt}"
        );
        assert_eq!(
            prompt["properties"]["content"]["maxLength"],
            json!(MAX_PROMPT_CHARS),
            "{prompt}"
        );
        assert!(
            !prompt["required"].to_string().contains("schema_revid"),
            "{prompt}"
        );
        // Without candidates the model names the fields: create_schema's guided arguments.
        let f = format(&registry, &[]);
        assert!(
            f.pointer("/json_schema/schema/properties/schema/properties/fields")
                .is_some(),
            "{f}"
        );
    }

    #[test]
    fn a_decision_keeps_every_candidate_with_its_listed_type_and_adds_named_fields() {
        let candidates = [
            listed("invoice_number", "string", &[]),
            listed("invoice_date", "date", &[]),
            listed("supplier_address", "string", &[]),
            listed(
                "line_items",
                "array",
                &[("description", "string"), ("amount", "number")],
            ),
        ];
        let answer = json!({
            "drop": ["invoice_date", "supplier_address", "not_a_candidate", 3],
            "more": [{"name": "IBAN", "type": "string"}, {"name": "Invoice Number", "type": "number"},
                     {"name": "  ", "type": "string"}, {"type": "string"},
                     {"name": "Kundennummer", "type": "string"}, {"name": "vat_rate", "type": "number"},
                     {"name": "name", "type": "string"}, {"name": "document_type", "type": "string"}],
        });
        let fields = decided_fields(
            answer.as_object().unwrap(),
            &candidates,
            "Invoice number: 7\nIBAN: DE00 1234\nKundennummer 12",
        )
        .unwrap();
        assert_eq!(
            fields,
            json!({"invoice_number": "string", "invoice_date": "date",
                   "supplier_address": "string",
                   "line_items": [{"description": "string", "amount": "number"}],
                   "iban": "string", "kundennummer": "string", "vat_rate": "number"}),
            "no candidate is left out (a `drop` list is not followed); an added name is the \
             document's words (`Kundennummer`) or the lexicon's (`vat_rate`), not the request's \
             (`name`, `document_type`)"
        );
        // Not a decision: the schema part is create_schema's arguments as they are.
        let fields_form = json!({"fields": [{"name": "total", "type": "number"}]});
        assert_eq!(
            decided_fields(fields_form.as_object().unwrap(), &candidates, ""),
            None
        );
    }

    #[test]
    fn a_decision_answer_becomes_create_schema_fields_from_the_requests_brief() {
        let registry = crate::tools::builtin_registry();
        let brief = "Document:\nTotal: 12.00\n<candidates kind=\"receipt\">\n\
                     total: number = 12.00\nshop: string = Corner\n</candidates>";
        let mut r = CompletionRequest {
            model: "m".into(),
            messages: vec![Message::text(Role::User, brief)],
            tools: vec![],
            tool_choice: crate::llm::ToolChoice::Required,
            max_tokens: None,
            response_format: None,
        };
        let candidates = analysis::parse_brief(brief);
        assert_eq!(candidates.len(), 2);
        shape(&mut r, &registry, &candidates);
        assert_eq!(r.messages.last().unwrap().joined_text(), INSTRUCTION_DECIDE);
        let text = json!({"schema": {"name": "Receipt", "drop": ["shop"]},
                          "prompt": {"name": "P", "content": "Extract."}});
        let mut resp = answer(&text.to_string());
        assert_eq!(split(&r, &mut resp), 3);
        let calls = resp.message.tool_calls();
        let schema: Value = serde_json::from_str(calls[0].2).unwrap();
        assert_eq!(
            schema,
            json!({"name": "Receipt", "fields": {"total": "number", "shop": "string"}})
        );
    }

    #[test]
    fn an_answer_becomes_three_calls_and_other_answers_stay() {
        let registry = crate::tools::builtin_registry();
        let r = req(&registry);
        let text = json!({"schema": {"fields": [{"name": "total", "type": "number"}]},
                          "prompt": {"name": "P", "content": "Extract.", "schema_revid": "x:1"}});
        let mut resp = answer(&format!("```json\n{text}\n```"));
        assert_eq!(split(&r, &mut resp), 3);
        let calls = resp.message.tool_calls();
        let names: Vec<&str> = calls.iter().map(|c| c.1).collect();
        assert_eq!(
            names,
            [CreateSchema::NAME, CreatePrompt::NAME, RunExtraction::NAME]
        );
        assert!(!calls[1].2.contains("schema_revid"), "an invented id goes");
        assert_eq!(resp.finish, FinishReason::ToolUse);
        // Prose, or a request that was not the one call, is left alone.
        let mut prose = answer("I will now create a schema.");
        assert_eq!(split(&r, &mut prose), 0);
        let mut other = answer(&text.to_string());
        let mut plain = r.clone();
        plain.response_format = None;
        assert_eq!(split(&plain, &mut other), 0);
        assert!(other.message.tool_calls().is_empty());
    }

    #[test]
    fn the_runs_schema_fills_a_missing_required_schema_revid_only() {
        let registry = crate::tools::builtin_registry();
        let goal = GoalState {
            missing: vec![Part::Prompt, Part::Extraction],
            schema: Some("s:1".into()),
            prompt: Some("p:1".into()),
            ..GoalState::default()
        };
        let call = ToolCall::new("c", CreatePrompt::NAME, r#"{"content":"x"}"#);
        let filled = fill_pins(&registry, Some(&goal), &call);
        let v: Value = serde_json::from_str(&filled.args).unwrap();
        assert_eq!(v["schema_revid"], "s:1");
        // Given, it stays; an optional argument (run_extraction's prompt) is not filled.
        let given = ToolCall::new(
            "c",
            CreatePrompt::NAME,
            r#"{"content":"x","schema_revid":"t:2"}"#,
        );
        assert_eq!(fill_pins(&registry, Some(&goal), &given), given);
        let ex = ToolCall::new("c", RunExtraction::NAME, "{}");
        assert_eq!(fill_pins(&registry, Some(&goal), &ex), ex);
        // Without a schema, nothing to fill: the tool says what is missing.
        assert_eq!(fill_pins(&registry, None, &call), call);
    }
}

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
//! A server that ignores the format answers as it would have (calls, text calls or prose: the
//! step-by-step path goes on); one that refuses it gets the same round without it and without
//! the instruction (the round as it was before, [`super::round::call`]).

use super::constrain;
use super::goals::{GoalState, Part};
use super::transcript::{ToolCall, Transcript};
use super::{RunSpec, context};
use crate::llm::{Block, CompletionRequest, CompletionResponse, FinishReason, Message, Role};
use crate::tools::Registry;
use crate::tools::extraction::RunExtraction;
use crate::tools::prompts::CreatePrompt;
use crate::tools::schemas::CreateSchema;
use crate::tools::typed::Declaration;
use serde_json::{Map, Value, json};

/// The `json_schema` name of the one-call format (how its answer is told apart).
pub const FORMAT_NAME: &str = "proposal";

/// The round's instruction, after the working-state block.
pub const INSTRUCTION: &str = "Answer with one JSON object and nothing else: \"schema\" holds \
    the arguments of `create_schema` (the fields worth extracting from this document, \
    preferably named after the candidates), \"prompt\" those of `create_prompt` without \
    schema_revid (a name, and content: the instructions the extraction model gets with the \
    document text). agentd creates the schema, then the prompt for it, then runs the extraction.";

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
/// instruction. `candidates`: the names of the first message's candidate list.
pub fn shape(req: &mut CompletionRequest, registry: &Registry, candidates: &[String]) {
    req.response_format = Some(format(registry, candidates));
    req.messages.push(Message::text(Role::User, INSTRUCTION));
}

/// The `response_format`: an object of the two tools' guided arguments, the schema's field names
/// offered from the candidates, the prompt's `schema_revid` left out (agentd fills it in).
pub fn format(registry: &Registry, candidates: &[String]) -> Value {
    let guided = |name: &str, candidates: &[String]| {
        registry
            .get(name)
            .map(|t| t.guided_parameters(candidates))
            .unwrap_or_else(|| json!({"type": "object"}))
    };
    // create_schema's guided parameters offer the candidates as field names.
    let schema = guided(CreateSchema::NAME, candidates);
    let mut prompt = guided(CreatePrompt::NAME, &[]);
    if let Some(p) = prompt.get_mut("properties").and_then(Value::as_object_mut) {
        p.remove("schema_revid");
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
    let Some((schema, mut prompt)) = parse(&resp.message.joined_text()) else {
        return 0;
    };
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

/// Whether the model has nothing to add once the goal is met: the run's last call is a
/// successful extraction whose result flags nothing (no value the document lacks, no field
/// empty while the document has it, not cut, the whole text read). Then the run ends with a
/// summary from its records instead of a summary round.
pub fn nothing_to_add(constrained: bool, goal: Option<&GoalState>, t: &Transcript) -> bool {
    let met = goal.is_some_and(|g| g.met() && g.suggestions.is_none() && g.extraction.is_some());
    let Some(last) = t.history.last() else {
        return false;
    };
    if !(constrained && met && last.tool == RunExtraction::NAME && !last.is_error) {
        return false;
    }
    let Ok(Value::Object(result)) = serde_json::from_str::<Value>(&last.content) else {
        // Truncated for the model, or not JSON: let the model look.
        return false;
    };
    let flagged = ["ungrounded_note", "empty_but_in_document", "finish_reason"]
        .iter()
        .any(|k| result.contains_key(*k));
    !flagged && result.get("input_truncated") != Some(&json!(true))
}

/// The final text of a run that ended with nothing for the model to add.
pub fn summary(goal: &GoalState) -> String {
    format!(
        "Proposed schema {} (fields: {}), prompt {} and extraction {}; every extracted value \
         was found in the document. (Summary written by agentd from the run's records.)",
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
        shape(&mut r, registry, &["invoice_number".into()]);
        r
    }

    #[test]
    fn the_format_asks_for_both_tools_arguments_with_the_candidates() {
        let registry = crate::tools::builtin_registry();
        let f = format(&registry, &["invoice_number".into(), "total".into()]);
        let s = &f["json_schema"]["schema"];
        assert_eq!(f["json_schema"]["name"], FORMAT_NAME);
        assert_eq!(s["required"], json!(["schema", "prompt"]));
        let name = s
            .pointer("/properties/schema/properties/fields/items/properties/name/anyOf/0/enum")
            .expect("candidate names");
        assert_eq!(name, &json!(["invoice_number", "total"]));
        let prompt = &s["properties"]["prompt"];
        assert!(
            prompt["properties"].get("schema_revid").is_none(),
            "{prompt}"
        );
        assert!(prompt["properties"].get("content").is_some(), "{prompt}");
        assert!(
            !prompt["required"].to_string().contains("schema_revid"),
            "{prompt}"
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

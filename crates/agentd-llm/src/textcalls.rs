//! Tool calls written as text. Servers without a tool-call parser (llama.cpp, Ollama, vLLM
//! without `--tool-call-parser`) and Hermes/Qwen chat templates hand the model's calls back as
//! `content`: `<tool_call>{…}</tool_call>`, a bare `{"name": …, "arguments": …}`, a fenced
//! ```json block, or an array of those. [`recover`] turns such text into real tool calls, for
//! every provider in one place, and only for names of tools that were offered.

use super::{Block, CompletionResponse, FinishReason};
use serde_json::Value;

/// One call found in text: (tool name, arguments as JSON text).
pub type TextCall = (String, String);

/// If `resp` has no tool calls and its text holds calls of tools in `offered`, replaces the
/// text with those calls. Returns how many calls were recovered (0: `resp` unchanged).
pub fn recover(resp: &mut CompletionResponse, offered: &[String]) -> usize {
    if !resp.message.tool_calls().is_empty() || offered.is_empty() {
        return 0;
    }
    let text = resp.message.joined_text();
    let mut calls = parse(&text, offered);
    if calls.is_empty()
        && resp.finish == FinishReason::MaxTokens
        && let Some(call) = cut_call(&text, offered)
    {
        // The arguments are unfinished: `repair` closes them and tells the model.
        calls.push(call);
    }
    if calls.is_empty() {
        return 0;
    }
    let n = calls.len();
    resp.message.content = calls
        .into_iter()
        .enumerate()
        .map(|(i, (name, arguments))| Block::ToolUse {
            id: format!("text_{i}"),
            name,
            arguments,
        })
        .collect();
    resp.finish = FinishReason::ToolUse;
    n
}

/// Every call in `text` whose name is in `offered`, in order.
pub fn parse(text: &str, offered: &[String]) -> Vec<TextCall> {
    let mut out = Vec::new();
    let (pieces, every) = candidates(text);
    for candidate in pieces {
        let Ok(v) = serde_json::from_str::<Value>(candidate.trim()) else {
            continue;
        };
        collect(&v, offered, &mut out);
        if !out.is_empty() && !every {
            break;
        }
    }
    if out.is_empty() {
        // Calls one after another, then anything (a small model runs on into prose or into
        // echoing its prompt until the output cap): the JSON values from the first `{` or `[`
        // up to the first text that is not JSON.
        if let Some(from) = text.find(['{', '[']).and_then(|at| text.get(at..)) {
            let values = serde_json::Deserializer::from_str(from).into_iter::<Value>();
            for v in values.map_while(Result::ok) {
                collect(&v, offered, &mut out);
            }
        }
    }
    out
}

/// Ends the arguments of a call [`cut_call`] recovered: `repair` closes such arguments (and
/// only such: a malformed call that did not hit the output cap stays an error the model
/// corrects). Stored with the call, so a resumed run repairs it the same way.
pub const CUT_MARK: &str = "\u{2026}[cut at the output limit]";

/// The first call in `text` that the output cap cut off: `{"name": "<offered>", "arguments":
/// {…` with the arguments unfinished, returned as written followed by [`CUT_MARK`].
pub fn cut_call(text: &str, offered: &[String]) -> Option<TextCall> {
    static START: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r#"\{\s*"name"\s*:\s*"([A-Za-z_][A-Za-z0-9_]*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*\{"#,
        )
        .expect("valid regex") // checked: a constant pattern, compiled by the unit tests
    });
    let c = START
        .captures_iter(text)
        .find(|c| offered.iter().any(|t| t == &c[1]))?;
    // The match ends with the `{` that opens the arguments.
    let args = text.get(c.get(0)?.end().checked_sub(1)?..)?;
    Some((c[1].to_string(), format!("{args}{CUT_MARK}")))
}

/// Pieces of `text` that may be JSON calls, most specific form first; `true` when every piece
/// is a call of its own (tagged calls) rather than alternative readings of one text.
fn candidates(text: &str) -> (Vec<&str>, bool) {
    let mut out = Vec::new();
    // <tool_call>…</tool_call> (Hermes, Qwen); several tags are several calls.
    let tagged: Vec<&str> = text
        .split("<tool_call>")
        .skip(1)
        .map(|s| s.split("</tool_call>").next().unwrap_or(s))
        .collect();
    if !tagged.is_empty() {
        return (tagged, true);
    }
    // ```json … ``` or ``` … ``` fences.
    let mut rest = text;
    while let Some((_, after)) = rest.split_once("```") {
        let (lang, body) = after.split_once('\n').unwrap_or(("", after));
        let lang = lang.trim();
        let Some((inside, next)) = body.split_once("```") else {
            break;
        };
        if lang.is_empty() || lang.eq_ignore_ascii_case("json") {
            out.push(inside);
        }
        rest = next;
    }
    // The whole text, then the span from the first `{`/`[` to the last `}`/`]`.
    out.push(text);
    if let (Some(a), Some(b)) = (text.find(['{', '[']), text.rfind(['}', ']']))
        && a < b
        && let Some(span) = text.get(a..=b)
    {
        out.push(span);
    }
    (out, false)
}

fn collect(v: &Value, offered: &[String], out: &mut Vec<TextCall>) {
    match v {
        Value::Array(items) => items.iter().for_each(|i| collect(i, offered, out)),
        Value::Object(o) => {
            // {"name", "arguments"} or {"name", "parameters"}, optionally under "function".
            let f = o.get("function").filter(|f| f.is_object()).unwrap_or(v);
            let Some(name) = f["name"].as_str() else {
                return;
            };
            if !offered.iter().any(|t| t == name) {
                return;
            }
            let args = match f.get("arguments").or_else(|| f.get("parameters")) {
                None | Some(Value::Null) => "{}".to_string(),
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
            };
            out.push((name.to_string(), args));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // The offline model's names of the tools (the tools themselves sit above this crate).
    use crate::offline::names::{CREATE_SCHEMA, GET_DOCUMENT};

    /// The tools offered; the texts below are model output, which names them.
    fn offered() -> Vec<String> {
        vec![CREATE_SCHEMA.into(), GET_DOCUMENT.into()]
    }

    #[test]
    fn tagged_calls_become_calls() {
        let t = "Sure.\n<tool_call>\n{\"name\": \"get_document\", \"arguments\": {}}\n</tool_call>\n<tool_call>{\"name\": \"create_schema\", \"arguments\": {\"name\": \"x\"}}</tool_call>";
        assert_eq!(
            parse(t, &offered()),
            vec![
                (GET_DOCUMENT.to_string(), "{}".to_string()),
                (CREATE_SCHEMA.to_string(), r#"{"name":"x"}"#.to_string())
            ]
        );
    }

    #[test]
    fn bare_fenced_and_arrays() {
        let bare = r#"{"name": "get_document", "arguments": "{\"document_id\": \"d\"}"}"#;
        assert_eq!(parse(bare, &offered())[0].1, r#"{"document_id": "d"}"#);
        let fenced = "I will call:\n```json\n[{\"name\": \"get_document\", \"parameters\": {}}, {\"function\": {\"name\": \"create_schema\", \"arguments\": {}}}]\n```\n";
        assert_eq!(parse(fenced, &offered()).len(), 2);
        let prose = "Here it is: {\"name\": \"get_document\", \"arguments\": {}} done";
        assert_eq!(parse(prose, &offered()).len(), 1);
    }

    #[test]
    fn calls_followed_by_runaway_text_are_found() {
        // What a 0.5B model wrote before it hit the output cap (eval, 2026-11-23).
        let t = "{\n \"name\": \"create_schema\",\n \"arguments\": {\"name\": \"claim\"}\n}\n\
                 {\"name\": \"get_document\", \"arguments\": {}}\n\n\
                 [run state] schema: none yet; {\"name\": \"create_schema\", \"argu";
        assert_eq!(
            parse(t, &offered()),
            vec![
                (CREATE_SCHEMA.to_string(), r#"{"name":"claim"}"#.to_string()),
                (GET_DOCUMENT.to_string(), "{}".to_string())
            ]
        );
    }

    #[test]
    fn a_call_cut_by_the_output_cap_is_recovered_unfinished() {
        let t = "```json\n{\"name\": \"create_schema\", \"arguments\": {\"fields\": {\"a\": \"string\", \"b\": \"str";
        assert_eq!(
            cut_call(t, &offered()),
            Some((
                CREATE_SCHEMA.to_string(),
                format!(r#"{{"fields": {{"a": "string", "b": "str{CUT_MARK}"#)
            ))
        );
        assert_eq!(cut_call(t, &[GET_DOCUMENT.to_string()]), None);
        // Only an answer that hit the cap is read this way.
        let mut resp = CompletionResponse {
            message: super::super::Message::text(super::super::Role::Assistant, t),
            usage: Default::default(),
            finish: FinishReason::EndTurn,
            model: String::new(),
        };
        assert_eq!(recover(&mut resp, &offered()), 0);
        resp.finish = FinishReason::MaxTokens;
        assert_eq!(recover(&mut resp, &offered()), 1);
        assert_eq!(resp.message.tool_calls().len(), 1);
    }

    #[test]
    fn prose_and_unknown_names_stay_text() {
        assert!(parse("I'll read the document first.", &offered()).is_empty());
        assert!(parse(r#"{"name": "rm_rf", "arguments": {}}"#, &offered()).is_empty());
        assert!(parse(r#"{"invoice": 1}"#, &offered()).is_empty());
    }
}

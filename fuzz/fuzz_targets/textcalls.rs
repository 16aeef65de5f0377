//! Tool calls written as text. Two halves, chosen by the first byte:
//! - any text: no panic; every call found names an offered tool; a call recovered from a cut
//!   answer starts with its arguments' `{` and ends with the cut mark; `recover` turns an
//!   answer into exactly the calls `parse` (or `cut_call`) found, or leaves it alone;
//! - calls rendered as a model writes them (`<tool_call>` tags, bare JSON, a fenced list) with
//!   prose around them: every call is recovered, in order, with its arguments.
#![no_main]

use agentd::llm::textcalls::{CUT_MARK, cut_call, parse, recover};
use agentd::llm::{Block, CompletionResponse, FinishReason, Message, Role};
use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};

const OFFERED: [&str; 3] = ["create_schema", "get_document", "run_extraction"];

#[derive(Debug, Arbitrary)]
enum Form {
    Tagged,
    Bare,
    FencedList,
}

#[derive(Debug, Arbitrary)]
struct Call {
    tool: u8,
    args: Vec<(String, ArgValue)>,
    as_string: bool,
}

#[derive(Debug, Arbitrary)]
enum ArgValue {
    Text(String),
    Number(i32),
    Flag(bool),
    List(Vec<String>),
}

impl ArgValue {
    fn json(&self) -> Value {
        match self {
            ArgValue::Text(s) => Value::String(s.clone()),
            ArgValue::Number(n) => Value::from(*n),
            ArgValue::Flag(b) => Value::Bool(*b),
            ArgValue::List(l) => Value::from(l.clone()),
        }
    }
}

fn offered() -> Vec<String> {
    OFFERED.iter().map(|s| s.to_string()).collect()
}

fn any_text(text: &str, finish: FinishReason) {
    let offered = offered();
    let calls = parse(text, &offered);
    for (name, _) in &calls {
        assert!(OFFERED.contains(&name.as_str()), "{name}");
    }
    let cut = cut_call(text, &offered);
    if let Some((name, args)) = &cut {
        assert!(OFFERED.contains(&name.as_str()));
        assert!(
            args.starts_with('{') && args.ends_with(CUT_MARK),
            "{args:?}"
        );
        // Repair closes it into an object, or leaves it for validation to refuse.
        let r = agentd::llm::repair::repair(args, &serde_json::json!({"type": "object"}));
        if !r.notes.is_empty() {
            let v: Value = serde_json::from_str(&r.raw).expect("closed arguments are JSON");
            assert!(v.is_object());
        }
    }
    let mut resp = CompletionResponse {
        message: Message::text(Role::Assistant, text),
        usage: Default::default(),
        finish,
        model: String::new(),
    };
    let n = recover(&mut resp, &offered);
    let expected: Vec<(String, String)> = if !calls.is_empty() {
        calls
    } else if finish == FinishReason::MaxTokens {
        cut.into_iter().collect()
    } else {
        Vec::new()
    };
    assert_eq!(n, expected.len());
    if n == 0 {
        assert_eq!(resp.message.joined_text(), text);
        assert_eq!(resp.finish, finish);
    } else {
        let got: Vec<(String, String)> = resp
            .message
            .content
            .iter()
            .map(|b| match b {
                Block::ToolUse {
                    name, arguments, ..
                } => (name.clone(), arguments.clone()),
                other => panic!("not a call: {other:?}"),
            })
            .collect();
        assert_eq!(got, expected);
        assert_eq!(resp.finish, FinishReason::ToolUse);
    }
}

fn rendered(u: &mut Unstructured) -> arbitrary::Result<()> {
    let form = Form::arbitrary(u)?;
    let calls: Vec<Call> = Vec::arbitrary(u)?;
    let before: String = String::arbitrary(u)?;
    let after: String = String::arbitrary(u)?;
    // Prose that cannot itself be read as a call or a fence.
    let prose = |s: &str| {
        s.chars()
            .filter(|c| !matches!(c, '<' | '`' | '{' | '[' | '}' | ']'))
            .collect::<String>()
    };
    let (before, after) = (prose(&before), prose(&after));
    if calls.is_empty() {
        return Ok(());
    }
    let mut want = Vec::new();
    let mut objects = Vec::new();
    for c in &calls {
        let name = OFFERED[c.tool as usize % OFFERED.len()];
        let args: Map<String, Value> = c.args.iter().map(|(k, v)| (k.clone(), v.json())).collect();
        let args = Value::Object(args);
        let written = if c.as_string {
            Value::String(args.to_string())
        } else {
            args.clone()
        };
        want.push((name.to_string(), args));
        objects.push(serde_json::json!({"name": name, "arguments": written}));
    }
    let n = objects.len();
    let body = match form {
        Form::Tagged => objects
            .iter()
            .map(|o| format!("<tool_call>\n{o}\n</tool_call>"))
            .collect::<Vec<_>>()
            .join("\n"),
        Form::Bare => objects
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n"),
        Form::FencedList => format!("```json\n{}\n```", Value::Array(objects)),
    };
    // The written forms cannot carry their own delimiters inside a value (a tag or a fence in
    // an argument ends the call early): such calls are outside what the forms can express.
    if body.matches("tool_call>").count() != 2 * n * usize::from(matches!(form, Form::Tagged))
        || body.matches("```").count() != 2 * usize::from(matches!(form, Form::FencedList))
    {
        return Ok(());
    }
    let text = format!("{before}\n{body}\n{after}");
    let got = parse(&text, &offered());
    let got: Vec<(String, Value)> = got
        .into_iter()
        .map(|(n, a)| (n, serde_json::from_str(&a).expect("arguments are JSON")))
        .collect();
    assert_eq!(got, want, "{text}");
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => any_text(&String::from_utf8_lossy(rest), FinishReason::EndTurn),
        1 => any_text(&String::from_utf8_lossy(rest), FinishReason::MaxTokens),
        _ => {
            let _ = rendered(&mut Unstructured::new(rest));
        }
    }
});

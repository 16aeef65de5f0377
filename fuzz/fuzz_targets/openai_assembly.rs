//! The OpenAI-compatible adapter's assembly of answers:
//! - any JSON as a body, or as stream chunks: no panic;
//! - an answer (text and tool calls) sent as one body and as a stream cut into chunks at any
//!   points (text and arguments split anywhere, calls interleaved, `id` and `name` repeated in
//!   every delta or sent once) assembles to the same response, and the stream's byte count
//!   never exceeds what the answer holds.
#![no_main]

mod common;

use agentd::llm::openai::response::assembly;
use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

#[derive(Debug, Arbitrary)]
struct Call {
    id: String,
    name: String,
    arguments: String,
    /// Where the arguments are cut (each taken modulo the length, on a char boundary).
    cuts: Vec<u16>,
}

#[derive(Debug, Arbitrary)]
struct Answer {
    text: String,
    text_cuts: Vec<u16>,
    calls: Vec<Call>,
    /// The order in which call deltas are sent (indices into the calls' pieces).
    order: Vec<u8>,
    repeat_id_and_name: bool,
    finish: u8,
    usage: Option<(u32, u32)>,
}

/// `s` cut at `cuts` (char boundaries), in order; no empty pieces.
fn pieces(s: &str, cuts: &[u16]) -> Vec<String> {
    let bounds: Vec<usize> = s.char_indices().map(|(i, _)| i).skip(1).collect();
    let mut at: Vec<usize> = if bounds.is_empty() {
        Vec::new()
    } else {
        cuts.iter()
            .map(|c| bounds[*c as usize % bounds.len()])
            .collect()
    };
    at.sort_unstable();
    at.dedup();
    let mut out = Vec::new();
    let mut from = 0;
    for a in at.into_iter().chain([s.len()]) {
        if a > from {
            out.push(s[from..a].to_string());
            from = a;
        }
    }
    out
}

fn split(u: &mut Unstructured) -> arbitrary::Result<()> {
    let a = Answer::arbitrary(u)?;
    let finish = ["stop", "tool_calls", "length", "content_filter"][a.finish as usize % 4];
    // A server without ids gets ids invented (random): compare only answers that carry them.
    if a.calls.iter().any(|c| c.id.is_empty()) {
        return Ok(());
    }
    let usage = a
        .usage
        .map(|(i, o)| json!({"prompt_tokens": i, "completion_tokens": o}));
    let body = json!({
        "model": "m",
        "usage": usage,
        "choices": [{"index": 0, "finish_reason": finish, "message": {
            "role": "assistant",
            "content": a.text,
            "tool_calls": a.calls.iter().map(|c| json!({
                "id": c.id, "type": "function",
                "function": {"name": c.name, "arguments": c.arguments}
            })).collect::<Vec<_>>(),
        }}],
    });
    let delta = |d: Value| json!({"model": "m", "choices": [{"index": 0, "delta": d}]});
    let mut chunks = vec![delta(json!({"role": "assistant"}))];
    for p in pieces(&a.text, &a.text_cuts) {
        chunks.push(delta(json!({"content": p})));
    }
    // Each call's deltas in order; calls interleaved as `order` says.
    let mut queues: Vec<std::collections::VecDeque<Value>> = a
        .calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut args = pieces(&c.arguments, &c.cuts);
            if args.is_empty() {
                args.push(String::new());
            }
            args.into_iter()
                .enumerate()
                .map(|(k, p)| {
                    let mut f = json!({"arguments": p});
                    let mut d = json!({"index": i, "type": "function"});
                    if k == 0 || a.repeat_id_and_name {
                        f["name"] = json!(c.name);
                        d["id"] = json!(c.id);
                    }
                    d["function"] = f;
                    delta(json!({"tool_calls": [d]}))
                })
                .collect()
        })
        .collect();
    let mut order = a.order.iter().cycle();
    while queues.iter().any(|q| !q.is_empty()) {
        let live: Vec<usize> = (0..queues.len())
            .filter(|i| !queues[*i].is_empty())
            .collect();
        let pick = live[*order.next().unwrap_or(&0) as usize % live.len()];
        chunks.push(queues[pick].pop_front().unwrap());
    }
    chunks.push(
        json!({"model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}),
    );
    if let Some(u) = &usage {
        chunks.push(json!({"model": "m", "choices": [], "usage": u}));
    }
    let whole = assembly::body(&body, "fallback").expect("a body with a choice");
    let (streamed, most) = assembly::stream(&chunks, "fallback").expect("a stream with a choice");
    assert_eq!(streamed.message, whole.message, "{chunks:#?}");
    assert_eq!(streamed.finish, whole.finish);
    assert_eq!(streamed.usage, whole.usage);
    assert_eq!(streamed.model, whole.model);
    // What the assembly counts (review N15): the text, and per call its arguments, id and name
    // and 64 bytes (so many empty calls are bounded too).
    let held = a.text.len()
        + a.calls
            .iter()
            .map(|c| 64 + c.arguments.len() + c.id.len() + c.name.len())
            .sum::<usize>();
    assert!(most <= held, "counted {most} bytes of an answer of {held}");
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        let _ = split(&mut Unstructured::new(rest));
        return;
    }
    let Some(v) = common::value(rest) else {
        return;
    };
    let _ = assembly::body(&v, "fallback");
    let _ = assembly::stream(std::slice::from_ref(&v), "fallback");
    if let Value::Array(chunks) = &v {
        let _ = assembly::stream(chunks, "fallback");
    }
});

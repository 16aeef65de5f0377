//! Token counts for calls whose provider reported none (some vLLM/Ollama stream setups omit
//! `usage`): a real tokenizer (tiktoken's `o200k_base`) over the request and the answer as sent,
//! so caps and budgets never go blind. Counts made here are estimates and marked as such on the
//! run.

use super::{Block, CompletionRequest, Message, Usage};

/// Tokens every chat message costs beyond its text (role and separators), as OpenAI counts.
const PER_MESSAGE: u64 = 4;

/// Tokens of `text` under `o200k_base`.
pub fn count(text: &str) -> u64 {
    tiktoken_rs::o200k_base_singleton()
        .encode_ordinary(text)
        .len() as u64
}

fn message_tokens(m: &Message) -> u64 {
    PER_MESSAGE
        + m.content
            .iter()
            .map(|b| match b {
                Block::Text { text } => count(text),
                Block::ToolUse {
                    name, arguments, ..
                } => count(name) + count(arguments) + PER_MESSAGE,
                Block::ToolResult { content, .. } => count(content),
            })
            .sum::<u64>()
}

/// The input tokens of `req`: every message plus the tool definitions.
pub fn request(req: &CompletionRequest) -> u64 {
    let tools: u64 = req
        .tools
        .iter()
        .map(|t| count(&t.name) + count(&t.description) + count(&t.parameters.to_string()))
        .sum();
    req.messages.iter().map(message_tokens).sum::<u64>() + tools
}

/// The output tokens of an answer.
pub fn answer(m: &Message) -> u64 {
    message_tokens(m).saturating_sub(PER_MESSAGE)
}

/// Usage estimated for `req` answered by `m`.
pub fn estimate(req: &CompletionRequest, m: &Message) -> Usage {
    Usage {
        input_tokens: request(req),
        output_tokens: answer(m),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Role, ToolChoice};

    #[test]
    fn counts_grow_with_text_and_are_not_chars_over_four() {
        assert_eq!(count(""), 0);
        assert_eq!(count("hello world"), 2);
        let req = CompletionRequest {
            model: "m".into(),
            messages: vec![Message::text(Role::User, "Invoice Number: INV-1")],
            tools: vec![],
            tool_choice: ToolChoice::Auto,
            max_tokens: None,
            response_format: None,
        };
        let small = request(&req);
        let mut big = req.clone();
        big.messages
            .push(Message::text(Role::User, "Total: 12.50 EUR ".repeat(50)));
        assert!(request(&big) > small + 200, "{} vs {small}", request(&big));
    }
}

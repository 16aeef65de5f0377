//! Neutral messages to OpenAI chat messages.

#[allow(unused_imports)]
use super::*;

/// Appends the OpenAI messages for neutral message `index`.
pub(super) fn convert_message(
    index: usize,
    msg: &Message,
    out: &mut Vec<ChatCompletionRequestMessage>,
) -> Result<(), String> {
    let text = msg.joined_text();
    let results = msg.content.iter().filter_map(|b| match b {
        Block::ToolResult {
            call_id,
            content,
            is_error,
        } => Some(ChatCompletionRequestMessage::Tool(
            ChatCompletionRequestToolMessage {
                // OpenAI has no error flag on tool messages: say it in the content.
                content: ChatCompletionRequestToolMessageContent::Text(if *is_error {
                    format!("ERROR: {content}")
                } else {
                    content.clone()
                }),
                tool_call_id: call_id.clone(),
            },
        )),
        _ => None,
    });
    let has_tool_use = msg
        .content
        .iter()
        .any(|b| matches!(b, Block::ToolUse { .. }));
    if has_tool_use && msg.role != Role::Assistant {
        return Err(format!(
            "messages[{index}]: tool_use blocks belong to assistant messages (role is {:?})",
            msg.role
        ));
    }
    match msg.role {
        Role::System => out.push(ChatCompletionRequestMessage::System(
            ChatCompletionRequestSystemMessage {
                content: ChatCompletionRequestSystemMessageContent::Text(text),
                name: None,
            },
        )),
        Role::User | Role::Tool => {
            out.extend(results);
            if !text.is_empty() || msg.content.is_empty() {
                if msg.role == Role::Tool {
                    return Err(format!(
                        "messages[{index}]: a tool message carries tool_result blocks only"
                    ));
                }
                out.push(ChatCompletionRequestMessage::User(
                    ChatCompletionRequestUserMessage {
                        content: ChatCompletionRequestUserMessageContent::Text(text),
                        name: None,
                    },
                ));
            }
        }
        Role::Assistant => {
            let calls: Vec<_> = msg
                .tool_calls()
                .into_iter()
                .map(|(id, name, arguments)| {
                    ChatCompletionMessageToolCalls::Function(ChatCompletionMessageToolCall {
                        id: id.to_string(),
                        function: FunctionCall {
                            name: name.to_string(),
                            // Some servers json-decode history arguments; "" is never valid.
                            arguments: if arguments.is_empty() {
                                "{}".into()
                            } else {
                                arguments.into()
                            },
                        },
                    })
                })
                .collect();
            let content = if text.is_empty() && !calls.is_empty() {
                None
            } else {
                Some(ChatCompletionRequestAssistantMessageContent::Text(text))
            };
            out.push(ChatCompletionRequestMessage::Assistant(
                ChatCompletionRequestAssistantMessage {
                    content,
                    tool_calls: (!calls.is_empty()).then_some(calls),
                    ..Default::default()
                },
            ));
            out.extend(results);
        }
    }
    Ok(())
}

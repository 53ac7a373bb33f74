//! The chat-completions wire format: the request body sent, the JSON shapes of a reply, and
//! what one exchange yields ([`Completion`], or a [`CallError`] saying why none came).

use autokernel_core::{InvalidClass, TokenUsage};
use serde::Deserialize;
use serde_json::{json, Value};

use super::config::{OpenAiConfig, TokenLimitField};

/// What one HTTP exchange produced.
#[derive(Debug, Default)]
pub(super) struct Completion {
    /// The answer text, the only part searched for code.
    pub(super) content: String,
    /// Characters of `reasoning_content` (or `reasoning`), counted, never searched.
    pub(super) reasoning_chars: usize,
    /// `stop`, `length`, …; `None` when the server sent none.
    pub(super) finish_reason: Option<String>,
    /// The model's refusal, when it sent one.
    pub(super) refusal: Option<String>,
    /// The tokens the server reported, if it did.
    pub(super) usage: Option<TokenUsage>,
}

/// Why an exchange produced no completion.
pub(super) enum CallError {
    /// Becomes [`Proposal::Invalid`](autokernel_core::Proposal::Invalid) of this class.
    Invalid {
        /// The class.
        class: InvalidClass,
        /// What exactly.
        detail: String,
    },
    /// Stops the run.
    Fatal(String),
}

/// The body of one chat-completions request: `program.md` as the system message, the
/// user message, and the output-token limit in the field `config` names.
pub(super) fn request_body(
    config: &OpenAiConfig,
    system: &str,
    user: &str,
    max_tokens: u32,
) -> Value {
    let mut body = json!({
        "model": config.model,
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ],
        "stream": config.stream,
    });
    let field = config
        .token_limit_field
        .unwrap_or_else(|| TokenLimitField::for_base_url(&config.base_url));
    body[field.name()] = json!(max_tokens);
    if let Some(t) = config.temperature {
        body["temperature"] = json!(t);
    }
    if config.stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}

/// `usage` of a reply or of a stream's chunk.
#[derive(Deserialize)]
pub(super) struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
}

impl WireUsage {
    /// Missing counts read as 0.
    pub(super) fn to_usage(&self) -> TokenUsage {
        TokenUsage {
            prompt_tokens: self.prompt_tokens.unwrap_or(0),
            completion_tokens: self.completion_tokens.unwrap_or(0),
        }
    }
}

/// A choice's `message` (whole reply) or `delta` (a stream's piece).
#[derive(Deserialize)]
pub(super) struct WireMessage {
    pub(super) content: Option<String>,
    pub(super) reasoning_content: Option<String>,
    pub(super) reasoning: Option<String>,
    pub(super) refusal: Option<String>,
}

/// One entry of `choices`.
#[derive(Deserialize)]
pub(super) struct WireChoice {
    pub(super) message: Option<WireMessage>,
    pub(super) delta: Option<WireMessage>,
    pub(super) finish_reason: Option<String>,
}

/// A whole reply, or one chunk of a stream.
#[derive(Deserialize)]
pub(super) struct WireResponse {
    pub(super) choices: Option<Vec<WireChoice>>,
    pub(super) usage: Option<WireUsage>,
    pub(super) error: Option<Value>,
}

/// `text` on one line, whitespace runs joined, cut to `max` characters with `…`.
pub(super) fn snippet(text: &str, max: usize) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() > max {
        format!("{}…", one_line.chars().take(max).collect::<String>())
    } else {
        one_line
    }
}

/// The human part of an error body: `error.message`, `error` as a string, `detail`, or the
/// start of the text.
pub(super) fn error_message(body: &str) -> String {
    let from_json = serde_json::from_str::<Value>(body).ok().and_then(|v| {
        let e = v.get("error").or_else(|| v.get("detail"))?;
        Some(match e.get("message").and_then(Value::as_str) {
            Some(m) => m.to_string(),
            None => e.as_str().map_or_else(|| e.to_string(), str::to_string),
        })
    });
    snippet(&from_json.unwrap_or_else(|| body.to_string()), 300)
}

/// Reads a whole (not streamed) reply body.
pub(super) fn parse_json_completion(body: &[u8]) -> Result<Completion, CallError> {
    let text = String::from_utf8_lossy(body);
    let wire: WireResponse = serde_json::from_slice(body).map_err(|e| CallError::Invalid {
        class: InvalidClass::MalformedResponse,
        detail: format!("not a chat completion ({e}): `{}`", snippet(&text, 200)),
    })?;
    if let Some(err) = wire.error {
        return Err(CallError::Invalid {
            class: InvalidClass::ServerError,
            detail: error_message(&json!({ "error": err }).to_string()),
        });
    }
    let choice = wire
        .choices
        .and_then(|c| c.into_iter().next())
        .ok_or_else(|| CallError::Invalid {
            class: InvalidClass::MalformedResponse,
            detail: format!("no choices in the reply: `{}`", snippet(&text, 200)),
        })?;
    let message = choice.message.or(choice.delta);
    let reasoning = message
        .as_ref()
        .and_then(|m| m.reasoning_content.as_ref().or(m.reasoning.as_ref()))
        .map_or(0, |r| r.chars().count());
    Ok(Completion {
        content: message
            .as_ref()
            .and_then(|m| m.content.clone())
            .unwrap_or_default(),
        reasoning_chars: reasoning,
        finish_reason: choice.finish_reason,
        refusal: message.and_then(|m| m.refusal),
        usage: wire.usage.as_ref().map(WireUsage::to_usage),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_message_prefers_the_servers_words() {
        assert_eq!(
            error_message("{\"error\":{\"message\":\"Rate limit reached\",\"type\":\"x\"}}"),
            "Rate limit reached"
        );
        assert_eq!(error_message("{\"detail\":\"Not Found\"}"), "Not Found");
        assert_eq!(
            error_message("<html>\n bad gateway </html>"),
            "<html> bad gateway </html>"
        );
    }
}

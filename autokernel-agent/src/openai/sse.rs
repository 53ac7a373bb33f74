//! [`SseReader`]: reads a streamed (server-sent events) chat completion into one
//! [`Completion`].

use autokernel_core::InvalidClass;
use serde_json::json;

use super::wire::{error_message, snippet, CallError, Completion, WireResponse};

/// Reads a server-sent-events body: `data: {json}` lines, `[DONE]`, comments; the chunks'
/// `choices[0].delta.content` pieces are joined, the last `usage` seen is kept (a final
/// chunk may carry only usage, with `choices` empty or null).
#[derive(Default)]
pub(super) struct SseReader {
    buffer: Vec<u8>,
    completion: Completion,
    done: bool,
}

impl SseReader {
    /// Adds bytes; returns whether `[DONE]` arrived.
    pub(super) fn feed(&mut self, bytes: &[u8]) -> Result<bool, CallError> {
        self.buffer.extend_from_slice(bytes);
        while let Some(pos) = self.buffer.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buffer.drain(..=pos).collect();
            self.line(&line)?;
            if self.done {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The body ended: reads a last line without a newline.
    pub(super) fn finish(&mut self) -> Result<(), CallError> {
        if !self.buffer.is_empty() {
            let line = std::mem::take(&mut self.buffer);
            self.line(&line)?;
        }
        Ok(())
    }

    /// Reads one line of the stream, with or without its line ending.
    fn line(&mut self, raw: &[u8]) -> Result<(), CallError> {
        let text = String::from_utf8_lossy(raw);
        let line = text.trim_end_matches(['\n', '\r']);
        let Some(data) = line.strip_prefix("data:") else {
            return Ok(()); // comments (`:`), `event:`, `id:`, blank separators
        };
        let data = data.trim();
        if data.is_empty() {
            return Ok(());
        }
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: WireResponse = serde_json::from_str(data).map_err(|e| CallError::Invalid {
            class: InvalidClass::MalformedResponse,
            detail: format!("a stream chunk is not JSON ({e}): `{}`", snippet(data, 200)),
        })?;
        if let Some(err) = chunk.error {
            return Err(CallError::Invalid {
                class: InvalidClass::ServerError,
                detail: error_message(&json!({ "error": err }).to_string()),
            });
        }
        if let Some(u) = &chunk.usage {
            self.completion.usage = Some(u.to_usage());
        }
        for choice in chunk.choices.into_iter().flatten() {
            if let Some(delta) = choice.delta.or(choice.message) {
                if let Some(c) = delta.content {
                    self.completion.content.push_str(&c);
                }
                if let Some(r) = delta.reasoning_content.or(delta.reasoning) {
                    self.completion.reasoning_chars += r.chars().count();
                }
                if let Some(r) = delta.refusal {
                    self.completion
                        .refusal
                        .get_or_insert_with(String::new)
                        .push_str(&r);
                }
            }
            if choice.finish_reason.is_some() {
                self.completion.finish_reason = choice.finish_reason;
            }
        }
        Ok(())
    }

    /// The completion read, or `incomplete_stream` when the stream ended with neither
    /// `finish_reason` nor `[DONE]`.
    pub(super) fn into_completion(self) -> Result<Completion, CallError> {
        if !self.done && self.completion.finish_reason.is_none() {
            return Err(CallError::Invalid {
                class: InvalidClass::IncompleteStream,
                detail: format!(
                    "the stream ended without finish_reason or [DONE] after {} characters",
                    self.completion.content.chars().count()
                ),
            });
        }
        Ok(self.completion)
    }
}

#[cfg(test)]
mod tests {
    use autokernel_core::TokenUsage;

    use super::*;

    #[test]
    fn sse_reader_joins_deltas_and_keeps_a_usage_only_final_chunk() {
        let mut r = SseReader::default();
        let body = concat!(
            ": keep-alive\n\n",
            "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"lo\",\"reasoning_content\":\"abc\"},\"finish_reason\":null}]}\r\n\r\n",
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2}}\n\n",
            "data: {\"choices\":null,\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}\n\n",
            "data: [DONE]\n\n"
        );
        // fed in awkward pieces, as a network delivers them
        let mut done = false;
        for piece in body.as_bytes().chunks(7) {
            done = r.feed(piece).ok().unwrap();
            if done {
                break;
            }
        }
        assert!(done);
        let c = r.into_completion().ok().unwrap();
        assert_eq!(c.content, "Hello");
        assert_eq!(c.reasoning_chars, 3);
        assert_eq!(c.finish_reason.as_deref(), Some("stop"));
        assert_eq!(
            c.usage,
            Some(TokenUsage {
                prompt_tokens: 7,
                completion_tokens: 3
            })
        );
    }
}

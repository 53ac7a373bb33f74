//! [`OpenAiConfig`]: the settings of the [`OpenAiAgent`](super::OpenAiAgent), with their
//! defaults and how they are read from the environment.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use autokernel_core::AgentError;

use crate::env;

/// Which request field carries the output-token limit. OpenAI's own API wants
/// `max_completion_tokens` (and refuses `max_tokens` for its reasoning models); most other
/// servers read `max_tokens` (llama.cpp's Python server ignores `max_completion_tokens`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenLimitField {
    /// `max_tokens`.
    MaxTokens,
    /// `max_completion_tokens`.
    MaxCompletionTokens,
}

impl TokenLimitField {
    /// `max_completion_tokens` for `api.openai.com`, `max_tokens` for anything else.
    pub fn for_base_url(base_url: &str) -> Self {
        if base_url.contains("api.openai.com") {
            TokenLimitField::MaxCompletionTokens
        } else {
            TokenLimitField::MaxTokens
        }
    }

    /// The field's name in the request body.
    pub(super) fn name(self) -> &'static str {
        match self {
            TokenLimitField::MaxTokens => "max_tokens",
            TokenLimitField::MaxCompletionTokens => "max_completion_tokens",
        }
    }
}

/// Settings of the [`OpenAiAgent`](super::OpenAiAgent). Build with [`OpenAiConfig::new`]
/// (defaults) or [`OpenAiConfig::from_env`]; every field is public for flags to override.
///
/// `Debug` prints `api_key` as `<redacted>`; the key is sent only in the `Authorization`
/// header and never logged.
#[derive(Clone)]
pub struct OpenAiConfig {
    /// The API root, ending in `/v1` for most servers (default `https://api.openai.com/v1`);
    /// requests go to `{base_url}/chat/completions`.
    pub base_url: String,
    /// Bearer token; `None` for local servers that need none.
    pub api_key: Option<String>,
    /// The model name the server knows, e.g. `gpt-5` or `qwen2.5-coder:32b`.
    pub model: String,
    /// Sampling temperature; `None` leaves the server's default (some models accept no
    /// other value).
    pub temperature: Option<f32>,
    /// Output-token budget of one request (default 8192). A reply cut at this limit is
    /// retried once with twice the budget.
    pub max_output_tokens: u32,
    /// Which request field carries `max_output_tokens`; `None` (the default) picks by
    /// `base_url` ([`TokenLimitField::for_base_url`]).
    pub token_limit_field: Option<TokenLimitField>,
    /// Wall-clock limit of one HTTP request, reply included (default 300 s).
    pub request_timeout: Duration,
    /// The server's context window in tokens (default 32768). The prompt is kept within
    /// this minus `max_output_tokens`, estimated at 4 characters per token, by dropping the
    /// oldest experiments first.
    pub context_tokens: usize,
    /// Ask for a streamed (server-sent events) reply (default `false`).
    pub stream: bool,
    /// The instruction book sent as the system prompt: the workspace's copy of
    /// `program.md`, read again before every request so that edits apply at once.
    pub program_md: PathBuf,
    /// Attempts per request when the server answers 429 or 5xx or the connection fails
    /// (default 4).
    pub max_attempts: u32,
    /// Wait before the first retry, doubled after each (default 1 s); a `Retry-After`
    /// header (in seconds) overrides it.
    pub initial_backoff: Duration,
    /// Longest wait between attempts, whatever `Retry-After` says (default 120 s).
    pub max_retry_wait: Duration,
}

impl fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("temperature", &self.temperature)
            .field("max_output_tokens", &self.max_output_tokens)
            .field("token_limit_field", &self.token_limit_field)
            .field("request_timeout", &self.request_timeout)
            .field("context_tokens", &self.context_tokens)
            .field("stream", &self.stream)
            .field("program_md", &self.program_md)
            .field("max_attempts", &self.max_attempts)
            .field("initial_backoff", &self.initial_backoff)
            .field("max_retry_wait", &self.max_retry_wait)
            .finish()
    }
}

/// Default API root.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

impl OpenAiConfig {
    /// Defaults for `model` against [`DEFAULT_BASE_URL`], no key, `program.md` in the
    /// current directory.
    pub fn new(model: impl Into<String>) -> Self {
        OpenAiConfig {
            base_url: DEFAULT_BASE_URL.to_string(),
            api_key: None,
            model: model.into(),
            temperature: None,
            max_output_tokens: 8192,
            token_limit_field: None,
            request_timeout: Duration::from_secs(300),
            context_tokens: 32768,
            stream: false,
            program_md: PathBuf::from("program.md"),
            max_attempts: 4,
            initial_backoff: Duration::from_secs(1),
            max_retry_wait: Duration::from_secs(120),
        }
    }

    /// Reads the configuration from the process environment (names in [`crate::env`](mod@crate::env)).
    ///
    /// # Errors
    /// [`AgentError::Config`] when the model name is missing or a number does not parse.
    pub fn from_env() -> Result<Self, AgentError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// As [`OpenAiConfig::from_env`], reading variables through `lookup` (for tests and
    /// for callers with their own configuration layers). Empty values count as unset.
    ///
    /// # Errors
    /// As [`OpenAiConfig::from_env`].
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, AgentError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let model = get(env::AUTOKERNEL_LLM_MODEL).ok_or_else(|| {
            AgentError::Config(format!(
                "no model name: set {} (or --llm-model) to a model the server knows",
                env::AUTOKERNEL_LLM_MODEL
            ))
        })?;
        let mut c = OpenAiConfig::new(model);
        if let Some(url) = get(env::OPENAI_BASE_URL) {
            c.base_url = url.trim().trim_end_matches('/').to_string();
        }
        c.api_key = get(env::OPENAI_API_KEY);
        fn num<T: std::str::FromStr>(name: &str, v: &str) -> Result<T, AgentError> {
            v.trim()
                .parse()
                .map_err(|_| AgentError::Config(format!("{name}=`{v}` is not a valid number")))
        }
        if let Some(v) = get(env::AUTOKERNEL_LLM_TEMPERATURE) {
            c.temperature = Some(num(env::AUTOKERNEL_LLM_TEMPERATURE, &v)?);
        }
        if let Some(v) = get(env::AUTOKERNEL_LLM_MAX_TOKENS) {
            c.max_output_tokens = num(env::AUTOKERNEL_LLM_MAX_TOKENS, &v)?;
        }
        if let Some(v) = get(env::AUTOKERNEL_LLM_TIMEOUT_S) {
            c.request_timeout = Duration::from_secs_f64(num(env::AUTOKERNEL_LLM_TIMEOUT_S, &v)?);
        }
        if let Some(v) = get(env::AUTOKERNEL_LLM_CONTEXT_TOKENS) {
            c.context_tokens = num(env::AUTOKERNEL_LLM_CONTEXT_TOKENS, &v)?;
        }
        if let Some(v) = get(env::AUTOKERNEL_LLM_STREAM) {
            c.stream = match v.trim().to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => true,
                "0" | "false" | "no" | "off" => false,
                _ => {
                    return Err(AgentError::Config(format!(
                        "{}=`{v}` is not a boolean (use 1/0, true/false)",
                        env::AUTOKERNEL_LLM_STREAM
                    )))
                }
            };
        }
        if let Some(v) = get(env::AUTOKERNEL_PROGRAM_MD) {
            c.program_md = PathBuf::from(v);
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_key() {
        let mut c = OpenAiConfig::new("m");
        c.api_key = Some("sk-secret-123".into());
        let shown = format!("{c:?}");
        assert!(!shown.contains("sk-secret-123"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn from_lookup_reads_every_variable_and_refuses_bad_numbers() {
        let vars = [
            ("AUTOKERNEL_LLM_MODEL", "qwen"),
            ("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1/"),
            ("OPENAI_API_KEY", ""),
            ("AUTOKERNEL_LLM_TEMPERATURE", "0.2"),
            ("AUTOKERNEL_LLM_MAX_TOKENS", "1000"),
            ("AUTOKERNEL_LLM_TIMEOUT_S", "2.5"),
            ("AUTOKERNEL_LLM_CONTEXT_TOKENS", "4096"),
            ("AUTOKERNEL_LLM_STREAM", "yes"),
            ("AUTOKERNEL_PROGRAM_MD", "/w/program.md"),
        ];
        let look = |n: &str| {
            vars.iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.to_string())
        };
        let c = OpenAiConfig::from_lookup(look).unwrap();
        assert_eq!(c.model, "qwen");
        assert_eq!(c.base_url, "http://127.0.0.1:8080/v1");
        assert_eq!(c.api_key, None, "an empty key counts as unset");
        assert_eq!(c.temperature, Some(0.2));
        assert_eq!(c.max_output_tokens, 1000);
        assert_eq!(c.request_timeout, Duration::from_millis(2500));
        assert_eq!(c.context_tokens, 4096);
        assert!(c.stream);
        assert_eq!(c.program_md, PathBuf::from("/w/program.md"));
        assert_eq!(c.token_limit_field, None);

        let err = OpenAiConfig::from_lookup(|n| (n == "OPENAI_BASE_URL").then(|| "x".into()))
            .unwrap_err();
        assert!(err.to_string().contains("AUTOKERNEL_LLM_MODEL"), "{err}");
        let err = OpenAiConfig::from_lookup(|n| match n {
            "AUTOKERNEL_LLM_MODEL" => Some("m".into()),
            "AUTOKERNEL_LLM_MAX_TOKENS" => Some("lots".into()),
            _ => None,
        })
        .unwrap_err();
        assert!(
            err.to_string().contains("AUTOKERNEL_LLM_MAX_TOKENS=`lots`"),
            "{err}"
        );
        assert_eq!(
            TokenLimitField::for_base_url(DEFAULT_BASE_URL),
            TokenLimitField::MaxCompletionTokens
        );
        assert_eq!(
            TokenLimitField::for_base_url("http://127.0.0.1:11434/v1"),
            TokenLimitField::MaxTokens
        );
    }
}

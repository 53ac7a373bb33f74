//! [`OpenAiAgent`]: proposes kernels by asking any server that speaks the OpenAI
//! chat-completions API (OpenAI, vLLM, Ollama, llama.cpp's server, …).

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use autokernel_core::{Agent, AgentError, Proposal, ProposalContext, TokenUsage};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::env;
use crate::prompt::{build_user_message, estimate_tokens};
use crate::reply::parse_reply;

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

    fn name(self) -> &'static str {
        match self {
            TokenLimitField::MaxTokens => "max_tokens",
            TokenLimitField::MaxCompletionTokens => "max_completion_tokens",
        }
    }
}

/// Settings of the [`OpenAiAgent`]. Build with [`OpenAiConfig::new`] (defaults) or
/// [`OpenAiConfig::from_env`]; every field is public for flags to override.
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

/// The agent that asks a chat-completions server for the next `kernel.py`.
///
/// Each proposal is one conversation of two messages: the system prompt is `program.md`
/// (re-read every time), the user message is built by [`build_user_message`] within the
/// context budget. Every way a reply can be unusable becomes a [`Proposal::Invalid`] whose
/// reason starts with its class:
///
/// | class | when |
/// | --- | --- |
/// | `truncated` | `finish_reason: "length"` twice: once at `max_output_tokens`, once at double |
/// | `no_code` | no fenced block in `content` (`reasoning_content` is never searched) |
/// | `unterminated_fence` | the last block is never closed |
/// | `missing_kernel_fn` | no complete python block defines `kernel_fn` |
/// | `http_<status>` | a status other than 2xx, after retries for 429 and 5xx (501 aside); a 400 that says the context window is too small names the settings to change |
/// | `timeout` | no complete reply within `request_timeout` |
/// | `connection` | the server could not be reached, after retries |
/// | `server_truncated_prompt` | the server counted under half the estimated prompt tokens |
/// | `context_budget` | the prompt does not fit `context_tokens` even without history |
/// | `malformed_response` | the body is not a chat completion (bad JSON, no choices) |
/// | `incomplete_stream` | a stream ended with neither `finish_reason` nor `[DONE]` |
/// | `server_error` | a stream carried an `error` object |
///
/// 401, 403, 404, 405 and 501 are [`AgentError::Fatal`]: a wrong key, URL or model name,
/// or a URL that does not take chat completions, does not get better by asking again.
///
/// # Giving up
///
/// An unusable reply is a row, not a stop, but a streak of them is: the agent answers
/// [`AgentError::Fatal`] (the loop logs that proposal and stops; `autokernel run` exits
/// 2) instead of letting a misconfigured or broken server fill an overnight run with
/// `invalid` rows and end it "successfully". Two counts, both across targets, both of
/// proposals (each request already retried as above):
///
/// - [`MAX_NO_COMPLETION_IN_A_ROW`] (3) proposals in a row whose request got **no chat
///   completion**: `connection`, `timeout`, `http_<status>` (after the retries of 429 and
///   5xx), `malformed_response` (a 200 with HTML, bad JSON, no choices),
///   `incomplete_stream`, `server_error`. None of these is the model's doing; three in a
///   row mean the server is down or broken, or the base URL points at something else. Any
///   chat completion resets the count.
/// - [`MAX_NO_CANDIDATE_IN_A_ROW`] (8) proposals in a row that gave **no candidate** for
///   any reason, including real chat completions without usable code (`no_code`,
///   `unterminated_fence`, `missing_kernel_fn`, `truncated`) and `server_truncated_prompt`
///   or `context_budget`. One such reply can be the model's bad luck; eight in a row mean
///   the model does not answer in the format `program.md` asks for (a wrong `--llm-model`,
///   a base or tiny model, a server that cuts prompts or replies). Any candidate resets it.
///
/// The error starts with the last proposal's reason and names the count and what to check.
#[derive(Debug)]
pub struct OpenAiAgent {
    config: OpenAiConfig,
    client: reqwest::Client,
    endpoint: String,
    /// Proposals in a row whose last request got no chat completion (after retries).
    no_completion_in_a_row: u32,
    /// The class of each proposal in a row that gave no candidate, oldest first.
    no_candidate_in_a_row: Vec<String>,
}

/// Proposals in a row that may end without a chat completion from the server (unreachable,
/// timed out, an HTTP error after retries, a body that is not a chat completion) before the
/// agent gives up with [`AgentError::Fatal`]: a server that is down, broken or not the one
/// meant would otherwise fill `results.tsv` with `invalid` rows. The server's fault, so
/// the count is small.
pub const MAX_NO_COMPLETION_IN_A_ROW: u32 = 3;

/// Proposals in a row that may end without a candidate, for any reason (a chat completion
/// without usable code included), before the agent gives up with [`AgentError::Fatal`].
/// Larger than [`MAX_NO_COMPLETION_IN_A_ROW`] because a reply without code can be a good
/// model's occasional slip; as large as the orchestrator's default plateau
/// (`OrchestratorOptions::plateau`, 8), so that a one-target run whose every reply is
/// unusable stops with this error instead of moving on from its only target "done".
pub const MAX_NO_CANDIDATE_IN_A_ROW: u32 = 8;

/// Whether the last request of a proposal got a chat completion, for the give-up counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exchange {
    /// The server answered with a chat completion (usable or not).
    Completion,
    /// The request failed: no chat completion.
    NoCompletion,
    /// Nothing was sent (the prompt did not fit).
    NotSent,
}

/// What one HTTP exchange produced.
#[derive(Debug, Default)]
struct Completion {
    content: String,
    reasoning_chars: usize,
    finish_reason: Option<String>,
    refusal: Option<String>,
    usage: Option<TokenUsage>,
}

/// Why an exchange produced no completion.
enum CallError {
    /// Becomes [`Proposal::Invalid`] with this reason.
    Invalid(String),
    /// Stops the run.
    Fatal(String),
}

#[derive(Deserialize)]
struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
}

impl WireUsage {
    fn to_usage(&self) -> TokenUsage {
        TokenUsage {
            prompt_tokens: self.prompt_tokens.unwrap_or(0),
            completion_tokens: self.completion_tokens.unwrap_or(0),
        }
    }
}

#[derive(Deserialize)]
struct WireMessage {
    content: Option<String>,
    reasoning_content: Option<String>,
    reasoning: Option<String>,
    refusal: Option<String>,
}

#[derive(Deserialize)]
struct WireChoice {
    message: Option<WireMessage>,
    delta: Option<WireMessage>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireResponse {
    choices: Option<Vec<WireChoice>>,
    usage: Option<WireUsage>,
    error: Option<Value>,
}

fn snippet(text: &str, max: usize) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() > max {
        format!("{}…", one_line.chars().take(max).collect::<String>())
    } else {
        one_line
    }
}

/// The human part of an error body: `error.message`, `error` as a string, `detail`, or the
/// start of the text.
fn error_message(body: &str) -> String {
    let from_json = serde_json::from_str::<Value>(body).ok().and_then(|v| {
        let e = v.get("error").or_else(|| v.get("detail"))?;
        Some(match e.get("message").and_then(Value::as_str) {
            Some(m) => m.to_string(),
            None => e.as_str().map_or_else(|| e.to_string(), str::to_string),
        })
    });
    snippet(&from_json.unwrap_or_else(|| body.to_string()), 300)
}

impl OpenAiAgent {
    /// Checks `config` and prepares the HTTP client.
    ///
    /// # Errors
    /// [`AgentError::Config`] when the model name is empty, the base URL is not
    /// `http(s)://…`, the API key cannot be an HTTP header, `program.md` cannot be read, or
    /// the HTTP client cannot be built.
    pub fn new(config: OpenAiConfig) -> Result<Self, AgentError> {
        if config.model.trim().is_empty() {
            return Err(AgentError::Config(format!(
                "empty model name: set {} or --llm-model",
                env::AUTOKERNEL_LLM_MODEL
            )));
        }
        let base = config.base_url.trim().trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(AgentError::Config(format!(
                "base URL `{base}` must start with http:// or https:// (e.g. http://127.0.0.1:8080/v1); set {}",
                env::OPENAI_BASE_URL
            )));
        }
        if let Some(key) = &config.api_key {
            // checked here, not at the first request: a key a header cannot carry would
            // otherwise read as a connection failure after the profiling and the baseline
            if reqwest::header::HeaderValue::from_str(&format!("Bearer {key}")).is_err() {
                return Err(AgentError::Config(format!(
                    "{} holds a character an HTTP header cannot carry (a newline or another control character?); the key is not shown",
                    env::OPENAI_API_KEY
                )));
            }
        }
        read_program(&config.program_md)?;
        let client = reqwest::Client::builder()
            .timeout(config.request_timeout)
            .connect_timeout(config.request_timeout.min(Duration::from_secs(30)))
            .build()
            .map_err(|e| AgentError::Config(format!("cannot build the HTTP client: {e}")))?;
        Ok(OpenAiAgent {
            endpoint: format!("{base}/chat/completions"),
            config,
            client,
            no_completion_in_a_row: 0,
            no_candidate_in_a_row: Vec::new(),
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    fn request_body(&self, system: &str, user: &str, max_tokens: u32) -> Value {
        let mut body = json!({
            "model": self.config.model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
            "stream": self.config.stream,
        });
        let field = self
            .config
            .token_limit_field
            .unwrap_or_else(|| TokenLimitField::for_base_url(&self.config.base_url));
        body[field.name()] = json!(max_tokens);
        if let Some(t) = self.config.temperature {
            body["temperature"] = json!(t);
        }
        if self.config.stream {
            body["stream_options"] = json!({"include_usage": true});
        }
        body
    }

    /// One request with retries on 429, 5xx and connection failures.
    async fn call(&self, body: &Value) -> Result<Completion, CallError> {
        let attempts = self.config.max_attempts.max(1);
        let mut backoff = self.config.initial_backoff;
        for attempt in 1..=attempts {
            let mut request = self.client.post(&self.endpoint).json(body);
            if let Some(key) = &self.config.api_key {
                request = request.bearer_auth(key);
            }
            tracing::debug!(endpoint = %self.endpoint, attempt, "chat completion request");
            let retry_wait = match request.send().await {
                Err(e) if e.is_timeout() => return Err(self.timeout_error()),
                Err(e) => {
                    let reason = format!(
                        "connection: cannot reach `{}`: {}",
                        self.endpoint,
                        error_chain(&e)
                    );
                    if attempt == attempts {
                        return Err(CallError::Invalid(format!(
                            "{reason} (after {attempts} attempts)"
                        )));
                    }
                    tracing::warn!(attempt, %reason, "retrying");
                    backoff
                }
                Ok(response) => {
                    let status = response.status();
                    if status.is_success() {
                        return self.read_success(response).await;
                    }
                    let retry_after = response
                        .headers()
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<f64>().ok())
                        .filter(|s| s.is_finite() && *s >= 0.0)
                        .map(Duration::from_secs_f64);
                    let text = match response.text().await {
                        Ok(t) => t,
                        Err(e) if e.is_timeout() => return Err(self.timeout_error()),
                        Err(_) => String::new(),
                    };
                    let message = error_message(&text);
                    let code = status.as_u16();
                    match code {
                        401 | 403 => {
                            return Err(CallError::Fatal(format!(
                                "`{}` refused the request with HTTP {code} ({message}); check {} (the key is never logged)",
                                self.endpoint,
                                env::OPENAI_API_KEY
                            )))
                        }
                        404 => {
                            return Err(CallError::Fatal(format!(
                                "`{}` answered HTTP 404 ({message}); check {} (most servers want it to end in /v1) and that the server serves model `{}`",
                                self.endpoint,
                                env::OPENAI_BASE_URL,
                                self.config.model
                            )))
                        }
                        405 | 501 => {
                            // the URL does not take a POST of chat completions: no retry helps
                            return Err(CallError::Fatal(format!(
                                "`{}` answered HTTP {code} ({message}): it does not serve chat completions; check {} (most servers want it to end in /v1)",
                                self.endpoint,
                                env::OPENAI_BASE_URL
                            )))
                        }
                        400 if is_context_overflow(&message) => {
                            return Err(CallError::Invalid(format!(
                                "http_400: {message}; the prompt and the output budget do not fit the server's context window: start the server with a larger one (llama.cpp: -c), or set {} and {} to what it has",
                                env::AUTOKERNEL_LLM_CONTEXT_TOKENS,
                                env::AUTOKERNEL_LLM_MAX_TOKENS
                            )))
                        }
                        429 | 500..=599 if attempt < attempts => {
                            let wait = retry_after.unwrap_or(backoff);
                            tracing::warn!(
                                attempt,
                                status = code,
                                wait_s = wait.as_secs_f64(),
                                %message,
                                "server busy or failing; retrying"
                            );
                            wait
                        }
                        429 | 500..=599 => {
                            return Err(CallError::Invalid(format!(
                                "http_{code}: {message} (after {attempts} attempts)"
                            )))
                        }
                        _ => return Err(CallError::Invalid(format!("http_{code}: {message}"))),
                    }
                }
            };
            tokio::time::sleep(retry_wait.min(self.config.max_retry_wait)).await;
            backoff = backoff.saturating_mul(2);
        }
        unreachable!("the last attempt always returns")
    }

    fn timeout_error(&self) -> CallError {
        CallError::Invalid(format!(
            "timeout: no complete reply from `{}` within {} s; raise {} for slow models",
            self.endpoint,
            self.config.request_timeout.as_secs_f64(),
            env::AUTOKERNEL_LLM_TIMEOUT_S
        ))
    }

    async fn read_success(&self, mut response: reqwest::Response) -> Result<Completion, CallError> {
        let is_sse = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/event-stream"));
        if !is_sse {
            let body = response.bytes().await.map_err(|e| self.body_error(e))?;
            return parse_json_completion(&body);
        }
        let mut reader = SseReader::default();
        loop {
            match response.chunk().await {
                Ok(Some(bytes)) => {
                    if reader.feed(&bytes)? {
                        break;
                    }
                }
                Ok(None) => {
                    reader.finish()?;
                    break;
                }
                Err(e) => return Err(self.body_error(e)),
            }
        }
        reader.into_completion()
    }

    fn body_error(&self, e: reqwest::Error) -> CallError {
        if e.is_timeout() {
            self.timeout_error()
        } else {
            CallError::Invalid(format!(
                "incomplete_stream: the reply from `{}` broke off: {}",
                self.endpoint,
                error_chain(&e)
            ))
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn parse_json_completion(body: &[u8]) -> Result<Completion, CallError> {
    let text = String::from_utf8_lossy(body);
    let wire: WireResponse = serde_json::from_slice(body).map_err(|e| {
        CallError::Invalid(format!(
            "malformed_response: not a chat completion ({e}): `{}`",
            snippet(&text, 200)
        ))
    })?;
    if let Some(err) = wire.error {
        return Err(CallError::Invalid(format!(
            "server_error: {}",
            error_message(&json!({ "error": err }).to_string())
        )));
    }
    let choice = wire
        .choices
        .and_then(|c| c.into_iter().next())
        .ok_or_else(|| {
            CallError::Invalid(format!(
                "malformed_response: no choices in the reply: `{}`",
                snippet(&text, 200)
            ))
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

/// Reads a server-sent-events body: `data: {json}` lines, `[DONE]`, comments; the chunks'
/// `choices[0].delta.content` pieces are joined, the last `usage` seen is kept (a final
/// chunk may carry only usage, with `choices` empty or null).
#[derive(Default)]
struct SseReader {
    buffer: Vec<u8>,
    completion: Completion,
    done: bool,
}

impl SseReader {
    /// Adds bytes; returns whether `[DONE]` arrived.
    fn feed(&mut self, bytes: &[u8]) -> Result<bool, CallError> {
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
    fn finish(&mut self) -> Result<(), CallError> {
        if !self.buffer.is_empty() {
            let line = std::mem::take(&mut self.buffer);
            self.line(&line)?;
        }
        Ok(())
    }

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
        let chunk: WireResponse = serde_json::from_str(data).map_err(|e| {
            CallError::Invalid(format!(
                "malformed_response: a stream chunk is not JSON ({e}): `{}`",
                snippet(data, 200)
            ))
        })?;
        if let Some(err) = chunk.error {
            return Err(CallError::Invalid(format!(
                "server_error: {}",
                error_message(&json!({ "error": err }).to_string())
            )));
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

    fn into_completion(self) -> Result<Completion, CallError> {
        if !self.done && self.completion.finish_reason.is_none() {
            return Err(CallError::Invalid(format!(
                "incomplete_stream: the stream ended without finish_reason or [DONE] after {} characters",
                self.completion.content.chars().count()
            )));
        }
        Ok(self.completion)
    }
}

fn read_program(path: &PathBuf) -> Result<String, AgentError> {
    std::fs::read_to_string(path).map_err(|e| {
        AgentError::Config(format!(
            "cannot read the instruction book `{}`: {e}; restore it from autokernel's program.md or set {}",
            path.display(),
            env::AUTOKERNEL_PROGRAM_MD
        ))
    })
}

fn add_usage(total: &mut Option<TokenUsage>, more: TokenUsage) {
    let t = total.get_or_insert_with(TokenUsage::default);
    t.prompt_tokens += more.prompt_tokens;
    t.completion_tokens += more.completion_tokens;
}

/// A prompt this many estimated tokens or larger is checked for silent truncation.
const TRUNCATION_CHECK_MIN_TOKENS: usize = 256;

#[async_trait]
impl Agent for OpenAiAgent {
    fn name(&self) -> String {
        format!("openai:{}", self.config.model)
    }

    #[tracing::instrument(skip_all, fields(target = %context.target.id, experiment = context.experiment))]
    async fn propose(&mut self, context: &ProposalContext<'_>) -> Result<Proposal, AgentError> {
        let (proposal, exchange) = self.ask(context).await?;
        self.count_or_give_up(proposal, exchange)
    }
}

impl OpenAiAgent {
    /// One proposal: the prompt, the request (retried once with twice the output budget
    /// when cut), the reply read; with whether the last request got a chat completion.
    async fn ask(
        &mut self,
        context: &ProposalContext<'_>,
    ) -> Result<(Proposal, Exchange), AgentError> {
        let system = read_program(&self.config.program_md)?;
        let system_tokens = estimate_tokens(&system);
        let budget = self
            .config
            .context_tokens
            .saturating_sub(self.config.max_output_tokens as usize);
        let user = build_user_message(context, system_tokens, budget);
        let prompt_estimate = system_tokens + estimate_tokens(&user.text);
        if prompt_estimate > budget {
            let reason = format!(
                "context_budget: the prompt needs about {prompt_estimate} tokens without any history, but context_tokens {} minus max_output_tokens {} leaves {budget}; raise {} (and the server's context window) or shorten program.md",
                self.config.context_tokens,
                self.config.max_output_tokens,
                env::AUTOKERNEL_LLM_CONTEXT_TOKENS
            );
            let proposal = Proposal::Invalid {
                reason,
                usage: None,
            };
            return Ok((proposal, Exchange::NotSent));
        }
        if user.history_dropped > 0 {
            tracing::debug!(
                listed = user.history_rows,
                dropped = user.history_dropped,
                "older experiments left out of the prompt to fit the context budget"
            );
        }
        let mut usage: Option<TokenUsage> = None;
        let mut max_tokens = self.config.max_output_tokens;
        let mut retried = false;
        loop {
            let body = self.request_body(&system, &user.text, max_tokens);
            let completion = match self.call(&body).await {
                Ok(c) => c,
                Err(CallError::Fatal(m)) => return Err(AgentError::Fatal(m)),
                Err(CallError::Invalid(reason)) => {
                    let proposal = Proposal::Invalid { reason, usage };
                    return Ok((proposal, Exchange::NoCompletion));
                }
            };
            let reported = completion.usage;
            add_usage(
                &mut usage,
                reported.unwrap_or(TokenUsage {
                    // the server reported nothing: estimate, 4 characters per token
                    prompt_tokens: prompt_estimate as u64,
                    completion_tokens: ((completion.content.chars().count()
                        + completion.reasoning_chars)
                        .div_ceil(crate::prompt::CHARS_PER_TOKEN))
                        as u64,
                }),
            );
            // a reply cut at the output limit is `truncated`, whatever the prompt count says
            if completion.finish_reason.as_deref() == Some("length") {
                if !retried {
                    tracing::warn!(
                        max_tokens,
                        "reply cut at the output-token limit; asking once more with twice the budget"
                    );
                    retried = true;
                    max_tokens = max_tokens.saturating_mul(2);
                    continue;
                }
                let what = if completion.content.trim().is_empty() && completion.reasoning_chars > 0
                {
                    format!(
                        "the model spent it all on {} characters of reasoning and wrote no answer",
                        completion.reasoning_chars
                    )
                } else {
                    "the reply was cut off".to_string()
                };
                let reason = format!(
                    "truncated: finish_reason length at {} output tokens and again at {max_tokens} ({what}); raise {} or use a model that answers more briefly",
                    self.config.max_output_tokens,
                    env::AUTOKERNEL_LLM_MAX_TOKENS
                );
                return Ok((Proposal::Invalid { reason, usage }, Exchange::Completion));
            }
            if let Some(r) = reported.filter(|r| r.prompt_tokens > 0) {
                if prompt_estimate >= TRUNCATION_CHECK_MIN_TOKENS
                    && (r.prompt_tokens as usize) * 2 < prompt_estimate
                {
                    let reason = format!(
                        "server_truncated_prompt: the server counted {} prompt tokens but about {prompt_estimate} were sent; its context window is smaller than the prompt (e.g. Ollama's num_ctx, llama.cpp's --n_ctx): raise it, or lower {} to match",
                        r.prompt_tokens,
                        env::AUTOKERNEL_LLM_CONTEXT_TOKENS
                    );
                    return Ok((Proposal::Invalid { reason, usage }, Exchange::Completion));
                }
            }
            let proposal = match parse_reply(&completion.content) {
                Ok(parsed) => Proposal::Candidate {
                    description: parsed.description,
                    source: parsed.source,
                    usage,
                },
                Err(e) => {
                    let mut reason = e.to_string();
                    if let Some(refusal) = &completion.refusal {
                        reason.push_str(&format!("; the model refused: {}", snippet(refusal, 200)));
                    }
                    Proposal::Invalid { reason, usage }
                }
            };
            return Ok((proposal, Exchange::Completion));
        }
    }

    /// The give-up rule (see [`OpenAiAgent`], "Giving up"): counts the proposal in the
    /// streaks and passes it on, or answers [`AgentError::Fatal`] when it completes one.
    fn count_or_give_up(
        &mut self,
        proposal: Proposal,
        exchange: Exchange,
    ) -> Result<Proposal, AgentError> {
        match exchange {
            Exchange::Completion => self.no_completion_in_a_row = 0,
            Exchange::NoCompletion => self.no_completion_in_a_row += 1,
            // nothing was asked of the server: nothing learnt about it
            Exchange::NotSent => {}
        }
        let Proposal::Invalid { reason, .. } = &proposal else {
            self.no_candidate_in_a_row.clear();
            return Ok(proposal);
        };
        let class = reason.split(':').next().unwrap_or(reason).trim();
        self.no_candidate_in_a_row.push(class.to_string());
        let (model, base_url) = (&self.config.model, &self.config.base_url);
        if exchange == Exchange::NoCompletion
            && self.no_completion_in_a_row >= MAX_NO_COMPLETION_IN_A_ROW
        {
            let check = if class == "connection" {
                format!("is the server running at `{base_url}`?")
            } else {
                format!(
                    "check that the server at `{base_url}` is up and speaks the OpenAI chat-completions API (the base URL is its API root, most end in /v1: --llm-base-url or {}) and that it serves model `{model}` (--llm-model or {})",
                    env::OPENAI_BASE_URL,
                    env::AUTOKERNEL_LLM_MODEL
                )
            };
            return Err(AgentError::Fatal(format!(
                "{reason} ({} proposals in a row without a chat completion); {check}",
                self.no_completion_in_a_row
            )));
        }
        let streak = self.no_candidate_in_a_row.len();
        if streak >= MAX_NO_CANDIDATE_IN_A_ROW as usize {
            return Err(AgentError::Fatal(format!(
                "{reason} ({streak} proposals in a row without a usable kernel.py: {}); check that model `{model}` (--llm-model or {}) is an instruction-following model that writes code, that `{base_url}` (--llm-base-url or {}) is the server meant, and that program.md still asks for the whole file in one fenced python block",
                count_classes(&self.no_candidate_in_a_row),
                env::AUTOKERNEL_LLM_MODEL,
                env::OPENAI_BASE_URL
            )));
        }
        Ok(proposal)
    }
}

/// `no_code ×5, truncated ×3`: each class with its count, most frequent first (ties in
/// order of first appearance).
fn count_classes(classes: &[String]) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for c in classes {
        match counts.iter_mut().find(|(name, _)| name == c) {
            Some((_, n)) => *n += 1,
            None => counts.push((c, 1)),
        }
    }
    counts.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    counts
        .iter()
        .map(|(c, n)| format!("{c} ×{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether an HTTP 400 message says the request does not fit the model's context window
/// (OpenAI: "maximum context length is N tokens"; vLLM and llama.cpp word it alike).
fn is_context_overflow(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("context length") || m.contains("context window") || m.contains("n_ctx")
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

    #[test]
    fn count_classes_lists_the_most_frequent_first() {
        let classes: Vec<String> = ["truncated", "no_code", "no_code", "missing_kernel_fn"]
            .iter()
            .map(|c| c.to_string())
            .collect();
        assert_eq!(
            count_classes(&classes),
            "no_code ×2, truncated ×1, missing_kernel_fn ×1"
        );
    }

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

//! [`Transport`]: sends one chat-completions request and reads the reply, retrying 429, 5xx
//! and connection failures with a doubling backoff that a `Retry-After` header overrides;
//! an HTTP status becomes a classified [`CallError`].

use std::time::Duration;

use autokernel_core::{AgentError, InvalidClass};
use serde_json::Value;

use super::config::OpenAiConfig;
use super::sse::SseReader;
use super::wire::{error_message, parse_json_completion, CallError, Completion};
use crate::env;

/// `{base_url}/chat/completions`, once `config`'s base URL and API key are known to make a
/// request.
///
/// # Errors
/// [`AgentError::Config`] when the base URL is not `http(s)://…` or the API key cannot be
/// an HTTP header.
pub(super) fn checked_endpoint(config: &OpenAiConfig) -> Result<String, AgentError> {
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
    Ok(format!("{base}/chat/completions"))
}

/// The HTTP side of the agent: one client and the endpoint it posts to. Holds no secret;
/// the API key is read from the [`OpenAiConfig`] each request is given.
#[derive(Debug)]
pub(super) struct Transport {
    client: reqwest::Client,
    endpoint: String,
}

impl Transport {
    /// A client for `endpoint` (from [`checked_endpoint`]) whose requests end after
    /// `config.request_timeout`.
    ///
    /// # Errors
    /// [`AgentError::Config`] when the HTTP client cannot be built.
    pub(super) fn new(endpoint: String, config: &OpenAiConfig) -> Result<Self, AgentError> {
        let client = reqwest::Client::builder()
            .timeout(config.request_timeout)
            .connect_timeout(config.request_timeout.min(Duration::from_secs(30)))
            .build()
            .map_err(|e| {
                AgentError::Config(format!("cannot build the HTTP client: {}", error_chain(&e)))
            })?;
        Ok(Transport { client, endpoint })
    }

    /// One request with retries on 429, 5xx and connection failures.
    pub(super) async fn call(
        &self,
        config: &OpenAiConfig,
        body: &Value,
    ) -> Result<Completion, CallError> {
        let attempts = config.max_attempts.max(1);
        let mut backoff = config.initial_backoff;
        for attempt in 1..=attempts {
            let mut request = self.client.post(&self.endpoint).json(body);
            if let Some(key) = &config.api_key {
                request = request.bearer_auth(key);
            }
            tracing::debug!(endpoint = %self.endpoint, attempt, "chat completion request");
            let retry_wait = match request.send().await {
                Err(e) if e.is_timeout() => return Err(self.timeout_error(config)),
                Err(e) => {
                    let reason = format!("cannot reach `{}`: {}", self.endpoint, error_chain(&e));
                    if attempt == attempts {
                        return Err(CallError::Invalid {
                            class: InvalidClass::Connection,
                            detail: format!("{reason} (after {attempts} attempts)"),
                        });
                    }
                    tracing::warn!(attempt, %reason, "retrying");
                    backoff
                }
                Ok(response) => {
                    let status = response.status();
                    if status.is_success() {
                        return self.read_success(config, response).await;
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
                        Err(e) if e.is_timeout() => return Err(self.timeout_error(config)),
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
                                config.model
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
                            return Err(CallError::Invalid {
                                class: InvalidClass::Http(400),
                                detail: format!(
                                    "{message}; the prompt and the output budget do not fit the server's context window: start the server with a larger one (llama.cpp: -c), or set {} and {} to what it has",
                                    env::AUTOKERNEL_LLM_CONTEXT_TOKENS,
                                    env::AUTOKERNEL_LLM_MAX_TOKENS
                                ),
                            })
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
                            return Err(CallError::Invalid {
                                class: InvalidClass::Http(code),
                                detail: format!("{message} (after {attempts} attempts)"),
                            })
                        }
                        _ => {
                            return Err(CallError::Invalid {
                                class: InvalidClass::Http(code),
                                detail: message,
                            })
                        }
                    }
                }
            };
            tokio::time::sleep(retry_wait.min(config.max_retry_wait)).await;
            backoff = backoff.saturating_mul(2);
        }
        unreachable!("the last attempt always returns")
    }

    /// `timeout`: no complete reply within `request_timeout`.
    fn timeout_error(&self, config: &OpenAiConfig) -> CallError {
        CallError::Invalid {
            class: InvalidClass::Timeout,
            detail: format!(
                "no complete reply from `{}` within {} s; raise {} for slow models",
                self.endpoint,
                config.request_timeout.as_secs_f64(),
                env::AUTOKERNEL_LLM_TIMEOUT_S
            ),
        }
    }

    /// Reads a 2xx reply: a whole JSON body, or a server-sent-events stream.
    async fn read_success(
        &self,
        config: &OpenAiConfig,
        mut response: reqwest::Response,
    ) -> Result<Completion, CallError> {
        let is_sse = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/event-stream"));
        if !is_sse {
            let body = response
                .bytes()
                .await
                .map_err(|e| self.body_error(config, e))?;
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
                Err(e) => return Err(self.body_error(config, e)),
            }
        }
        reader.into_completion()
    }

    /// The body of a 2xx reply could not be read: `timeout`, or `incomplete_stream`.
    fn body_error(&self, config: &OpenAiConfig, e: reqwest::Error) -> CallError {
        if e.is_timeout() {
            self.timeout_error(config)
        } else {
            CallError::Invalid {
                class: InvalidClass::IncompleteStream,
                detail: format!(
                    "the reply from `{}` broke off: {}",
                    self.endpoint,
                    error_chain(&e)
                ),
            }
        }
    }
}

/// `e` and its sources, joined with `: ` (reqwest names the cause only in the sources).
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

/// Whether an HTTP 400 message says the request does not fit the model's context window
/// (OpenAI: "maximum context length is N tokens"; vLLM and llama.cpp word it alike).
fn is_context_overflow(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("context length") || m.contains("context window") || m.contains("n_ctx")
}

//! [`OpenAiAgent`]: proposes kernels by asking any server that speaks the OpenAI
//! chat-completions API (OpenAI, vLLM, Ollama, llama.cpp's server, …).
//!
//! A proposal flows through the parts in this order: [`OpenAiConfig`] (`config.rs`) says
//! where and how to ask; the agent (here) builds the prompt, and `wire.rs` the request
//! body; `transport.rs` posts it with retries (429, 5xx, `Retry-After`) and reads the reply,
//! whole through `wire.rs` or streamed through `sse.rs`, into one completion; the agent
//! reads the code out of it ([`parse_reply`]) into a [`Proposal`]; `give_up.rs` counts the
//! proposals without a completion or without a candidate and stops the run after a streak.

mod config;
mod give_up;
mod sse;
mod transport;
mod wire;

use std::path::PathBuf;

use async_trait::async_trait;
use autokernel_core::{Agent, AgentError, InvalidClass, Proposal, ProposalContext, TokenUsage};

pub use config::{OpenAiConfig, TokenLimitField, DEFAULT_BASE_URL};
pub use give_up::{MAX_NO_CANDIDATE_IN_A_ROW, MAX_NO_COMPLETION_IN_A_ROW};

use crate::env;
use crate::prompt::{build_user_message, estimate_tokens};
use crate::reply::parse_reply;
use give_up::{Exchange, Streaks};
use transport::Transport;
use wire::{request_body, snippet, CallError};

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
    transport: Transport,
    streaks: Streaks,
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
        let endpoint = transport::checked_endpoint(&config)?;
        read_program(&config.program_md)?;
        let transport = Transport::new(endpoint, &config)?;
        Ok(OpenAiAgent {
            config,
            transport,
            streaks: Streaks::default(),
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }
}

/// `program.md`, the system prompt.
fn read_program(path: &PathBuf) -> Result<String, AgentError> {
    std::fs::read_to_string(path).map_err(|e| {
        AgentError::Config(format!(
            "cannot read the instruction book `{}`: {e}; restore it from autokernel's program.md or set {}",
            path.display(),
            env::AUTOKERNEL_PROGRAM_MD
        ))
    })
}

/// Adds `more` to the proposal's running total.
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
        self.streaks
            .count_or_give_up(proposal, exchange, &self.config)
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
            let detail = format!(
                "the prompt needs about {prompt_estimate} tokens without any history, but context_tokens {} minus max_output_tokens {} leaves {budget}; raise {} (and the server's context window) or shorten program.md",
                self.config.context_tokens,
                self.config.max_output_tokens,
                env::AUTOKERNEL_LLM_CONTEXT_TOKENS
            );
            let proposal = Proposal::Invalid {
                class: InvalidClass::ContextBudget,
                detail,
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
            let body = request_body(&self.config, &system, &user.text, max_tokens);
            let completion = match self.transport.call(&self.config, &body).await {
                Ok(c) => c,
                Err(CallError::Fatal(m)) => return Err(AgentError::Fatal(m)),
                Err(CallError::Invalid { class, detail }) => {
                    let proposal = Proposal::Invalid {
                        class,
                        detail,
                        usage,
                    };
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
                let detail = format!(
                    "finish_reason length at {} output tokens and again at {max_tokens} ({what}); raise {} or use a model that answers more briefly",
                    self.config.max_output_tokens,
                    env::AUTOKERNEL_LLM_MAX_TOKENS
                );
                let proposal = Proposal::Invalid {
                    class: InvalidClass::Truncated,
                    detail,
                    usage,
                };
                return Ok((proposal, Exchange::Completion));
            }
            if let Some(r) = reported.filter(|r| r.prompt_tokens > 0) {
                if prompt_estimate >= TRUNCATION_CHECK_MIN_TOKENS
                    && (r.prompt_tokens as usize) * 2 < prompt_estimate
                {
                    let detail = format!(
                        "the server counted {} prompt tokens but about {prompt_estimate} were sent; its context window is smaller than the prompt (e.g. Ollama's num_ctx, llama.cpp's --n_ctx): raise it, or lower {} to match",
                        r.prompt_tokens,
                        env::AUTOKERNEL_LLM_CONTEXT_TOKENS
                    );
                    let proposal = Proposal::Invalid {
                        class: InvalidClass::ServerTruncatedPrompt,
                        detail,
                        usage,
                    };
                    return Ok((proposal, Exchange::Completion));
                }
            }
            let proposal = match parse_reply(&completion.content) {
                Ok(parsed) => Proposal::Candidate {
                    description: parsed.description,
                    source: parsed.source,
                    usage,
                },
                Err(e) => {
                    let mut detail = e.to_string();
                    if let Some(refusal) = &completion.refusal {
                        detail.push_str(&format!("; the model refused: {}", snippet(refusal, 200)));
                    }
                    Proposal::Invalid {
                        class: e.class(),
                        detail,
                        usage,
                    }
                }
            };
            return Ok((proposal, Exchange::Completion));
        }
    }
}

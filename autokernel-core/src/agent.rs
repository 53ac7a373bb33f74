//! The [`Agent`] trait: proposes the next `kernel.py` for a target.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::{BenchResult, ExperimentRecord, GpuSpec, Target};

/// What an agent sees when it proposes the next candidate.
#[derive(Debug, Clone)]
pub struct ProposalContext<'a> {
    /// The target being optimised.
    pub target: &'a Target,
    /// The GPU's figures, when known.
    pub gpu: Option<&'a GpuSpec>,
    /// The source of the current best `kernel.py`.
    pub best_source: &'a str,
    /// The full result of the current best (stages, metrics), when benched in this run.
    pub best_result: Option<&'a BenchResult>,
    /// Earlier experiments on this target, oldest first (rows of `results.tsv`).
    pub history: &'a [ExperimentRecord],
    /// Failure details of recent experiments keyed by experiment number: the failed stage
    /// and reason, which `results.tsv` does not carry.
    pub failures: &'a [(u64, String)],
    /// The number the next experiment will get.
    pub experiment: u64,
}

/// Tokens spent on one proposal, as the server reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
}

/// An agent's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Proposal {
    /// A complete new `kernel.py`.
    Candidate {
        /// One line saying what changed, for the commit message and `results.tsv`.
        description: String,
        /// The complete file.
        source: String,
        /// Tokens spent, for LLM agents.
        usage: Option<TokenUsage>,
    },
    /// The agent produced nothing runnable; logged as an `invalid` row whose description
    /// is [`Proposal::invalid_reason`] (`class: detail`), no commit, no bench.
    Invalid {
        /// What kind of failure: what the agent counts in its give-up streaks and the row's
        /// description starts with.
        class: InvalidClass,
        /// What exactly, e.g. `finish_reason length at 4096 output tokens`.
        detail: String,
        /// Tokens spent.
        usage: Option<TokenUsage>,
    },
    /// Nothing left to try for this target (the tuner's space is exhausted); the
    /// orchestrator moves on.
    Exhausted,
}

impl Proposal {
    /// An `invalid` row's description for an [`Proposal::Invalid`]: `class: detail`
    /// (`truncated: finish_reason length at 4096 output tokens`); `None` for the others.
    pub fn invalid_reason(&self) -> Option<String> {
        match self {
            Proposal::Invalid { class, detail, .. } => Some(format!("{class}: {detail}")),
            _ => None,
        }
    }
}

/// Why a proposal is not a runnable candidate: the class of a [`Proposal::Invalid`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum InvalidClass {
    /// The reply was cut at the output-token limit.
    Truncated,
    /// No fenced code block in the reply.
    NoCode,
    /// The last code block is never closed.
    UnterminatedFence,
    /// No complete python block defines `kernel_fn`.
    MissingKernelFn,
    /// An HTTP status other than 2xx, after any retries.
    Http(u16),
    /// No complete reply within the time limit.
    Timeout,
    /// The server could not be reached.
    Connection,
    /// The server counted far fewer prompt tokens than were sent (its context is smaller).
    ServerTruncatedPrompt,
    /// The prompt does not fit the context budget even without history.
    ContextBudget,
    /// The body is not a chat completion.
    MalformedResponse,
    /// A stream ended with neither `finish_reason` nor `[DONE]`.
    IncompleteStream,
    /// A stream carried an `error` object.
    ServerError,
    /// A class of an agent of your own (`snake_case`, no `:`).
    Other(String),
}

impl InvalidClass {
    /// The word an `invalid` row's description starts with: `truncated`, `no_code`,
    /// `http_429`, …
    pub fn label(&self) -> std::borrow::Cow<'static, str> {
        use std::borrow::Cow::Borrowed;
        match self {
            InvalidClass::Truncated => Borrowed("truncated"),
            InvalidClass::NoCode => Borrowed("no_code"),
            InvalidClass::UnterminatedFence => Borrowed("unterminated_fence"),
            InvalidClass::MissingKernelFn => Borrowed("missing_kernel_fn"),
            InvalidClass::Http(code) => format!("http_{code}").into(),
            InvalidClass::Timeout => Borrowed("timeout"),
            InvalidClass::Connection => Borrowed("connection"),
            InvalidClass::ServerTruncatedPrompt => Borrowed("server_truncated_prompt"),
            InvalidClass::ContextBudget => Borrowed("context_budget"),
            InvalidClass::MalformedResponse => Borrowed("malformed_response"),
            InvalidClass::IncompleteStream => Borrowed("incomplete_stream"),
            InvalidClass::ServerError => Borrowed("server_error"),
            InvalidClass::Other(word) => word.clone().into(),
        }
    }
}

impl std::fmt::Display for InvalidClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.label())
    }
}

/// Errors that stop the agent altogether (misconfiguration), unlike [`Proposal::Invalid`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The agent is misconfigured (no model name, bad URL, missing program.md).
    #[error("agent misconfigured: {0}")]
    Config(String),
    /// Failures that will not go away by retrying (e.g. 401 Unauthorized, or a server
    /// whose replies were unusable for several proposals in a row).
    #[error("agent gave up: {0}")]
    Fatal(String),
}

/// Proposes candidates. Implementations keep their own state (e.g. configurations already
/// tried) and must turn every bad reply into [`Proposal::Invalid`], never a panic.
#[async_trait]
pub trait Agent: Send {
    /// The name recorded in `results.tsv`'s `agent` column, e.g. `tune` or `openai:gpt-5`.
    fn name(&self) -> String;

    /// Proposes the next candidate for `context.target`.
    ///
    /// # Errors
    /// [`AgentError`] only for conditions that retrying cannot fix. The loop then logs
    /// this experiment as an `invalid` row whose description is the error, and stops.
    async fn propose(&mut self, context: &ProposalContext<'_>) -> Result<Proposal, AgentError>;

    /// Called after each decision on a candidate this agent proposed; hybrid agents use it
    /// to switch between structure and tuning. The default does nothing.
    fn observe(&mut self, _record: &ExperimentRecord) {}
}

#[async_trait]
impl<T: Agent + ?Sized> Agent for Box<T> {
    fn name(&self) -> String {
        (**self).name()
    }
    async fn propose(&mut self, context: &ProposalContext<'_>) -> Result<Proposal, AgentError> {
        (**self).propose(context).await
    }
    fn observe(&mut self, record: &ExperimentRecord) {
        (**self).observe(record)
    }
}

//! The default [`Agent`](autokernel_core::Agent)s of autokernel: they propose the next
//! `kernel.py` in the edit → benchmark → keep-or-revert loop.
//!
//! - [`TunerAgent`] (`tune`, the default, no network): coordinate descent over the
//!   `TUNABLES` a kernel declares, editing only its one-line `CONFIG` literal
//!   ([`pyliteral`] reads and rewrites it). It answers `Exhausted` when every value along
//!   every axis around the best has been measured, and the orchestrator moves on.
//! - [`OpenAiAgent`] (`openai:<model>`): asks any OpenAI-compatible chat-completions
//!   server, with `program.md` as the system prompt and a user message built by
//!   [`prompt::build_user_message`] (target, GPU and roofline, metrics to beat, the current
//!   best file, recent experiments with their failures, within a token budget). Replies
//!   are read by [`reply::parse_reply`]; every unusable reply becomes a classified
//!   [`Proposal::Invalid`](autokernel_core::Proposal::Invalid), never a crash of the loop,
//!   but a streak of them stops the run: [`MAX_NO_COMPLETION_IN_A_ROW`] proposals in a row
//!   without a chat completion (the server's fault), or [`MAX_NO_CANDIDATE_IN_A_ROW`]
//!   without a candidate for any reason.
//!   Configured by [`OpenAiConfig`], from flags or the environment ([`env`](mod@env)).
//! - [`HybridAgent`] (`hybrid`): the LLM proposes structure, the tuner refines the
//!   `CONFIG` of each kept structure.
//!
//! ```no_run
//! use autokernel_agent::{HybridAgent, OpenAiAgent, OpenAiConfig, TunerAgent};
//! # fn main() -> Result<(), autokernel_core::AgentError> {
//! let tuner = TunerAgent::new(); // needs nothing but the machine
//! let mut config = OpenAiConfig::from_env()?; // AUTOKERNEL_LLM_MODEL, OPENAI_BASE_URL, …
//! // the agent's playbook, read when the agent is made and before every request: start
//! // from the built-in one
//! std::fs::write("program.md", autokernel_agent::DEFAULT_PROGRAM_MD).expect("writable");
//! config.program_md = "program.md".into();
//! let hybrid = HybridAgent::new(OpenAiAgent::new(config)?, TunerAgent::new());
//! # let _ = (tuner, hybrid);
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

pub mod env;
mod hybrid;
mod openai;
pub mod prompt;
/// The kernel.py contract's literal parser, which lives beside the contract in core.
pub use autokernel_core::pyliteral;
pub mod reply;
mod tuner;

pub use hybrid::{HybridAgent, DEFAULT_TUNE_STEPS};
pub use openai::{
    OpenAiAgent, OpenAiConfig, TokenLimitField, DEFAULT_BASE_URL, MAX_NO_CANDIDATE_IN_A_ROW,
    MAX_NO_COMPLETION_IN_A_ROW,
};
pub use tuner::{TunerAgent, TUNE_PREFIX};

/// autokernel's own `program.md`, the instruction book of the LLM agent, as shipped. The
/// command writes it into a new workspace; the agent reads the workspace's copy
/// ([`OpenAiConfig::program_md`]) so that users can edit theirs.
pub const DEFAULT_PROGRAM_MD: &str = include_str!("../../program.md");

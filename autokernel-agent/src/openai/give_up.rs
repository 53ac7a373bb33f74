//! The give-up rule of the [`OpenAiAgent`](super::OpenAiAgent): [`Streaks`] of proposals
//! without a chat completion or without a candidate, and the limits that turn a streak
//! into [`AgentError::Fatal`].

use autokernel_core::{AgentError, InvalidClass, Proposal};

use super::config::OpenAiConfig;
use crate::env;

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
pub(super) enum Exchange {
    /// The server answered with a chat completion (usable or not).
    Completion,
    /// The request failed: no chat completion.
    NoCompletion,
    /// Nothing was sent (the prompt did not fit).
    NotSent,
}

/// The two streaks the give-up rule counts, both across targets.
#[derive(Debug, Default)]
pub(super) struct Streaks {
    /// Proposals in a row whose last request got no chat completion (after retries).
    no_completion_in_a_row: u32,
    /// The class of each proposal in a row that gave no candidate, oldest first.
    no_candidate_in_a_row: Vec<String>,
}

impl Streaks {
    /// The give-up rule (see [`OpenAiAgent`](super::OpenAiAgent), "Giving up"): counts
    /// the proposal in the streaks and passes it on, or answers [`AgentError::Fatal`] when
    /// it completes one; the error names `config`'s model and base URL.
    pub(super) fn count_or_give_up(
        &mut self,
        proposal: Proposal,
        exchange: Exchange,
        config: &OpenAiConfig,
    ) -> Result<Proposal, AgentError> {
        match exchange {
            Exchange::Completion => self.no_completion_in_a_row = 0,
            Exchange::NoCompletion => self.no_completion_in_a_row += 1,
            // nothing was asked of the server: nothing learnt about it
            Exchange::NotSent => {}
        }
        let (Proposal::Invalid { class, .. }, Some(reason)) =
            (&proposal, proposal.invalid_reason())
        else {
            self.no_candidate_in_a_row.clear();
            return Ok(proposal);
        };
        self.no_candidate_in_a_row.push(class.label().into_owned());
        let (model, base_url) = (&config.model, &config.base_url);
        if exchange == Exchange::NoCompletion
            && self.no_completion_in_a_row >= MAX_NO_COMPLETION_IN_A_ROW
        {
            let check = if *class == InvalidClass::Connection {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}

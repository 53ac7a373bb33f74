//! [`HybridAgent`]: an LLM agent proposes structure, the tuner refines each kept
//! structure's `CONFIG`.

use std::collections::HashMap;

use async_trait::async_trait;
use autokernel_core::{Agent, AgentError, Decision, ExperimentRecord, Proposal, ProposalContext};

use crate::TunerAgent;

/// Default number of tuner proposals after each kept structural change.
pub const DEFAULT_TUNE_STEPS: u32 = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    /// The LLM proposes next.
    Llm,
    /// The tuner proposes next, this many more times at most.
    Tune(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Llm,
    Tuner,
}

/// Alternates two agents: the LLM proposes a change of structure; when one is kept, the
/// tuner gets up to `tune_steps` proposals to refine its `CONFIG` (fewer when its
/// neighbourhood is exhausted) before the LLM is asked again. Each target starts with a
/// tuning phase on its starter kernel: launch parameters are the playbook's first tier
/// and cost no tokens. Turns are kept per target, so the orchestrator may interleave
/// targets freely.
///
/// The agent column of `results.tsv` reads `hybrid`; the tuner's rows are recognisable by
/// their `tune:` descriptions.
pub struct HybridAgent<L> {
    llm: L,
    tuner: TunerAgent,
    tune_steps: u32,
    turns: HashMap<String, Turn>,
    last: Option<Source>,
}

impl<L: Agent> HybridAgent<L> {
    /// Combines `llm` (usually an [`crate::OpenAiAgent`]) with `tuner`, giving the tuner
    /// [`DEFAULT_TUNE_STEPS`] proposals at the start of each target and after each kept
    /// LLM candidate.
    pub fn new(llm: L, tuner: TunerAgent) -> Self {
        HybridAgent {
            llm,
            tuner,
            tune_steps: DEFAULT_TUNE_STEPS,
            turns: HashMap::new(),
            last: None,
        }
    }

    /// Sets the number of tuner proposals per tuning phase; 0 never tunes.
    pub fn with_tune_steps(mut self, steps: u32) -> Self {
        self.tune_steps = steps;
        self
    }

    /// The LLM agent.
    pub fn llm(&self) -> &L {
        &self.llm
    }

    fn tuning(&self) -> Turn {
        if self.tune_steps == 0 {
            Turn::Llm
        } else {
            Turn::Tune(self.tune_steps)
        }
    }
}

#[async_trait]
impl<L: Agent> Agent for HybridAgent<L> {
    fn name(&self) -> String {
        "hybrid".to_string()
    }

    async fn propose(&mut self, context: &ProposalContext<'_>) -> Result<Proposal, AgentError> {
        let id = context.target.id.clone();
        let start = self.tuning();
        let turn = *self.turns.entry(id.clone()).or_insert(start);
        if let Turn::Tune(left) = turn {
            match self.tuner.propose(context).await? {
                Proposal::Exhausted => {
                    tracing::debug!(target_id = %id, "hybrid: the tuner is done with this structure; asking the LLM");
                }
                proposal => {
                    let next = if left > 1 {
                        Turn::Tune(left - 1)
                    } else {
                        Turn::Llm
                    };
                    self.turns.insert(id, next);
                    self.last = Some(Source::Tuner);
                    return Ok(proposal);
                }
            }
            self.turns.insert(id, Turn::Llm);
        }
        self.last = Some(Source::Llm);
        self.llm.propose(context).await
    }

    fn observe(&mut self, record: &ExperimentRecord) {
        match self.last {
            Some(Source::Llm) => {
                self.llm.observe(record);
                if record.decision == Decision::Keep && self.tune_steps > 0 {
                    tracing::debug!(
                        experiment = record.experiment,
                        steps = self.tune_steps,
                        "hybrid: LLM candidate kept; tuning its CONFIG next"
                    );
                    self.turns.insert(record.target.clone(), self.tuning());
                }
            }
            Some(Source::Tuner) => self.tuner.observe(record),
            None => {}
        }
    }
}

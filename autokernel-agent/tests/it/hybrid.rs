use async_trait::async_trait;
use autokernel_agent::{HybridAgent, TunerAgent};
use autokernel_core::{Agent, AgentError, Decision, Proposal, ProposalContext};

use crate::support::{measured, Fixture, KERNEL};

/// An LLM stand-in that proposes a numbered structural change each time.
#[derive(Default)]
struct Scripted {
    calls: u32,
    observed: Vec<u64>,
}

#[async_trait]
impl Agent for Scripted {
    fn name(&self) -> String {
        "scripted".into()
    }
    async fn propose(&mut self, ctx: &ProposalContext<'_>) -> Result<Proposal, AgentError> {
        self.calls += 1;
        Ok(Proposal::Candidate {
            description: format!("structure {}", self.calls),
            source: format!("{}\n# structure {}\n", ctx.best_source, self.calls),
            usage: None,
        })
    }
    fn observe(&mut self, record: &autokernel_core::ExperimentRecord) {
        self.observed.push(record.experiment);
    }
}

fn who(p: &Proposal) -> &'static str {
    match p {
        Proposal::Candidate { description, .. } if description.starts_with("tune:") => "tune",
        Proposal::Candidate { .. } => "llm",
        Proposal::Invalid { .. } => "invalid",
        Proposal::Exhausted => "exhausted",
    }
}

#[tokio::test]
async fn the_tuner_refines_each_kept_llm_structure_before_the_llm_is_asked_again() {
    let mut fx = Fixture::new(KERNEL);
    let mut agent = HybridAgent::new(Scripted::default(), TunerAgent::new()).with_tune_steps(2);
    assert_eq!(agent.name(), "hybrid");
    let mut order = Vec::new();
    let mut n = 1;
    // tune, tune, llm (reverted), llm (kept), tune, tune, llm
    for keep in [false, false, false, true, false, false, false] {
        let p = agent.propose(&fx.ctx()).await.unwrap();
        order.push(who(&p));
        n += 1;
        let Proposal::Candidate {
            description,
            source,
            ..
        } = p
        else {
            panic!()
        };
        let r = measured(
            n,
            if keep {
                Decision::Keep
            } else {
                Decision::Revert
            },
            &description,
            &source,
        );
        agent.observe(&r);
        fx.history.push(r);
        if keep {
            fx.source = source;
        }
    }
    assert_eq!(order, ["tune", "tune", "llm", "llm", "tune", "tune", "llm"]);
    // the LLM sees the decisions on its own candidates only
    assert_eq!(agent.llm().observed, vec![4, 5, 8]);
}

#[tokio::test]
async fn an_exhausted_tuner_hands_over_to_the_llm_at_once() {
    let fx = Fixture::new(&KERNEL.replace("TUNABLES = {", "OPTIONS = {"));
    let mut agent = HybridAgent::new(Scripted::default(), TunerAgent::new());
    let p = agent.propose(&fx.ctx()).await.unwrap();
    assert_eq!(who(&p), "llm");
}

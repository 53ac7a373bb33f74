use autokernel_agent::prompt::build_user_message;
use autokernel_core::ProposalContext;

use crate::support::{timed_reading, Fixture, KERNEL};

#[test]
fn the_prompt_names_the_config_keys_the_best_reads() {
    let fx = Fixture::new(KERNEL);
    let best = timed_reading(&["BLOCK_SIZE", "num_warps"]);
    let ctx = ProposalContext {
        best_result: Some(&best),
        ..fx.ctx()
    };
    let text = build_user_message(&ctx, 0, 100_000).text;
    assert!(
        text.contains("- CONFIG keys kernel_fn reads at that shape: BLOCK_SIZE, num_warps\n"),
        "{text}"
    );
    // unknown reads: no such line
    let text = build_user_message(&fx.ctx(), 0, 100_000).text;
    assert!(!text.contains("CONFIG keys kernel_fn reads"), "{text}");
}

//! `autokernel log`: the experiments of a workspace, one line each, the way `git log`
//! would show them if it knew autokernel's columns: number, target, decision, verdict,
//! latency, speedup over the target's baseline, whether it became the best, commit and
//! description. Read from `results.tsv` and the experiments' notes (the head-to-head
//! timings); works during or after a run.

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::bail;
use autokernel_core::ExperimentRecord;
use serde::Serialize;

use crate::global_args::GlobalArgs;
use autokernel::numfmt::latency_us;
use autokernel::report::speedups_vs_baseline;
use autokernel::workspace::Workspace;

/// Arguments of `autokernel log`.
#[derive(Debug, clap::Args)]
#[command(
    after_long_help = "Columns: the experiment's number, its target, the decision (baseline,
keep, revert, invalid), the judge's verdict (PASS, FAIL, TIMEOUT, CRASH, TAMPER, NOT_RUN,
INTERRUPTED), its latency in µs, its speedup over the target's baseline, `*` when it
became the best, the commit (7 digits) and the description. A compared candidate's latency
and speedup are the head-to-head figures that decided it (`incumbent → candidate µs`): the
best's speedup times the median ratio; an uncompared one shows its own timing.

Examples:
  autokernel log -w autokernel-workspace
  autokernel log -w autokernel-workspace --target 01-matmul
  autokernel log --json | jq '.[] | select(.best)'"
)]
pub struct LogArgs {
    #[command(flatten)]
    pub workspace: super::WorkspaceArg,
    /// Only this target's experiments (an id of plan.json, e.g. 01-matmul)
    #[arg(long, value_name = "ID")]
    pub target: Option<String>,
    /// Print a JSON array, one object per experiment, in results.tsv's order
    #[arg(long)]
    pub json: bool,
}

/// One experiment as `log` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogEntry {
    /// The experiment's number.
    pub experiment: u64,
    /// Target id.
    pub target: String,
    /// `baseline`, `keep`, `revert` or `invalid`.
    pub decision: String,
    /// The judge's verdict word.
    pub correctness: String,
    /// Its own median latency from the judge's timing, µs.
    pub latency_us: Option<f64>,
    /// The best's latency in the head-to-head that decided it, µs.
    pub incumbent_us: Option<f64>,
    /// Its latency in that head-to-head at the median paired ratio that decided it,
    /// `incumbent_us / head_to_head_speedup`, µs ([`Comparison::decided_candidate_us`]).
    ///
    /// [`Comparison::decided_candidate_us`]: autokernel_core::Comparison::decided_candidate_us
    pub candidate_us: Option<f64>,
    /// The head-to-head median of `incumbent / candidate` (> 1: faster than the best).
    pub head_to_head_speedup: Option<f64>,
    /// Spread of that head-to-head, `(max − min) / median` of the per-repetition ratios.
    pub head_to_head_spread: Option<f64>,
    /// The whole head-to-head: each repetition's latencies, the retries of a noisy one and
    /// what the GPU was doing meanwhile (the experiment's note holds it).
    pub head_to_head: Option<autokernel_core::Comparison>,
    /// The bench's interleaved timing, each repetition's latency of the kernel, µs
    /// (`latency_us` their median); empty where it was not timed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bench_samples_us: Vec<f64>,
    /// PyTorch's latency in the same repetitions, µs, paired by index.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bench_reference_samples_us: Vec<f64>,
    /// Speedup over the target's baseline ([`speedups_vs_baseline`]).
    pub speedup_vs_baseline: Option<f64>,
    /// Whether it became the target's best (a PASS baseline, or kept).
    pub best: bool,
    /// Full commit id; `None` for `invalid` rows.
    pub commit: Option<String>,
    /// The agent's description.
    pub description: String,
}

/// The entries of `rows` (`target`'s only, when given), in the log's order.
pub fn entries(rows: &[ExperimentRecord], target: Option<&str>) -> Vec<LogEntry> {
    let mut ids: Vec<&str> = Vec::new();
    for r in rows {
        if !ids.contains(&r.target.as_str()) {
            ids.push(&r.target);
        }
    }
    let mut out: Vec<LogEntry> = ids
        .iter()
        .filter(|id| target.is_none_or(|t| t == **id))
        .flat_map(|id| speedups_vs_baseline(rows.iter().filter(|r| r.target == *id)))
        .map(|(r, speedup, best)| LogEntry {
            experiment: r.experiment,
            target: r.target.clone(),
            decision: r.decision.label().to_string(),
            correctness: r.correctness.label().to_string(),
            latency_us: r.latency_us,
            incumbent_us: r.head_to_head.as_ref().map(|h| h.incumbent_latency_us),
            candidate_us: r.head_to_head.as_ref().map(|h| h.decided_candidate_us()),
            head_to_head_speedup: r.head_to_head.as_ref().map(|h| h.median_speedup),
            head_to_head_spread: r
                .head_to_head
                .as_ref()
                .map(|h| h.spread)
                .filter(|s| s.is_finite()),
            head_to_head: r.head_to_head.clone(),
            bench_samples_us: r.bench_samples_us.clone(),
            bench_reference_samples_us: r.bench_reference_samples_us.clone(),
            speedup_vs_baseline: speedup,
            best,
            commit: r.commit.clone(),
            description: r.description.clone(),
        })
        .collect();
    // results.tsv's order: experiment numbers increase down the file
    out.sort_by_key(|e| e.experiment);
    out
}

/// The entries as aligned text lines with a header.
pub fn render(entries: &[LogEntry]) -> String {
    let width = entries
        .iter()
        .map(|e| e.target.len())
        .max()
        .unwrap_or(6)
        .max(6);
    let mut out = format!(
        "{:>4}  {:<width$}  {:<8}  {:<11}  {:>23}  {:>9}  {:1}  {:<7}  description\n",
        "exp", "target", "decision", "verdict", "latency µs", "vs base", "*", "commit"
    );
    for e in entries {
        let latency = match (e.incumbent_us, e.candidate_us) {
            (Some(i), Some(c)) => format!("{} → {}", latency_us(i), latency_us(c)),
            _ => e.latency_us.map(latency_us).unwrap_or_else(|| "—".into()),
        };
        let vs = e
            .speedup_vs_baseline
            .map_or_else(|| "—".to_string(), |s| format!("{s:.3}x"));
        let commit = e.commit.as_deref().map_or("—", |c| &c[..c.len().min(7)]);
        let _ = writeln!(
            out,
            "{:>4}  {:<width$}  {:<8}  {:<11}  {:>23}  {:>9}  {:1}  {:<7}  {}",
            e.experiment,
            e.target,
            e.decision,
            e.correctness,
            latency,
            vs,
            if e.best { "*" } else { "" },
            commit,
            e.description
        );
    }
    out
}

/// Runs `autokernel log`.
pub async fn run(args: LogArgs, _global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let ws = Workspace::open_existing(&args.workspace.dir)?;
    let rows = ws.rows()?;
    if let Some(t) = &args.target {
        if !rows.iter().any(|r| &r.target == t) {
            let mut known: Vec<&str> = rows.iter().map(|r| r.target.as_str()).collect();
            known.sort_unstable();
            known.dedup();
            bail!(
                "workspace `{}` has no experiment on target `{t}`\nhint: its targets: {}",
                ws.root.display(),
                if known.is_empty() {
                    "none yet".to_string()
                } else {
                    known.join(", ")
                }
            );
        }
    }
    let list = entries(&rows, args.target.as_deref());
    if args.json {
        crate::output::print_stdout(&serde_json::to_string_pretty(&list)?);
    } else {
        crate::output::print_stdout(&render(&list));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use autokernel_core::testing::pass_row as row;
    use autokernel_core::{Comparison, Decision};

    fn h2h(incumbent: f64, candidate: f64) -> Option<Comparison> {
        Some(Comparison {
            incumbent_latency_us: incumbent,
            candidate_latency_us: candidate,
            median_speedup: incumbent / candidate,
            repetitions: 5,
            spread: 0.02,
            ..Default::default()
        })
    }

    /// The seen case: a kept candidate whose standalone latency (54812.57 µs) is above the
    /// baseline's (45065 µs) although the head-to-head kept it 1.1× faster. The log shows
    /// the head-to-head and a speedup over 1, never a kept row slower than its baseline.
    #[test]
    fn a_kept_row_shows_the_head_to_head_that_kept_it() {
        let mut kept = row(2, "01-matmul", Decision::Keep, 54812.57);
        kept.head_to_head = h2h(45065.0, 40968.2);
        let mut reverted = row(3, "01-matmul", Decision::Revert, 9176.0);
        reverted.head_to_head = h2h(40000.0, 50000.0);
        let rows = vec![
            row(1, "01-matmul", Decision::Baseline, 45065.0),
            kept,
            reverted,
            row(4, "02-softmax", Decision::Baseline, 10.0),
        ];
        let list = entries(&rows, None);
        assert_eq!(list.len(), 4);
        assert_eq!(list[0].speedup_vs_baseline, Some(1.0));
        assert!(list[0].best);
        // 45065 / 40968.2 = 1.1 over the baseline: it became the best
        let s = list[1].speedup_vs_baseline.unwrap();
        assert!((s - 45065.0 / 40968.2).abs() < 1e-9, "{s}");
        assert!(list[1].best);
        // the revert is 0.8x the best, so 1.1 × 0.8 = 0.88x the baseline
        let r = list[2].speedup_vs_baseline.unwrap();
        assert!((r - s * 0.8).abs() < 1e-9, "{r}");
        assert!(!list[2].best);
        let text = render(&list);
        let line = text.lines().nth(2).unwrap();
        assert!(line.contains("45065.0 → 40968.2"), "{line}");
        assert!(!line.contains("54812"), "{line}");
        // one target only
        let only = entries(&rows, Some("02-softmax"));
        assert_eq!(only.len(), 1);
        assert_eq!(only[0].experiment, 4);
    }
}

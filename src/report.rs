//! The workspace report: `report.md`, `progress.png` and the terminal summary, all derived
//! from `results.tsv`, the saved plan and the saved verification (never from memory, so
//! `autokernel report` gives the same answer at any time, during or after a run).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use autokernel_core::{keep::end_to_end_speedup, Decision, ExperimentRecord, Target};
use serde::Serialize;

use crate::verification::{Excluded, SavedVerification};
use crate::workspace::Workspace;

/// Per-target figures of the report (the `targets` of `run`, `tune` and `report --json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TargetSummary {
    /// Target id.
    pub id: String,
    /// Kind name.
    pub kind: String,
    /// Share of model time.
    pub fraction: f64,
    /// Baseline latency, µs.
    pub baseline_us: Option<f64>,
    /// Best kept latency, µs: `baseline_us / speedup`, as the keep rule measured it.
    pub best_us: Option<f64>,
    /// The best's speedup over the baseline ([`speedups_vs_baseline`]): the product of the
    /// head-to-head medians that kept each step.
    pub speedup: Option<f64>,
    /// Best kernel's % of roofline.
    pub pct_peak: Option<f64>,
    /// The best kernel's speedup over PyTorch's own op at the target's shape and dtype
    /// (`speedup_vs_reference` of its row): what plugging it into the model gains there.
    pub vs_pytorch: Option<f64>,
    /// Experiments after the baseline.
    pub experiments: usize,
    /// Experiments kept.
    pub kept: usize,
}

/// One target's rows, oldest first, each with its speedup over the target's baseline and
/// whether it became the best. The speedup of a compared row is the best's speedup times
/// the row's head-to-head median (so a kept row is always faster than the best before it,
/// as the keep rule measured it); a row without a head-to-head (a workspace made before
/// they were kept) uses `baseline latency / its latency`. A baseline with a verdict other
/// than PASS, or none yet, leaves every speedup unknown.
pub fn speedups_vs_baseline<'a>(
    rows: impl IntoIterator<Item = &'a ExperimentRecord>,
) -> Vec<(&'a ExperimentRecord, Option<f64>, bool)> {
    let mut out = Vec::new();
    let mut baseline_us: Option<f64> = None;
    let mut best: Option<f64> = None;
    for r in rows {
        if r.decision == Decision::Baseline {
            // a baseline cut short has no verdict: a later one is the start
            if !r.correctness.is_judged() {
                out.push((r, None, false));
                continue;
            }
            let pass = r.correctness.is_pass();
            baseline_us = r.latency_us.filter(|_| pass);
            best = pass.then_some(1.0);
            out.push((r, best, pass));
            continue;
        }
        let speedup = match (&r.head_to_head, best, baseline_us, r.latency_us) {
            _ if !r.correctness.is_pass() => None,
            (Some(h), Some(b), _, _) => Some(b * h.median_speedup),
            (None, Some(_), Some(base), Some(l)) if l > 0.0 => Some(base / l),
            _ => None,
        };
        let kept = r.decision == Decision::Keep && r.correctness.is_pass();
        if kept {
            best = speedup.or(best);
        }
        out.push((r, speedup, kept));
    }
    out
}

/// Summarises each target from its rows (kept rows give the best; the baseline the start;
/// the speedup is [`speedups_vs_baseline`]'s, the head-to-head figures that kept each step).
pub fn summarize(targets: &[Target], rows: &[ExperimentRecord]) -> Vec<TargetSummary> {
    targets
        .iter()
        .map(|t| {
            let mine: Vec<&ExperimentRecord> = rows.iter().filter(|r| r.target == t.id).collect();
            let chain = speedups_vs_baseline(mine.iter().copied());
            let baseline = mine
                .iter()
                .rev()
                .find(|r| r.decision == Decision::Baseline && r.correctness.is_judged())
                .copied();
            let best_step = chain.iter().rev().find(|(_, _, became_best)| *became_best);
            let best = best_step.map(|(r, _, _)| *r);
            let baseline_us = baseline.and_then(|r| r.latency_us);
            let speedup = best_step.and_then(|(_, s, _)| *s);
            // the best's latency as the keep rule measured it: the baseline's over the
            // head-to-head speedups that kept each step (so that it never reads slower
            // than the baseline beside a speedup over 1); its own timing without them
            let best_us = match (baseline_us, speedup) {
                (Some(b), Some(s)) if s > 0.0 => Some(b / s),
                _ => best.and_then(|r| r.latency_us),
            };
            TargetSummary {
                id: t.id.clone(),
                kind: t.kind.to_string(),
                fraction: t.fraction,
                baseline_us,
                best_us,
                speedup,
                pct_peak: best.and_then(|r| r.pct_peak),
                vs_pytorch: best.and_then(|r| r.speedup_vs_reference),
                experiments: mine
                    .iter()
                    .filter(|r| r.decision != Decision::Baseline)
                    .count(),
                kept: mine.iter().filter(|r| r.decision == Decision::Keep).count(),
            }
        })
        .collect()
}

fn opt(v: Option<f64>, decimals: usize, suffix: &str) -> String {
    v.map_or_else(|| "—".to_string(), |x| format!("{x:.decimals$}{suffix}"))
}

/// Targets whose best kernel is not faster than PyTorch's own op at the model's shape, with
/// the reason: verification leaves them out, so the model is never made slower by them.
pub fn slower_than_pytorch(summaries: &[TargetSummary]) -> Vec<Excluded> {
    summaries
        .iter()
        .filter_map(|s| {
            let x = s.vs_pytorch?;
            (x <= 1.0).then(|| Excluded {
                target: s.id.clone(),
                reason: format!(
                    "slower than PyTorch at the model's shape ({x:.3}x): PyTorch's own op is kept"
                ),
                broken: false,
                undecided: false,
            })
        })
        .collect()
}

/// Targets whose kernel was never judged PASS (a baseline cut short, failed or not run
/// yet, and nothing kept since), with the reason: verification, the report's projection
/// and an export never use such a kernel, whatever `kernel.py` holds.
pub fn never_judged_pass(targets: &[Target], rows: &[ExperimentRecord]) -> Vec<Excluded> {
    targets
        .iter()
        .filter_map(|t| {
            let mine = rows.iter().filter(|r| r.target == t.id);
            let chain = speedups_vs_baseline(mine);
            if chain.iter().any(|(_, _, became_best)| *became_best) {
                return None;
            }
            let last = chain
                .iter()
                .rev()
                .find(|(r, _, _)| r.decision == Decision::Baseline)
                .map(|(r, _, _)| r.correctness);
            let reason = match last {
                Some(word) => {
                    format!("never judged PASS (its baseline's verdict: {word}): not plugged in")
                }
                None => "never judged: no baseline verdict yet (the run has not reached this target, or stopped while judging its baseline)".to_string(),
            };
            Some(Excluded {
                target: t.id.clone(),
                reason,
                broken: false,
                undecided: false,
            })
        })
        .collect()
}

/// Each target's best kernel as the judge passed it: the experiment number and commit of
/// the last row that became its best ([`speedups_vs_baseline`]); targets without one are
/// absent ([`never_judged_pass`] says why).
pub fn judged_bests(
    targets: &[Target],
    rows: &[ExperimentRecord],
) -> BTreeMap<String, (u64, String)> {
    targets
        .iter()
        .filter_map(|t| {
            let chain = speedups_vs_baseline(rows.iter().filter(|r| r.target == t.id));
            let (r, _, _) = chain.into_iter().rev().find(|(_, _, best)| *best)?;
            Some((t.id.clone(), (r.experiment, r.commit.clone()?)))
        })
        .collect()
}

/// The per-target table in Markdown (also printed on the terminal).
pub fn summary_table(summaries: &[TargetSummary]) -> String {
    let mut out = String::from(
        "| target | kind | share of time | baseline µs | best µs | speedup | vs PyTorch | % roofline | experiments | kept |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for s in summaries {
        let _ = writeln!(
            out,
            "| {} | {} | {:.1}% | {} | {} | {} | {} | {} | {} | {} |",
            s.id,
            s.kind,
            s.fraction * 100.0,
            opt(s.baseline_us, 2, ""),
            opt(s.best_us, 2, ""),
            opt(s.speedup, 3, "x"),
            opt(s.vs_pytorch, 3, "x"),
            opt(s.pct_peak, 1, "%"),
            s.experiments,
            s.kept
        );
    }
    out
}

/// Projected end-to-end speedup (Amdahl) from each target's share of the model's time and
/// its best kernel's speedup over PyTorch; a kernel slower than PyTorch is not plugged in
/// (see [`slower_than_pytorch`]) and counts as 1.
pub fn projected(summaries: &[TargetSummary]) -> f64 {
    let parts: Vec<(f64, f64)> = summaries
        .iter()
        .map(|s| (s.fraction, s.vs_pytorch.unwrap_or(1.0).max(1.0)))
        .collect();
    end_to_end_speedup(&parts)
}

/// Builds `report.md`. `stale`: the targets whose kernel.py is not the one `verification`
/// saw ([`crate::Verification::changed_kernels`], computed once by the caller).
pub fn render_markdown(
    ws: &Workspace,
    targets: &[Target],
    rows: &[ExperimentRecord],
    verification: &SavedVerification,
    stale: &[String],
) -> String {
    let summaries = summarize(targets, rows);
    let mut md = String::new();
    let _ = writeln!(md, "# autokernel report\n");
    let _ = writeln!(md, "Workspace: `{}`  ", ws.root.display());
    if let Some(model) = &ws.settings.model {
        let _ = writeln!(md, "Model: `{}`  ", model.label());
    }
    if let Some(kernel) = &ws.settings.tuned_kernel {
        // `autokernel tune`: one kernel and no model, so no share of time, Amdahl or
        // end-to-end speedup to project
        let _ = writeln!(md, "Kernel tuned: `{}`  ", kernel.display());
        let _ = writeln!(md, "Experiments logged: {}\n", rows.len());
        let _ = writeln!(md, "## Result\n\n{}", summary_table(&summaries));
        let _ = writeln!(
            md,
            "An `autokernel tune` workspace has no model: nothing to verify end to end."
        );
        return md;
    }
    let _ = writeln!(md, "Experiments logged: {}\n", rows.len());
    let _ = writeln!(md, "## Plan\n");
    let _ = writeln!(md, "| target | kind | op | shapes | share of time | end-to-end speedup if 2x faster |\n| --- | --- | --- | --- | --- | --- |");
    for t in targets {
        let shapes: Vec<String> = t.shapes.iter().map(|s| s.to_string()).collect();
        let layout = match t.layout {
            autokernel_core::Layout::Contiguous => "",
            autokernel_core::Layout::BTransposed => " (B transposed)",
        };
        let params = if t.params.is_empty() {
            String::new()
        } else {
            format!(" ({})", autokernel_core::params_label(&t.params))
        };
        let _ = writeln!(
            md,
            "| {} | {}{params} | `{}` | {}{layout} | {:.1}% | {:.3}x |",
            t.id,
            t.kind,
            t.op,
            shapes.join(", "),
            t.fraction * 100.0,
            end_to_end_speedup(&[(t.fraction, 2.0)])
        );
    }
    let _ = writeln!(md, "\n## Targets\n\n{}", summary_table(&summaries));
    let _ = writeln!(
        md,
        "Projected end-to-end speedup (Amdahl over the targets): **{:.3}x**\n",
        projected(&summaries)
    );
    let _ = writeln!(md, "## End-to-end verification\n");
    match verification {
        SavedVerification::None => {
            let _ = writeln!(
                md,
                "Not run yet (`autokernel verify --workspace {}`).",
                ws.root.display()
            );
        }
        SavedVerification::Unreadable(error) => {
            // the error names the file and says how to write a new one
            let _ = writeln!(md, "Unreadable: {}", error.replace('\n', "; "));
        }
        SavedVerification::Saved(v) => {
            if !v.has_hashes() {
                let _ = writeln!(
                    md,
                    "(This verification predates the kernel hashes of `verify.json`: whether a `kernel.py` changed since cannot be told.)\n"
                );
            }
            if !stale.is_empty() {
                let _ = writeln!(
                    md,
                    "**Stale:** the `kernel.py` of {} changed after this verification; run `autokernel verify --workspace {}` again.\n",
                    stale.join(", "),
                    ws.root.display()
                );
            }
            if v.cut_short {
                let _ = writeln!(
                    md,
                    "**Cut short:** {}; the kernels it did not decide are left out (`autokernel verify --workspace {}` decides them).\n",
                    v.cut_short_reason.as_deref().unwrap_or("no reason recorded"),
                    ws.root.display()
                );
            }
            let _ = writeln!(
                md,
                "- result: **{}** on {}",
                if v.passed { "PASS" } else { "FAIL" },
                v.device
            );
            let _ = writeln!(
                md,
                "- kernels plugged in: {}",
                if v.included.is_empty() {
                    "none".into()
                } else {
                    v.included.join(", ")
                }
            );
            for e in &v.excluded {
                let _ = writeln!(md, "- left out `{}`: {}", e.target, e.reason);
            }
            let _ = writeln!(
                md,
                "- max abs error vs the unmodified model: {}",
                v.max_abs_error
                    .map_or_else(|| "—".to_string(), crate::numfmt::significant)
            );
            let _ = writeln!(
                md,
                "- eager {} ms, with kernels {} ms: **{}**{}",
                opt(v.eager_ms, 3, ""),
                opt(v.optimized_ms, 3, ""),
                opt(v.speedup, 3, "x"),
                if v.timing_representative {
                    ""
                } else {
                    " (CPU interpreter: not representative)"
                }
            );
            if !v.modes.is_empty() {
                // launches per forward where they were counted (a GPU): the kernels a mode
                // saves or adds beside its times
                let counted = v
                    .modes
                    .iter()
                    .any(|m| m.baseline_launches.is_some() || m.kernels_launches.is_some());
                let (head, rule) = if counted {
                    (" launches without | launches with |", " --- | --- |")
                } else {
                    ("", "")
                };
                let _ = writeln!(
                    md,
                    "\nTime per forward in each deploy mode (ms; `{}` decided which kernels went in):\n\n| mode | without kernels | with kernels | speedup |{head}\n| --- | --- | --- | --- |{rule}",
                    v.deploy.as_deref().unwrap_or("eager")
                );
                let count = |n: Option<u64>| n.map_or(String::new(), |n| n.to_string());
                for m in &v.modes {
                    let launches = if counted {
                        format!(
                            " {} | {} |",
                            count(m.baseline_launches),
                            count(m.kernels_launches)
                        )
                    } else {
                        String::new()
                    };
                    match &m.error {
                        Some(e) => {
                            let _ = writeln!(
                                md,
                                "| {} | {} | | |{launches}",
                                m.mode,
                                e.replace('|', "/")
                            );
                        }
                        None => {
                            let _ = writeln!(
                                md,
                                "| {} | {} | {} | {} |{launches}",
                                m.mode,
                                opt(m.baseline_ms, 3, ""),
                                opt(m.kernels_ms, 3, ""),
                                opt(m.speedup, 3, "x")
                            );
                        }
                    }
                }
            }
            if let Some(line) = contexts_line(v.contexts.as_deref()) {
                let _ = writeln!(md, "\n{line}");
            }
            if charted_modes(&v.modes) > 0 {
                let _ = writeln!(md, "\n![time per forward in each deploy mode](modes.png)");
            }
        }
    }
    let _ = writeln!(md, "\n![progress](progress.png)\n\nEvery experiment is a row of `results.tsv` and a commit: `git log --all --oneline -- targets` in the workspace.");
    md
}

/// What report.md says of where an exported package runs the kernels (`contexts`, as
/// [`Verification::contexts`]), or `None` when every context takes them or it is unknown.
fn contexts_line(contexts: Option<&[String]>) -> Option<String> {
    const ALL: [(&str, &str); 3] = [
        ("eager", "eager"),
        ("cudagraph", "CUDA graphs"),
        ("compile", "torch.compile"),
    ];
    let contexts = contexts?;
    fn name(c: &str) -> &str {
        ALL.iter().find(|(k, _)| *k == c).map_or(c, |(_, n)| n)
    }
    let off: Vec<&str> = ALL
        .iter()
        .filter(|(k, _)| !contexts.iter().any(|c| c == k))
        .map(|(_, n)| *n)
        .collect();
    if off.is_empty() {
        return None;
    }
    let on: Vec<&str> = contexts.iter().map(|c| name(c)).collect();
    Some(format!(
        "An exported package runs these kernels in {}; in {} the model keeps its own ops (the table measured it slower with them there).",
        if on.is_empty() { "no context".to_string() } else { on.join(" and ") },
        off.join(" and ")
    ))
}

/// Writes `report.md` and `progress.png` into the workspace, and `modes.png` when the
/// verification timed the model in some deploy mode (else an earlier `modes.png` is
/// removed, so the chart never shows another verification than report.md). `stale`: the
/// targets whose kernel.py changed after `verification` ([`Workspace::stale_kernels`]).
///
/// # Errors
/// When a file cannot be written or the stale chart removed.
pub fn write(
    ws: &Workspace,
    targets: &[Target],
    rows: &[ExperimentRecord],
    verification: &SavedVerification,
    stale: &[String],
) -> anyhow::Result<()> {
    let md = render_markdown(ws, targets, rows, verification, stale);
    let path = ws.path("report.md");
    std::fs::write(&path, md).with_context(|| format!("cannot write `{}`", path.display()))?;
    let modes = verification.get().map_or(&[][..], |v| &v.modes[..]);
    let chart = ws.path("modes.png");
    if charted_modes(modes) > 0 {
        draw_modes(&chart, modes)?;
    } else if chart.exists() {
        std::fs::remove_file(&chart)
            .with_context(|| format!("cannot remove `{}`", chart.display()))?;
    }
    draw_progress(&ws.path("progress.png"), targets, rows)
}

/// Colour of the model's own time per forward in `modes.png`.
const WITHOUT_KERNELS: plotters::style::RGBColor = plotters::style::RGBColor(230, 85, 13);
/// Colour of the time per forward with the kernels in `modes.png`.
const WITH_KERNELS: plotters::style::RGBColor = plotters::style::RGBColor(49, 130, 189);

/// The modes `modes.png` draws: those timed both without and with the kernels.
fn charted_modes(modes: &[crate::verification::ModeTiming]) -> usize {
    modes
        .iter()
        .filter(|m| m.baseline_ms.is_some() && m.kernels_ms.is_some())
        .count()
}

/// Draws `modes.png`: per deploy mode of the verification's table (`eager`, `cudagraph`,
/// `compile`, `reduce-overhead`), the model's time per forward in ms without (orange) and
/// with (blue) the included kernels, side by side; a mode that failed or was not timed
/// both ways is left out.
///
/// # Errors
/// When the file cannot be written.
pub fn draw_modes(path: &Path, modes: &[crate::verification::ModeTiming]) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let root = BitMapBackend::new(path, (800, 480)).into_drawing_area();
    draw_modes_on(&root, modes, crate::fonts::register())?;
    root.present()
        .with_context(|| format!("cannot write `{}`", path.display()))?;
    Ok(())
}

/// The frame progress.png and modes.png share: `root` filled white, margins and label areas
/// for the axes, and `caption` at `size` pixels where a font is registered (`font`).
fn chart_frame<'a, DB: plotters::prelude::DrawingBackend>(
    root: &'a plotters::prelude::DrawingArea<DB, plotters::coord::Shift>,
    font: bool,
    caption: &str,
    size: u32,
) -> anyhow::Result<plotters::prelude::ChartBuilder<'a, 'a, DB>>
where
    DB::ErrorType: 'static,
{
    use plotters::prelude::*;
    root.fill(&WHITE)?;
    let mut builder = ChartBuilder::on(root);
    builder
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(56);
    if font {
        builder.caption(caption, ("sans-serif", size));
    }
    Ok(builder)
}

/// [`draw_modes`] on any drawing area (the tests draw into a pixel buffer), with text where
/// a `font` is registered.
fn draw_modes_on<DB: plotters::prelude::DrawingBackend>(
    root: &plotters::prelude::DrawingArea<DB, plotters::coord::Shift>,
    modes: &[crate::verification::ModeTiming],
    font: bool,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    use plotters::prelude::*;
    let timed: Vec<(&str, f64, f64)> = modes
        .iter()
        .filter_map(|m| Some((m.mode.as_str(), m.baseline_ms?, m.kernels_ms?)))
        .collect();
    let max_ms = timed
        .iter()
        .map(|(_, a, b)| a.max(*b))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.15;
    let mut builder = chart_frame(
        root,
        font,
        "time per forward: the model alone (orange), with the kernels (blue)",
        18,
    )?;
    let n = timed.len() as u32;
    let mut chart = builder.build_cartesian_2d((0u32..n.max(1)).into_segmented(), 0f64..max_ms)?;
    let mode_label = |v: &SegmentValue<u32>| match v {
        SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => timed
            .get(*i as usize)
            .map(|(name, a, b)| format!("{name} {:.2}x", a / b))
            .unwrap_or_default(),
        SegmentValue::Last => String::new(),
    };
    // without a font, no mesh at all: plotters 0.3.7 overflows computing a segmented axis
    // asked for no labels (a hang in a release build, on the lent H100 that has no fonts)
    if font {
        let mut mesh = chart.configure_mesh();
        mesh.disable_x_mesh();
        mesh.y_desc("ms per forward").x_label_formatter(&mode_label);
        mesh.draw()?;
    }
    for (i, (_, without_ms, with_ms)) in timed.iter().enumerate() {
        let i = i as u32;
        let bars = [
            (
                SegmentValue::Exact(i),
                SegmentValue::CenterOf(i),
                *without_ms,
                WITHOUT_KERNELS,
            ),
            (
                SegmentValue::CenterOf(i),
                SegmentValue::Exact(i + 1),
                *with_ms,
                WITH_KERNELS,
            ),
        ];
        chart.draw_series(bars.into_iter().map(|(left, right, ms, color)| {
            let mut bar = Rectangle::new([(left, ms), (right, 0.0)], color.filled());
            bar.set_margin(0, 0, 6, 6);
            bar
        }))?;
    }
    Ok(())
}

/// One point of the progress chart.
struct Point {
    experiment: f64,
    speedup: f64,
    kept: bool,
}

/// Draws `progress.png`: speedup over each target's baseline per experiment (kept ones
/// filled, reverted ones hollow), and the running best per target as a step line.
pub fn draw_progress(
    path: &Path,
    targets: &[Target],
    rows: &[ExperimentRecord],
) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let font = crate::fonts::register();
    let mut series: BTreeMap<String, Vec<Point>> = BTreeMap::new();
    for t in targets {
        // the speedups the keep rule measured (head to head), as `log` and the table show
        let points: Vec<Point> = speedups_vs_baseline(rows.iter().filter(|r| r.target == t.id))
            .into_iter()
            .filter_map(|(r, speedup, became_best)| {
                Some(Point {
                    experiment: r.experiment as f64,
                    speedup: speedup.filter(|s| s.is_finite() && *s > 0.0)?,
                    kept: became_best,
                })
            })
            .collect();
        if points.is_empty() {
            continue;
        }
        series.insert(t.id.clone(), points);
    }
    let max_x = rows.iter().map(|r| r.experiment).max().unwrap_or(1) as f64 + 1.0;
    let max_y = series
        .values()
        .flatten()
        .map(|p| p.speedup)
        .fold(1.0f64, f64::max)
        * 1.1;
    let root = BitMapBackend::new(path, (1000, 560)).into_drawing_area();
    let mut builder = chart_frame(
        &root,
        font,
        "speedup over each target's baseline, per experiment",
        20,
    )?;
    let mut chart = builder.build_cartesian_2d(0f64..max_x, 0f64..max_y)?;
    let mut mesh = chart.configure_mesh();
    if font {
        mesh.x_desc("experiment").y_desc("speedup (x)");
    } else {
        mesh.disable_x_mesh()
            .disable_y_mesh()
            .x_labels(0)
            .y_labels(0);
    }
    mesh.draw()?;
    for (i, (id, points)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        // running best as a step line: flat until the next kept experiment, then up
        let mut steps: Vec<(f64, f64)> = Vec::new();
        let mut best: Option<f64> = None;
        for p in points.iter().filter(|p| p.kept) {
            if let Some(b) = best {
                steps.push((p.experiment, b));
            }
            let b = best.map_or(p.speedup, |b| b.max(p.speedup));
            steps.push((p.experiment, b));
            best = Some(b);
        }
        if let (Some(b), Some(last)) = (best, points.last()) {
            steps.push((last.experiment, b));
        }
        let line = chart.draw_series(LineSeries::new(steps, color.stroke_width(2)))?;
        if font {
            line.label(id.clone()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
        }
        chart.draw_series(points.iter().map(|p| {
            let style = if p.kept {
                color.filled()
            } else {
                color.stroke_width(1)
            };
            Circle::new((p.experiment, p.speedup), if p.kept { 5 } else { 3 }, style)
        }))?;
    }
    if font && !series.is_empty() {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()
        .with_context(|| format!("cannot write `{}`", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verification::{file_sha256, verification_summary, ModeTiming, Verification};
    use autokernel_core::testing::pass_row as row;
    use autokernel_core::{DType, KernelKind, Shape};

    fn target(id: &str, f: f64) -> Target {
        Target::new(id, KernelKind::Softmax)
            .with_shapes(vec![Shape(vec![8, 8])])
            .with_dtype(DType::Float16)
            .with_fraction(f)
            .with_op("x")
    }

    #[test]
    fn summary_takes_the_last_kept_row_as_best() {
        let rows = vec![
            row(1, "a", Decision::Baseline, 100.0),
            row(2, "a", Decision::Keep, 80.0),
            row(3, "a", Decision::Revert, 10.0),
            row(4, "a", Decision::Keep, 50.0),
        ];
        let s = &summarize(&[target("a", 0.6)], &rows)[0];
        assert_eq!(s.best_us, Some(50.0));
        assert_eq!(s.speedup, Some(2.0));
        assert_eq!((s.experiments, s.kept), (3, 2));
        assert_eq!(s.vs_pytorch, Some(2.0));
        // 0.6 at 2x saves 0.3 → 1/0.7
        assert!((projected(std::slice::from_ref(s)) - 1.0 / 0.7).abs() < 1e-12);
        assert!(slower_than_pytorch(std::slice::from_ref(s)).is_empty());
    }

    #[test]
    fn a_kernel_slower_than_pytorch_is_left_out_and_projects_no_gain() {
        // b: the starter (125 µs) was improved to 110 µs, still slower than PyTorch's 100 µs
        let rows = vec![
            row(1, "a", Decision::Baseline, 100.0),
            row(2, "a", Decision::Keep, 50.0),
            row(3, "b", Decision::Baseline, 125.0),
            row(4, "b", Decision::Keep, 110.0),
        ];
        let s = summarize(&[target("a", 0.6), target("b", 0.3)], &rows);
        assert_eq!(s[1].speedup, Some(125.0 / 110.0));
        let out = slower_than_pytorch(&s);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].target, "b");
        assert!(out[0].reason.contains("0.909x"), "{}", out[0].reason);
        // only a counts: 0.6 at 2x → 1/0.7, b stays at 1
        assert!((projected(&s) - 1.0 / 0.7).abs() < 1e-12);
    }

    /// The plan's column names what its figure is (the model's speedup were the target
    /// 2x faster: 0.5 of the time → 1/0.75), not a "ceiling" like the profile's; a tiny
    /// verification error keeps its digits.
    #[test]
    fn report_md_names_the_2x_projection_and_keeps_a_tiny_error_readable() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let v = Verification {
            max_abs_error: Some(2.98e-7),
            ..Default::default()
        };
        let md = render_markdown(
            &ws,
            &[target("01-a", 0.5)],
            &[],
            &SavedVerification::Saved(v),
            &[],
        );
        assert!(
            md.contains("| share of time | end-to-end speedup if 2x faster |")
                && md.contains("| 50.0% | 1.333x |"),
            "{md}"
        );
        assert!(!md.contains("ceiling"), "{md}");
        assert!(
            md.contains("- max abs error vs the unmodified model: 2.980e-7\n"),
            "{md}"
        );
    }

    /// report.md names the contexts where an exported package leaves the model its own ops,
    /// and says nothing when the kernels run everywhere.
    #[test]
    fn report_md_says_where_an_exported_package_keeps_the_models_own_ops() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let render = |contexts: &[&str]| {
            let v = Verification {
                included: vec!["01-a".into()],
                contexts: Some(contexts.iter().map(|c| c.to_string()).collect()),
                ..Default::default()
            };
            render_markdown(
                &ws,
                &[target("01-a", 0.5)],
                &[],
                &SavedVerification::Saved(v),
                &[],
            )
        };
        let md = render(&["eager", "cudagraph"]);
        assert!(
            md.contains("An exported package runs these kernels in eager and CUDA graphs; in torch.compile the model keeps its own ops"),
            "{md}"
        );
        let md = render(&["eager", "cudagraph", "compile"]);
        assert!(!md.contains("An exported package runs"), "{md}");
    }

    #[test]
    fn the_modes_table_counts_launches_per_forward_where_they_were_counted() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let render = |modes: Vec<ModeTiming>| {
            let v = Verification {
                included: vec!["01-a".into()],
                modes,
                ..Default::default()
            };
            render_markdown(
                &ws,
                &[target("01-a", 0.5)],
                &[],
                &SavedVerification::Saved(v),
                &[],
            )
        };
        // a GPU: the fused chain takes two launches a layer out of eager's 50
        let md = render(vec![ModeTiming {
            baseline_launches: Some(50),
            kernels_launches: Some(26),
            ..mode("eager", 2.0, Some(1.6))
        }]);
        assert!(
            md.contains("| speedup | launches without | launches with |"),
            "{md}"
        );
        assert!(
            md.contains("| eager | 2.000 | 1.600 | 1.250x | 50 | 26 |"),
            "{md}"
        );
        // the CPU counts none: no launch columns
        let md = render(vec![mode("eager", 2.0, Some(1.6))]);
        assert!(!md.contains("launches"), "{md}");
        assert!(md.contains("| eager | 2.000 | 1.600 | 1.250x |\n"), "{md}");
    }

    #[test]
    fn saved_verification_reads_missing_corrupt_and_saved_files() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let targets = [target("01-a", 0.6)];
        let loaded = ws.saved_verification();
        assert!(matches!(loaded, SavedVerification::None), "{loaded:?}");
        assert!(render_markdown(&ws, &targets, &[], &loaded, &[]).contains("Not run yet"));

        std::fs::write(ws.path("verify.json"), "{bad").unwrap();
        let loaded = ws.saved_verification();
        let SavedVerification::Unreadable(error) = &loaded else {
            panic!("{loaded:?}")
        };
        assert!(error.contains("is not a verification"), "{error}");
        assert!(loaded.get().is_none());
        let md = render_markdown(&ws, &targets, &[], &loaded, &[]);
        assert!(
            md.contains("Unreadable: `") && !md.contains("Not run yet"),
            "{md}"
        );
        assert!(verification_summary(&ws.root, &loaded, &[])
            .starts_with("verification: unreadable verify.json"),);

        // not a file at all: the path and the hint all the same
        std::fs::remove_file(ws.path("verify.json")).unwrap();
        std::fs::create_dir(ws.path("verify.json")).unwrap();
        let SavedVerification::Unreadable(error) = ws.saved_verification() else {
            panic!("a directory read as a verification")
        };
        assert!(
            error.contains("cannot read `") && error.contains("writes a new one"),
            "{error}"
        );
        std::fs::remove_dir(ws.path("verify.json")).unwrap();

        let v = Verification {
            passed: true,
            included: vec!["01-a".into()],
            device: "cpu".into(),
            ..Default::default()
        };
        ws.save_verification(&v).unwrap();
        let loaded = ws.saved_verification();
        assert_eq!(loaded.get().map(|v| v.passed), Some(true));
        assert_eq!(
            verification_summary(&ws.root, &loaded, &[]),
            "verification: PASS on cpu"
        );
        // a check that plugged in nothing is no PASS, as `verify` says
        let nothing = Verification {
            included: vec![],
            ..v.clone()
        };
        ws.save_verification(&nothing).unwrap();
        assert_eq!(
            verification_summary(&ws.root, &ws.saved_verification(), &[]),
            "verification: n/a on cpu (no kernel was plugged in)"
        );
    }

    #[test]
    fn a_kernel_edited_after_the_verification_makes_it_stale() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let targets = [target("01-a", 0.6), target("02-b", 0.3)];
        let path = ws.path(&targets[0].kernel_relpath());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "KERNEL_KIND = 'softmax'\n").unwrap();
        // `printf "KERNEL_KIND = 'softmax'\n" | sha256sum`
        let digest = "c76b76bb94939f56b5d9875658672e9259772bca6844090d690cad77466b37f5";
        assert_eq!(file_sha256(&path).as_deref(), Some(digest));
        let v = Verification {
            passed: true,
            included: vec!["01-a".into()],
            kernel_sha256: Some([("01-a".to_string(), digest.to_string())].into()),
            ..Default::default()
        };
        assert!(v.changed_kernels(&ws.root, &targets).is_empty());
        let md = render_markdown(
            &ws,
            &targets,
            &[],
            &SavedVerification::Saved(v.clone()),
            &v.changed_kernels(&ws.root, &targets),
        );
        assert!(!md.contains("Stale"), "{md}");

        std::fs::write(&path, "KERNEL_KIND = 'softmax'\n# edited\n").unwrap();
        assert_eq!(v.changed_kernels(&ws.root, &targets), ["01-a"]);
        let md = render_markdown(
            &ws,
            &targets,
            &[],
            &SavedVerification::Saved(v.clone()),
            &v.changed_kernels(&ws.root, &targets),
        );
        assert!(
            md.contains("**Stale:** the `kernel.py` of 01-a changed"),
            "{md}"
        );

        std::fs::remove_file(&path).unwrap();
        assert_eq!(v.changed_kernels(&ws.root, &targets), ["01-a"]);

        // the digest's case does not matter; a target that had no kernel when verified and
        // has one now is stale too
        std::fs::write(&path, "KERNEL_KIND = 'softmax'\n").unwrap();
        let upper = Verification {
            kernel_sha256: Some([("01-a".to_string(), digest.to_uppercase())].into()),
            ..v.clone()
        };
        assert!(upper.changed_kernels(&ws.root, &targets).is_empty());
        let other = ws.path(&targets[1].kernel_relpath());
        std::fs::create_dir_all(other.parent().unwrap()).unwrap();
        std::fs::write(&other, "KERNEL_KIND = 'softmax'\n").unwrap();
        assert_eq!(v.changed_kernels(&ws.root, &targets), ["02-b"]);

        // a verify.json from before the hashes: staleness unknown, nothing flagged, and
        // report.md says it cannot tell
        let old: Verification =
            serde_json::from_str(r#"{"passed": true, "included": ["01-a"], "excluded": [], "device": "cpu", "timing_representative": false}"#)
                .unwrap();
        assert!(old.kernel_sha256.is_none());
        assert!(old.changed_kernels(&ws.root, &targets).is_empty());
        // one that saw no kernel (none plugged in) is stale once a kernel exists
        let none_seen = Verification {
            kernel_sha256: Some(BTreeMap::new()),
            ..old.clone()
        };
        assert_eq!(
            none_seen.changed_kernels(&ws.root, &targets),
            vec!["01-a", "02-b"]
        );
        let md = render_markdown(&ws, &targets, &[], &SavedVerification::Saved(old), &[]);
        assert!(md.contains("predates the kernel hashes"), "{md}");
    }

    fn mode(name: &str, baseline_ms: f64, kernels_ms: Option<f64>) -> ModeTiming {
        ModeTiming {
            mode: name.into(),
            baseline_ms: Some(baseline_ms),
            kernels_ms,
            speedup: kernels_ms.map(|k| baseline_ms / k),
            error: None,
            ..ModeTiming::default()
        }
    }

    /// Pixels of each bar colour in a `modes.png` of `modes`, drawn into a buffer.
    fn bar_pixels(modes: &[ModeTiming]) -> (usize, usize) {
        use plotters::prelude::*;
        let (w, h) = (800u32, 480u32);
        let mut buf = vec![0u8; (w * h * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
            draw_modes_on(&root, modes, crate::fonts::register()).unwrap();
            root.present().unwrap();
        }
        let count = |c: RGBColor| buf.chunks(3).filter(|p| p == &[c.0, c.1, c.2]).count();
        (count(WITHOUT_KERNELS), count(WITH_KERNELS))
    }

    /// Each mode's two bars are as tall as its times: with the same widths, the areas of
    /// the two colours are in the ratio of the summed times.
    #[test]
    fn modes_chart_draws_each_modes_two_times_to_scale() {
        let (without, with) = bar_pixels(&[
            mode("eager", 4.0, Some(2.0)),
            mode("cudagraph", 2.0, Some(1.0)),
        ]);
        let ratio = without as f64 / with as f64;
        assert!(
            (ratio - 2.0).abs() < 0.05,
            "{without} orange and {with} blue pixels: {ratio}"
        );
        // a mode timed one way only is not drawn: the same pixels as without it
        let failed = ModeTiming {
            error: Some("compile with 01-a: TypeError".into()),
            ..mode("compile", 3.0, None)
        };
        assert_eq!(charted_modes(std::slice::from_ref(&failed)), 0);
        let (w2, k2) = bar_pixels(&[
            mode("eager", 4.0, Some(2.0)),
            mode("cudagraph", 2.0, Some(1.0)),
            failed,
        ]);
        assert_eq!(
            ((w2 as f64) / (k2 as f64) * 100.0).round(),
            (ratio * 100.0).round()
        );
    }

    #[test]
    fn progress_png_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("progress.png");
        let rows = vec![
            row(1, "a", Decision::Baseline, 100.0),
            row(2, "a", Decision::Keep, 80.0),
            row(3, "a", Decision::Revert, 90.0),
        ];
        draw_progress(&p, &[target("a", 0.6)], &rows).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    }

    #[test]
    fn modes_png_is_drawn_without_a_font() {
        // a GPU machine without fonts (the lent H100) drew nothing and hung here
        use plotters::prelude::*;
        let (w, h) = (800u32, 480u32);
        let mut buf = vec![0u8; (w * h * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
            let modes = [
                mode("eager", 4.0, Some(2.0)),
                mode("cudagraph", 2.0, Some(1.5)),
            ];
            draw_modes_on(&root, &modes, false).unwrap();
            root.present().unwrap();
        }
        let orange = buf
            .chunks(3)
            .filter(|p| p == &[WITHOUT_KERNELS.0, WITHOUT_KERNELS.1, WITHOUT_KERNELS.2])
            .count();
        assert!(orange > 0, "the bars are drawn");
    }
}

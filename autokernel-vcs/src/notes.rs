//! The note kept with each decided experiment under [`NOTES_REF`]: its verdict, key metrics
//! and the head-to-head timing that decided it, as `key: value` lines (units in the keys),
//! readable with `git log --notes=autokernel` and read back by [`read_notes`].
//!
//! The note is where figures that are not `results.tsv` columns live: that file's columns
//! never change, and a note is attached to the commit without amending it.
//!
//! A benchmarked kernel's `CONFIG` is kept too, as two lines: `kernel_config:` with the
//! literal as Python source on one line, and `kernel_structure_sha256:` with the digest of
//! the rest of the file ([`KernelConfig`]). Notes written before these lines existed, and
//! kernels without a `CONFIG`, simply lack them.
//!
//! The note's `experiment`, `target`, `decision` and `correctness` lines are the verdict
//! the loop recorded with the commit ([`ExperimentNote::verdict`]); on resume, and in
//! `report` and `log`, each row of `results.tsv` that names a commit is checked against it
//! ([`kept_verdicts`], `autokernel_core::audit_rows`), so a row the loop did not write
//! (a candidate that appended one at import) is set aside.

use std::collections::BTreeMap;
use std::path::Path;

use autokernel_core::pyliteral::{parse_literal, KernelConfig, PyValue};
use autokernel_core::{Comparison, ExperimentRecord, GpuConditions, KeptVerdict, StoreError};

/// The ref holding the store's notes: one note per decided experiment, with its verdict and
/// key metrics (`git log --notes=autokernel` shows them).
pub const NOTES_REF: &str = "refs/notes/autokernel";

/// What one experiment's note holds, read back.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ExperimentNote {
    /// The experiment number, when the note names one.
    pub experiment: Option<u64>,
    /// The head-to-head timing that decided it, when it was compared.
    pub head_to_head: Option<Comparison>,
    /// The `CONFIG` the benchmarked kernel declared, when the note records one.
    pub config: Option<KernelConfig>,
    /// The bench's interleaved timing, every repetition, in microseconds: the candidate's
    /// and the reference's ([`ExperimentRecord::bench_samples_us`]); empty where the note
    /// has none.
    pub bench_samples_us: (Vec<f64>, Vec<f64>),
    /// The verdict recorded with the commit: experiment, target, decision, correctness,
    /// each `None` where the note lacks its line or cannot be read.
    pub verdict: KeptVerdict,
}

/// The note attached to a decided experiment.
pub(crate) fn note_text(record: &ExperimentRecord) -> String {
    let opt = |v: Option<f64>| v.map(|x| format!("{x}")).unwrap_or_default();
    let mut text = format!(
        "experiment: {}\ntarget: {}\ndecision: {}\ncorrectness: {}\nlatency_us: {}\nspeedup_vs_reference: {}\npct_peak: {}\n",
        record.experiment,
        record.target,
        record.decision.label(),
        record.correctness,
        opt(record.latency_us),
        opt(record.speedup_vs_reference),
        opt(record.pct_peak),
    );
    // every repetition of the bench's timing and of the head-to-head, so that a spread
    // can be read back to the repetition that made it
    let samples = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    if !record.bench_samples_us.is_empty() {
        text.push_str(&format!(
            "bench_samples_us: {}
bench_reference_samples_us: {}
",
            samples(&record.bench_samples_us),
            samples(&record.bench_reference_samples_us)
        ));
    }
    if let Some(c) = &record.head_to_head {
        text.push_str(&format!(
            "head_to_head_incumbent_us: {}\nhead_to_head_candidate_us: {}\nhead_to_head_median_speedup: {}\nhead_to_head_spread: {}\nhead_to_head_repetitions: {}\n",
            c.incumbent_latency_us, c.candidate_latency_us, c.median_speedup, c.spread, c.repetitions
        ));
        if !c.incumbent_samples_us.is_empty() {
            text.push_str(&format!(
                "head_to_head_incumbent_samples_us: {}\nhead_to_head_candidate_samples_us: {}\n",
                samples(&c.incumbent_samples_us),
                samples(&c.candidate_samples_us)
            ));
        }
        if c.retries > 0 {
            text.push_str(&format!("head_to_head_retries: {}\n", c.retries));
        }
        if let Some(conditions) = &c.conditions {
            text.push_str(&format!("head_to_head_gpu: {}\n", conditions.to_line()));
        }
    }
    // one line: the literal renders on one line (newlines in strings escaped)
    if let Some(config) = &record.config {
        text.push_str(&format!(
            "kernel_config: {}\nkernel_structure_sha256: {}\n",
            PyValue::Dict(config.values.clone()),
            config.structure
        ));
    }
    text
}

/// Reads a note written by `note_text`; unknown keys and unreadable values are ignored
/// (a note of an older or newer autokernel still gives what it can).
pub fn parse_note(text: &str) -> ExperimentNote {
    let fields: BTreeMap<&str, &str> = text
        .lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect();
    let f = |k: &str| fields.get(k).and_then(|v| v.parse::<f64>().ok());
    // a list of numbers, all readable or none
    let samples = |k: &str| -> Vec<f64> {
        fields
            .get(k)
            .and_then(|v| v.split_whitespace().map(|x| x.parse().ok()).collect())
            .unwrap_or_default()
    };
    let head_to_head = match (
        f("head_to_head_incumbent_us"),
        f("head_to_head_candidate_us"),
        f("head_to_head_median_speedup"),
    ) {
        (Some(incumbent), Some(candidate), Some(speedup)) => Some(Comparison {
            incumbent_latency_us: incumbent,
            candidate_latency_us: candidate,
            median_speedup: speedup,
            spread: f("head_to_head_spread").unwrap_or(f64::NAN),
            repetitions: fields
                .get("head_to_head_repetitions")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            incumbent_samples_us: samples("head_to_head_incumbent_samples_us"),
            candidate_samples_us: samples("head_to_head_candidate_samples_us"),
            retries: fields
                .get("head_to_head_retries")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            conditions: fields.get("head_to_head_gpu").map(|l| parse_conditions(l)),
        }),
        _ => None,
    };
    // both lines or neither: a configuration without its structure could be matched to the
    // wrong kernel
    let config = match (
        fields.get("kernel_config"),
        fields.get("kernel_structure_sha256"),
    ) {
        (Some(literal), Some(structure)) if !structure.is_empty() => parse_literal(literal)
            .ok()
            .and_then(|v| v.as_dict().map(<[_]>::to_vec))
            .map(|values| KernelConfig {
                values,
                structure: structure.to_string(),
            }),
        _ => None,
    };
    let experiment = fields.get("experiment").and_then(|v| v.parse().ok());
    let mut verdict = KeptVerdict::default();
    verdict.experiment = experiment;
    verdict.target = fields.get("target").map(|t| t.to_string());
    verdict.decision = fields.get("decision").and_then(|v| v.parse().ok());
    verdict.correctness = fields.get("correctness").and_then(|v| v.parse().ok());
    ExperimentNote {
        experiment,
        head_to_head,
        config,
        bench_samples_us: (
            samples("bench_samples_us"),
            samples("bench_reference_samples_us"),
        ),
        verdict,
    }
}

/// Reads a [`GpuConditions::to_line`] line back; fields it cannot read stay unset.
fn parse_conditions(line: &str) -> GpuConditions {
    let fields: BTreeMap<&str, &str> = line
        .split_whitespace()
        .filter_map(|t| t.split_once('='))
        .collect();
    let range = |k: &str| {
        let (lo, hi) = fields.get(k)?.split_once('-')?;
        Some((lo.parse().ok()?, hi.parse().ok()?))
    };
    GpuConditions {
        lease_wait_ms: fields
            .get("lease_wait_ms")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0),
        sm_clock_mhz: range("sm_clock_mhz"),
        temperature_c: range("temperature_c"),
        gpu_processes: fields.get("gpu_processes").and_then(|v| v.parse().ok()),
    }
}

/// The verdict of each note, by commit id, for `autokernel_core::audit_rows`.
pub fn kept_verdicts(notes: &BTreeMap<String, ExperimentNote>) -> BTreeMap<String, KeptVerdict> {
    notes
        .iter()
        .map(|(commit, note)| (commit.clone(), note.verdict.clone()))
        .collect()
}

/// Every experiment note of the workspace's repository, by commit id (lower-case hex).
/// Reads without taking the workspace (a run may be writing it): what was committed to
/// [`NOTES_REF`] when the read began. No repository or no notes yet: an empty map.
///
/// # Errors
/// [`StoreError::Git`] when the repository or the notes cannot be read.
pub fn read_notes(workspace: &Path) -> Result<BTreeMap<String, ExperimentNote>, StoreError> {
    let err = |operation: &str, e: Box<dyn std::error::Error + Send + Sync>| StoreError::Git {
        operation: operation.into(),
        repo: workspace.to_path_buf(),
        reference: NOTES_REF.into(),
        source: e,
    };
    if !workspace.join(".git").exists() {
        return Ok(BTreeMap::new());
    }
    let repo = gix::open_opts(workspace, gix::open::Options::isolated())
        .map_err(|e| err("open repository", e.into()))?;
    let Some(mut reference) = repo
        .try_find_reference(NOTES_REF)
        .map_err(|e| err("read notes", e.into()))?
    else {
        return Ok(BTreeMap::new());
    };
    let tree = reference
        .peel_to_commit()
        .and_then(|c| c.tree())
        .map_err(|e| err("read notes", e.into()))?;
    let mut notes = BTreeMap::new();
    for entry in tree.iter() {
        let entry = entry.map_err(|e| err("read notes", e.into()))?;
        let Ok(blob) = repo.find_blob(entry.oid()) else {
            continue;
        };
        let text = String::from_utf8_lossy(&blob.data);
        notes.insert(entry.filename().to_string(), parse_note(&text));
    }
    Ok(notes)
}

/// Sets each row's [`ExperimentRecord::head_to_head`], [`ExperimentRecord::config`] and
/// bench samples from its commit's note, where the row has none yet: rows read from `results.tsv` get
/// back the figures that decided them and the configuration they measured.
pub fn merge_notes(rows: &mut [ExperimentRecord], notes: &BTreeMap<String, ExperimentNote>) {
    for row in rows.iter_mut() {
        let note = row.commit.as_ref().and_then(|c| notes.get(c));
        // the note names its experiment: a commit id reused by another row is no match
        if let Some(note) = note.filter(|n| n.experiment.is_none_or(|e| e == row.experiment)) {
            if row.head_to_head.is_none() {
                row.head_to_head = note.head_to_head.clone();
            }
            if row.config.is_none() {
                row.config = note.config.clone();
            }
            if row.bench_samples_us.is_empty() {
                row.bench_samples_us = note.bench_samples_us.0.clone();
                row.bench_reference_samples_us = note.bench_samples_us.1.clone();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use autokernel_core::{Decision, KernelKind};

    fn record(head_to_head: Option<Comparison>) -> ExperimentRecord {
        ExperimentRecord {
            experiment: 7,
            timestamp: "2026-12-01T21:00:00Z".into(),
            target: "01-softmax".into(),
            kind: KernelKind::Softmax,
            agent: "tune".into(),
            description: "tune: BLOCK=256".into(),
            commit: Some("ab".repeat(20)),
            decision: Decision::Keep,
            correctness: autokernel_core::Verdict::Pass,
            latency_us: Some(54812.57),
            throughput: None,
            throughput_unit: String::new(),
            pct_peak: None,
            speedup_vs_reference: Some(1.2),
            peak_vram_mb: None,
            duration_s: 1.0,
            head_to_head,
            bench_samples_us: vec![54812.57, 54900.0, 54700.25],
            bench_reference_samples_us: vec![65775.0, 65800.5, 65700.0],
            config: None,
        }
    }

    #[test]
    fn a_note_gives_back_the_verdict_it_was_written_with() {
        let note = parse_note(&note_text(&record(None)));
        assert_eq!(
            note.verdict,
            KeptVerdict::new(
                7,
                "01-softmax",
                Decision::Keep,
                autokernel_core::Verdict::Pass
            )
        );
        // a note without those lines (or unreadable ones) keeps none
        let old = parse_note("experiment: 7\ndecision: maybe\nlatency_us: 1\n");
        assert_eq!(old.verdict.experiment, Some(7));
        assert_eq!(
            (old.verdict.decision, old.verdict.correctness),
            (None, None)
        );
        assert_eq!(old.verdict.target, None);
    }

    #[test]
    fn a_note_gives_back_the_head_to_head_that_decided() {
        let c = Comparison {
            incumbent_latency_us: 45065.0,
            candidate_latency_us: 40968.5,
            median_speedup: 1.1,
            repetitions: 5,
            spread: 0.021,
            incumbent_samples_us: vec![45065.0, 45100.5, 44990.0, 45070.0, 45001.0],
            candidate_samples_us: vec![40968.5, 41000.0, 40950.25, 40990.0, 40960.0],
            retries: 1,
            conditions: Some(GpuConditions {
                lease_wait_ms: 12.5,
                sm_clock_mhz: Some((1755, 1980)),
                temperature_c: Some((39, 41)),
                gpu_processes: Some(3),
            }),
        };
        let text = note_text(&record(Some(c.clone())));
        assert!(
            text.contains(
                "head_to_head_candidate_samples_us: 40968.5 41000 40950.25 40990 40960\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("bench_reference_samples_us: 65775 65800.5 65700\n"),
            "{text}"
        );
        let note = parse_note(&text);
        assert_eq!(note.experiment, Some(7));
        assert_eq!(note.head_to_head, Some(c.clone()));
        // merged into a row read from results.tsv (no head-to-head or samples there)
        let written = record(None);
        let mut from_tsv = record(None);
        from_tsv.bench_samples_us.clear();
        from_tsv.bench_reference_samples_us.clear();
        let mut rows = vec![from_tsv];
        let notes = BTreeMap::from([("ab".repeat(20), note)]);
        merge_notes(&mut rows, &notes);
        assert_eq!(rows[0].head_to_head, Some(c));
        assert_eq!(rows[0].bench_samples_us, written.bench_samples_us);
        assert_eq!(
            rows[0].bench_reference_samples_us,
            written.bench_reference_samples_us
        );
    }

    #[test]
    fn a_note_without_a_comparison_or_of_an_older_autokernel_gives_none() {
        assert_eq!(parse_note(&note_text(&record(None))).head_to_head, None);
        let old = "experiment: 3\ntarget: 01-softmax\ndecision: keep\ncorrectness: PASS\nlatency_us: 12.5\n";
        assert_eq!(
            parse_note(old),
            ExperimentNote {
                experiment: Some(3),
                head_to_head: None,
                config: None,
                bench_samples_us: (Vec::new(), Vec::new()),
                verdict: KeptVerdict::new(
                    3,
                    "01-softmax",
                    Decision::Keep,
                    autokernel_core::Verdict::Pass
                ),
            }
        );
        // a note of another experiment on the same commit id is not merged
        let mut rows = vec![record(None)];
        let notes = BTreeMap::from([(
            "ab".repeat(20),
            parse_note("experiment: 8\nhead_to_head_incumbent_us: 1\nhead_to_head_candidate_us: 1\nhead_to_head_median_speedup: 1\n"),
        )]);
        merge_notes(&mut rows, &notes);
        assert_eq!(rows[0].head_to_head, None);
    }

    fn config() -> KernelConfig {
        KernelConfig {
            values: vec![
                ("BLOCK_SIZE".into(), PyValue::Int(1024)),
                (
                    "order".into(),
                    PyValue::List(vec![PyValue::Int(1), PyValue::Int(0)]),
                ),
                ("mode".into(), PyValue::Str("a: b\nc".into())),
                ("eps".into(), PyValue::Float(0.5)),
            ],
            structure: "0f".repeat(32),
        }
    }

    #[test]
    fn a_note_keeps_the_configuration_on_two_lines_and_gives_it_back() {
        let mut r = record(None);
        r.config = Some(config());
        let text = note_text(&r);
        // the string's newline is escaped: the note stays one `key: value` per line
        assert!(
            text.ends_with(&format!(
                "kernel_config: {{\"BLOCK_SIZE\": 1024, \"order\": [1, 0], \"mode\": \"a: b\\nc\", \"eps\": 0.5}}\nkernel_structure_sha256: {}\n",
                "0f".repeat(32)
            )),
            "{text}"
        );
        let note = parse_note(&text);
        assert_eq!(note.config, Some(config()));
        assert_eq!(note.experiment, Some(7));
        // merged into a row read from results.tsv, beside nothing else
        let mut rows = vec![record(None)];
        merge_notes(&mut rows, &BTreeMap::from([("ab".repeat(20), note)]));
        assert_eq!(rows[0].config, Some(config()));
        assert_eq!(rows[0].head_to_head, None);
        // a row that has its configuration keeps it
        let mut other = config();
        other.structure = "11".repeat(32);
        let mut rows = vec![record(None)];
        rows[0].config = Some(other.clone());
        merge_notes(
            &mut rows,
            &BTreeMap::from([("ab".repeat(20), parse_note(&text))]),
        );
        assert_eq!(rows[0].config, Some(other));
    }

    #[test]
    fn a_note_without_a_configuration_or_with_half_of_one_gives_none() {
        let text = note_text(&record(None));
        assert!(!text.contains("kernel_config"), "{text}");
        assert_eq!(parse_note(&text).config, None);
        // the literal without its structure, or one outside the subset: nothing
        assert_eq!(parse_note("kernel_config: {\"B\": 1}\n").config, None);
        let bad = format!(
            "kernel_config: dict(B=1)\nkernel_structure_sha256: {}\n",
            "0f".repeat(32)
        );
        assert_eq!(parse_note(&bad).config, None);
    }
}

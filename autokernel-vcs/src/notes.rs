//! The note kept with each decided experiment under [`NOTES_REF`]: its verdict, key metrics
//! and the head-to-head timing that decided it, as `key: value` lines (units in the keys),
//! readable with `git log --notes=autokernel` and read back by [`read_notes`].
//!
//! The note is where figures that are not `results.tsv` columns live: that file's columns
//! never change, and a note is attached to the commit without amending it.

use std::collections::BTreeMap;
use std::path::Path;

use autokernel_core::{Comparison, ExperimentRecord, StoreError};

/// The ref holding the store's notes: one note per decided experiment, with its verdict and
/// key metrics (`git log --notes=autokernel` shows them).
pub const NOTES_REF: &str = "refs/notes/autokernel";

/// What one experiment's note holds, read back.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExperimentNote {
    /// The experiment number, when the note names one.
    pub experiment: Option<u64>,
    /// The head-to-head timing that decided it, when it was compared.
    pub head_to_head: Option<Comparison>,
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
    if let Some(c) = &record.head_to_head {
        text.push_str(&format!(
            "head_to_head_incumbent_us: {}\nhead_to_head_candidate_us: {}\nhead_to_head_median_speedup: {}\nhead_to_head_spread: {}\nhead_to_head_repetitions: {}\n",
            c.incumbent_latency_us, c.candidate_latency_us, c.median_speedup, c.spread, c.repetitions
        ));
    }
    text
}

/// Reads a note written by [`note_text`]; unknown keys and unreadable values are ignored
/// (a note of an older or newer autokernel still gives what it can).
pub fn parse_note(text: &str) -> ExperimentNote {
    let fields: BTreeMap<&str, &str> = text
        .lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect();
    let f = |k: &str| fields.get(k).and_then(|v| v.parse::<f64>().ok());
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
        }),
        _ => None,
    };
    ExperimentNote {
        experiment: fields.get("experiment").and_then(|v| v.parse().ok()),
        head_to_head,
    }
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

/// Sets each row's [`ExperimentRecord::head_to_head`] from its commit's note, where the
/// row has none yet: rows read from `results.tsv` get back the figures that decided them.
pub fn merge_notes(rows: &mut [ExperimentRecord], notes: &BTreeMap<String, ExperimentNote>) {
    for row in rows.iter_mut().filter(|r| r.head_to_head.is_none()) {
        let note = row.commit.as_ref().and_then(|c| notes.get(c));
        // the note names its experiment: a commit id reused by another row is no match
        if let Some(note) = note.filter(|n| n.experiment.is_none_or(|e| e == row.experiment)) {
            row.head_to_head = note.head_to_head.clone();
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
        }
    }

    #[test]
    fn a_note_gives_back_the_head_to_head_that_decided() {
        let c = Comparison {
            incumbent_latency_us: 45065.0,
            candidate_latency_us: 40968.5,
            median_speedup: 1.1,
            repetitions: 5,
            spread: 0.021,
        };
        let text = note_text(&record(Some(c.clone())));
        let note = parse_note(&text);
        assert_eq!(note.experiment, Some(7));
        assert_eq!(note.head_to_head, Some(c.clone()));
        // merged into a row read from results.tsv (no head-to-head there)
        let mut rows = vec![record(None)];
        let notes = BTreeMap::from([("ab".repeat(20), note)]);
        merge_notes(&mut rows, &notes);
        assert_eq!(rows[0].head_to_head, Some(c));
    }

    #[test]
    fn a_note_without_a_comparison_or_of_an_older_autokernel_gives_none() {
        assert_eq!(parse_note(&note_text(&record(None))).head_to_head, None);
        let old = "experiment: 3\ntarget: 01-softmax\ndecision: keep\ncorrectness: PASS\nlatency_us: 12.5\n";
        assert_eq!(
            parse_note(old),
            ExperimentNote {
                experiment: Some(3),
                head_to_head: None
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
}

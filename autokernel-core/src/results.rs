//! `results.tsv`: one row per experiment, appended and fsynced as each experiment ends,
//! never rewritten. Reopening continues the numbering; a torn last line left by a killed
//! process is cut off (and saved beside the log) without touching earlier rows.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::KernelKind;

/// The header, in order. Readers may rely on it; it never changes within a major version.
pub const RESULTS_HEADER: [&str; 16] = [
    "experiment",
    "timestamp",
    "target",
    "kind",
    "agent",
    "description",
    "commit",
    "decision",
    "correctness",
    "latency_us",
    "throughput",
    "throughput_unit",
    "pct_peak",
    "speedup_vs_reference",
    "peak_vram_mb",
    "duration_s",
];

/// What happened to an experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// The first, reference point of a target (its starter kernel).
    Baseline,
    /// Correct and faster beyond the threshold: the branch advanced.
    Keep,
    /// Incorrect, not faster, crashed or abandoned: the branch went back.
    Revert,
    /// The agent produced nothing runnable: no commit, no bench.
    Invalid,
}

impl Decision {
    /// The word in `results.tsv`.
    pub fn label(self) -> &'static str {
        match self {
            Decision::Baseline => "baseline",
            Decision::Keep => "keep",
            Decision::Revert => "revert",
            Decision::Invalid => "invalid",
        }
    }
}

impl std::str::FromStr for Decision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "baseline" => Ok(Decision::Baseline),
            "keep" => Ok(Decision::Keep),
            "revert" => Ok(Decision::Revert),
            "invalid" => Ok(Decision::Invalid),
            other => Err(format!("unknown decision `{other}`")),
        }
    }
}

/// What the version store kept with an experiment's commit (its note), to check the row
/// that names the commit against: a field is `None` where the store kept none (a workspace
/// written before it was kept).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct KeptVerdict {
    /// The experiment's number.
    pub experiment: Option<u64>,
    /// The target it changed.
    pub target: Option<String>,
    /// Its decision.
    pub decision: Option<Decision>,
    /// Its verdict.
    pub correctness: Option<crate::Verdict>,
}

impl KeptVerdict {
    /// A kept verdict with every field given.
    pub fn new(
        experiment: u64,
        target: &str,
        decision: Decision,
        correctness: crate::Verdict,
    ) -> Self {
        KeptVerdict {
            experiment: Some(experiment),
            target: Some(target.to_string()),
            decision: Some(decision),
            correctness: Some(correctness),
        }
    }
}

/// A row of `results.tsv` that is not counted, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct SetAside {
    /// The row as the file has it.
    pub row: ExperimentRecord,
    /// Why it is set aside, in words.
    pub why: String,
}

impl std::fmt::Display for SetAside {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = &self.row;
        write!(
            f,
            "results.tsv row of experiment {} ({}, {} {}{}) set aside, not counted: {}",
            r.experiment,
            r.target,
            r.decision.label(),
            r.correctness,
            r.commit
                .as_deref()
                .map(|c| format!(", commit {}", &c[..c.len().min(12)]))
                .unwrap_or_default(),
            self.why
        )
    }
}

/// The rows of `rows` (indices, with why) that the log must not count: a row naming a
/// commit whose kept verdict (`kept`, by commit id) disagrees with it (experiment number,
/// target, decision or verdict), or that has none when the store keeps verdicts
/// (`keeps_verdicts`); and a row that repeats the experiment number of an earlier counted
/// row. Rows with no commit (`invalid`) are checked for repeats only, and a kept verdict
/// without a field (a workspace written before it was kept) checks nothing for that field.
pub fn audit_rows(
    rows: &[ExperimentRecord],
    kept: &std::collections::BTreeMap<String, KeptVerdict>,
    keeps_verdicts: bool,
) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (i, row) in rows.iter().enumerate() {
        let disagreement = row.commit.as_ref().and_then(|commit| {
            let Some(k) = kept.get(commit) else {
                return keeps_verdicts.then(|| "its commit has no recorded verdict".to_string());
            };
            let mut wrong = Vec::new();
            if k.experiment.is_some_and(|e| e != row.experiment) {
                wrong.push(format!("experiment {}", k.experiment.unwrap_or_default()));
            }
            if k.target.as_ref().is_some_and(|t| *t != row.target) {
                wrong.push(format!(
                    "target {}",
                    k.target.as_deref().unwrap_or_default()
                ));
            }
            if k.decision.is_some_and(|d| d != row.decision) {
                wrong.push(format!("decision {}", k.decision.map_or("", |d| d.label())));
            }
            if k.correctness.is_some_and(|c| c != row.correctness) {
                wrong.push(format!(
                    "verdict {}",
                    k.correctness.map_or("", |c| c.label())
                ));
            }
            (!wrong.is_empty()).then(|| {
                format!(
                    "the verdict recorded with its commit says {}",
                    wrong.join(", ")
                )
            })
        });
        if let Some(why) = disagreement {
            out.push((i, why));
        } else if !seen.insert(row.experiment) {
            out.push((
                i,
                format!("it repeats experiment number {}", row.experiment),
            ));
        }
    }
    out
}

/// One row of `results.tsv`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExperimentRecord {
    /// Experiment number, 1-based, increasing across targets and resumed runs.
    pub experiment: u64,
    /// When it ended, RFC 3339 UTC.
    pub timestamp: String,
    /// Target id.
    pub target: String,
    /// Kernel kind.
    pub kind: KernelKind,
    /// Agent name.
    pub agent: String,
    /// The agent's one-line description (for `invalid`, starts with the reason).
    pub description: String,
    /// Commit id of the benchmarked `kernel.py`; empty for `invalid`.
    pub commit: Option<String>,
    /// The decision.
    pub decision: Decision,
    /// The judge's verdict (`PASS`, `FAIL`, `TIMEOUT`, `CRASH`, `TAMPER`), `NOT_RUN` or
    /// `INTERRUPTED` in the file.
    pub correctness: crate::Verdict,
    /// Median latency, in microseconds.
    pub latency_us: Option<f64>,
    /// Throughput in `throughput_unit`.
    pub throughput: Option<f64>,
    /// `GB/s` or `TFLOP/s`.
    pub throughput_unit: String,
    /// Percentage of the GPU's ceiling.
    pub pct_peak: Option<f64>,
    /// Speedup over the PyTorch reference.
    pub speedup_vs_reference: Option<f64>,
    /// Peak device memory, in MB.
    pub peak_vram_mb: Option<f64>,
    /// Wall time of the whole experiment (propose + commit + bench + decide), in seconds.
    pub duration_s: f64,
    /// The head-to-head timing that decided a benchmarked candidate (incumbent and
    /// candidate in one worker, interleaved): the figures a keep or revert line shows.
    /// Not a `results.tsv` column (its columns never change): the version store keeps it
    /// in the experiment's note, and readers merge it back by commit. `None` for rows
    /// without a comparison (baselines, failures) and for rows read from the TSV alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_to_head: Option<crate::Comparison>,
    /// The bench's interleaved timing of the candidate against PyTorch: the candidate's
    /// latency in each repetition, in microseconds (`latency_us` is their median;
    /// [`crate::Metrics::samples_us`]). Not a column: kept in the experiment's note and
    /// merged back by commit, like `head_to_head`. Empty for rows without a timing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bench_samples_us: Vec<f64>,
    /// The PyTorch reference's latencies of the same repetitions, paired by index
    /// ([`crate::Metrics::reference_samples_us`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bench_reference_samples_us: Vec<f64>,
    /// The `CONFIG` the benchmarked `kernel.py` declared, with the digest of the rest of
    /// the file ([`crate::pyliteral::KernelConfig`]): what a tuner reads to know which
    /// configurations of a kernel were measured. Not a `results.tsv` column either: kept in
    /// the experiment's note, merged back by commit like `head_to_head`. `None` for rows
    /// never benchmarked, kernels without a `CONFIG` literal it can read, and rows read from
    /// the TSV alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<crate::pyliteral::KernelConfig>,
}

/// Errors reading or writing `results.tsv`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResultsError {
    /// An I/O failure on the log.
    #[error("cannot access results log `{path}`")]
    Io {
        /// The log's path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file exists but is not an autokernel results log.
    #[error("`{path}` is not an autokernel results.tsv: {reason}")]
    Format {
        /// The log's path.
        path: PathBuf,
        /// What differs.
        reason: String,
    },
}

/// The append-only `results.tsv` of a workspace.
#[derive(Debug)]
pub struct ResultsLog {
    path: PathBuf,
    file: File,
    rows: Vec<ExperimentRecord>,
    repaired_torn_line: bool,
    /// Rows taken out of [`ResultsLog::rows`] by [`ResultsLog::set_aside`], with why.
    set_aside: Vec<SetAside>,
}

fn fmt_opt(v: Option<f64>, decimals: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.decimals$}"),
        _ => String::new(),
    }
}

fn parse_opt(s: &str) -> Option<f64> {
    if s.is_empty() {
        None
    } else {
        s.parse().ok()
    }
}

/// `text` with every control character (tab, newline, NUL, ESC, …) as a space: a tab or a
/// newline would break a results.tsv row, a NUL makes tools call the file binary, and an
/// ESC from an LLM server's reply could drive the terminal that prints it.
pub(crate) fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

impl ExperimentRecord {
    fn to_fields(&self) -> Vec<String> {
        vec![
            self.experiment.to_string(),
            self.timestamp.clone(),
            self.target.clone(),
            self.kind.to_string(),
            self.agent.clone(),
            one_line(&self.description),
            self.commit.clone().unwrap_or_default(),
            self.decision.label().to_string(),
            self.correctness.label().to_string(),
            fmt_opt(self.latency_us, 3),
            fmt_opt(self.throughput, 3),
            self.throughput_unit.clone(),
            fmt_opt(self.pct_peak, 2),
            fmt_opt(self.speedup_vs_reference, 4),
            fmt_opt(self.peak_vram_mb, 1),
            format!("{:.2}", self.duration_s),
        ]
    }

    fn from_fields(r: &csv::StringRecord) -> Result<Self, String> {
        if r.len() != RESULTS_HEADER.len() {
            return Err(format!(
                "{} fields, expected {}",
                r.len(),
                RESULTS_HEADER.len()
            ));
        }
        let f = |i: usize| r.get(i).unwrap_or("").to_string();
        Ok(ExperimentRecord {
            experiment: f(0)
                .parse()
                .map_err(|_| format!("bad experiment `{}`", f(0)))?,
            timestamp: f(1),
            target: f(2),
            kind: f(3).parse().map_err(|e| format!("{e}"))?,
            agent: f(4),
            description: f(5),
            commit: Some(f(6)).filter(|c| !c.is_empty()),
            decision: f(7).parse()?,
            correctness: f(8).parse()?,
            latency_us: parse_opt(&f(9)),
            throughput: parse_opt(&f(10)),
            throughput_unit: f(11),
            pct_peak: parse_opt(&f(12)),
            speedup_vs_reference: parse_opt(&f(13)),
            peak_vram_mb: parse_opt(&f(14)),
            duration_s: parse_opt(&f(15)).unwrap_or(0.0),
            head_to_head: None,
            bench_samples_us: Vec::new(),
            bench_reference_samples_us: Vec::new(),
            config: None,
        })
    }
}

impl ResultsLog {
    /// Opens `path`, creating it with the header when absent. An existing log is read back:
    /// its rows are available through [`ResultsLog::rows`] and numbering continues after
    /// the largest. A torn last line (no final newline: the writer was killed mid-row) is
    /// cut off and saved to `<path>.torn` so nothing is silently lost.
    ///
    /// # Errors
    /// [`ResultsError::Format`] when the header differs or a complete row is malformed;
    /// [`ResultsError::Io`] on I/O failure.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ResultsError> {
        let path = path.as_ref().to_path_buf();
        let io = |source| ResultsError::Io {
            path: path.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(io)?;
        let mut text = Vec::new();
        file.read_to_end(&mut text).map_err(io)?;
        let mut repaired = false;
        if text.is_empty() {
            let mut header = RESULTS_HEADER.join("\t");
            header.push('\n');
            file.write_all(header.as_bytes()).map_err(io)?;
            file.sync_all().map_err(io)?;
            return Ok(ResultsLog {
                path,
                file,
                rows: Vec::new(),
                repaired_torn_line: false,
                set_aside: Vec::new(),
            });
        }
        if !text.ends_with(b"\n") {
            let keep = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            let torn = text.split_off(keep);
            std::fs::write(path.with_extension("tsv.torn"), &torn).map_err(io)?;
            // `set_len` works on an append-mode handle; later appends land at the new end.
            file.set_len(keep as u64).map_err(io)?;
            file.seek(SeekFrom::End(0)).map_err(io)?;
            file.sync_all().map_err(io)?;
            tracing::warn!(
                path = %path.display(),
                bytes = torn.len(),
                "results.tsv ended in a torn row (killed mid-write); cut it off and saved it to results.tsv.torn"
            );
            repaired = true;
            if text.is_empty() {
                // the header itself was torn: write it again
                let mut header = RESULTS_HEADER.join("\t");
                header.push('\n');
                file.write_all(header.as_bytes()).map_err(io)?;
                file.sync_all().map_err(io)?;
                return Ok(ResultsLog {
                    path,
                    file,
                    rows: Vec::new(),
                    repaired_torn_line: true,
                    set_aside: Vec::new(),
                });
            }
        }
        let rows = Self::parse(&path, &text)?;
        Ok(ResultsLog {
            path,
            file,
            rows,
            repaired_torn_line: repaired,
            set_aside: Vec::new(),
        })
    }

    /// Reads the rows of the log at `path` without opening it for writing, so that a log
    /// one may only read (a read-only workspace) or one a run is appending to can be
    /// reported on. A torn last line (no final newline: a writer killed mid-row, or one
    /// still writing) is left out, not repaired: [`ResultsLog::open`] repairs it. An empty
    /// file has no rows.
    ///
    /// # Errors
    /// [`ResultsError::Format`] when the header differs or a complete row is malformed;
    /// [`ResultsError::Io`] when the file cannot be read.
    pub fn read(path: impl AsRef<Path>) -> Result<Vec<ExperimentRecord>, ResultsError> {
        let path = path.as_ref();
        let mut text = std::fs::read(path).map_err(|source| ResultsError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let complete = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        text.truncate(complete);
        if text.is_empty() {
            return Ok(Vec::new());
        }
        Self::parse(path, &text)
    }

    fn parse(path: &Path, text: &[u8]) -> Result<Vec<ExperimentRecord>, ResultsError> {
        let fmt = |reason: String| ResultsError::Format {
            path: path.to_path_buf(),
            reason,
        };
        let mut reader = csv::ReaderBuilder::new()
            .delimiter(b'\t')
            .quoting(false)
            .has_headers(true)
            .flexible(true)
            .from_reader(text);
        let header = reader
            .headers()
            .map_err(|e| fmt(format!("unreadable header: {e}")))?
            .clone();
        if header.iter().collect::<Vec<_>>() != RESULTS_HEADER {
            return Err(fmt(format!(
                "header is `{}`",
                header.iter().collect::<Vec<_>>().join(" ")
            )));
        }
        // errors name the line of the file (the header is line 1, and a blank line, which
        // the reader skips, still counts), as an editor shows it
        let mut rows = Vec::new();
        for rec in reader.records() {
            let rec = rec.map_err(|e| match e.position() {
                Some(p) => fmt(format!("line {}: {e}", p.line())),
                None => fmt(e.to_string()),
            })?;
            let line = rec.position().map_or(0, csv::Position::line);
            rows.push(
                ExperimentRecord::from_fields(&rec)
                    .map_err(|e| fmt(format!("line {line}: {e}")))?,
            );
        }
        Ok(rows)
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every row, in file order.
    pub fn rows(&self) -> &[ExperimentRecord] {
        &self.rows
    }

    /// Every row, for filling in what the TSV has no column for (from the version store's
    /// notes on resume); the file is never rewritten, so only those fields may change.
    pub(crate) fn rows_mut(&mut self) -> &mut [ExperimentRecord] {
        &mut self.rows
    }

    /// Whether [`ResultsLog::open`] cut off a torn last line.
    pub fn repaired_torn_line(&self) -> bool {
        self.repaired_torn_line
    }

    /// The number the next experiment gets: one more than the largest so far, rows set
    /// aside included (a number a forged row took is not given to a real experiment, whose
    /// row would then repeat it).
    pub fn next_experiment(&self) -> u64 {
        self.rows
            .iter()
            .chain(self.set_aside.iter().map(|s| &s.row))
            .map(|r| r.experiment)
            .max()
            .unwrap_or(0)
            + 1
    }

    /// Takes the rows of `audit` (indices into [`ResultsLog::rows`], from [`audit_rows`])
    /// out of [`ResultsLog::rows`], in memory only: the file keeps them, and they count for
    /// nothing (resume summary, plateau, a tuner's history). Returns them.
    pub fn set_aside(&mut self, audit: Vec<(usize, String)>) -> &[SetAside] {
        let first = self.set_aside.len();
        let mut reasons: std::collections::BTreeMap<usize, String> = audit.into_iter().collect();
        let rows = std::mem::take(&mut self.rows);
        for (i, row) in rows.into_iter().enumerate() {
            match reasons.remove(&i) {
                Some(why) => self.set_aside.push(SetAside { row, why }),
                None => self.rows.push(row),
            }
        }
        &self.set_aside[first..]
    }

    /// Every row set aside so far.
    pub fn rows_set_aside(&self) -> &[SetAside] {
        &self.set_aside
    }

    /// Appends `record` as one line and fsyncs it before returning.
    ///
    /// # Errors
    /// [`ResultsError::Io`] when the write or sync fails; the row is then not in
    /// [`ResultsLog::rows`].
    pub fn append(&mut self, record: ExperimentRecord) -> Result<(), ResultsError> {
        let mut writer = csv::WriterBuilder::new()
            .delimiter(b'\t')
            .quote_style(csv::QuoteStyle::Never)
            .from_writer(Vec::new());
        let io = |source| ResultsError::Io {
            path: self.path.clone(),
            source,
        };
        writer
            .write_record(record.to_fields())
            .map_err(|e| io(std::io::Error::other(e)))?;
        let line = writer
            .into_inner()
            .map_err(|e| io(std::io::Error::other(e.to_string())))?;
        // one write_all of a whole line: a kill leaves at most one torn line, which open() repairs
        self.file.write_all(&line).map_err(io)?;
        self.file.sync_data().map_err(io)?;
        self.rows.push(record);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn row(n: u64, decision: Decision) -> ExperimentRecord {
        ExperimentRecord {
            experiment: n,
            timestamp: "2026-11-29T22:00:00Z".into(),
            target: "01-softmax".into(),
            kind: KernelKind::Softmax,
            agent: "tune".into(),
            description: format!("try {n}\twith a tab\u{0}, a NUL and \u{1b}[31man ESC"),
            commit: Some(format!("{n:040}")),
            decision,
            correctness: crate::Verdict::Pass,
            latency_us: Some(12.3456),
            throughput: Some(3000.0),
            throughput_unit: "GB/s".into(),
            pct_peak: Some(70.5),
            speedup_vs_reference: Some(1.5),
            peak_vram_mb: Some(64.0),
            duration_s: 3.2,
            head_to_head: None,
            bench_samples_us: Vec::new(),
            bench_reference_samples_us: Vec::new(),
            config: None,
        }
    }

    /// Rows 1 (baseline), 2 (keep), a forged 3 claiming keep over a reverted FAIL, 3 as
    /// logged, a repeat of 2 agreeing with its note, an `invalid` row without commit, and
    /// a row of a commit with no note.
    #[test]
    fn audit_sets_aside_rows_that_disagree_with_their_verdict_or_repeat_a_number() {
        use crate::Verdict::{Fail, Pass};
        let kept: std::collections::BTreeMap<String, KeptVerdict> = [
            (1, Decision::Baseline, Pass),
            (2, Decision::Keep, Pass),
            (3, Decision::Revert, Fail),
        ]
        .into_iter()
        .map(|(n, d, c)| (format!("{n:040}"), KeptVerdict::new(n, "01-softmax", d, c)))
        .collect();
        let mut real3 = row(3, Decision::Revert);
        real3.correctness = Fail;
        let mut invalid = row(4, Decision::Invalid);
        invalid.commit = None;
        let mut unknown = row(5, Decision::Keep);
        unknown.commit = Some("f".repeat(40));
        let rows = vec![
            row(1, Decision::Baseline),
            row(2, Decision::Keep),
            row(3, Decision::Keep),
            real3,
            row(2, Decision::Keep),
            invalid,
            unknown,
        ];
        let got = audit_rows(&rows, &kept, true);
        let indices: Vec<usize> = got.iter().map(|(i, _)| *i).collect();
        assert_eq!(indices, [2, 4, 6], "{got:?}");
        assert_eq!(
            got[0].1,
            "the verdict recorded with its commit says decision revert, verdict FAIL"
        );
        assert_eq!(got[1].1, "it repeats experiment number 2");
        assert_eq!(got[2].1, "its commit has no recorded verdict");
        // a store keeping no verdicts (a workspace made before them): repeats only
        let none = std::collections::BTreeMap::new();
        let got = audit_rows(&rows, &none, false);
        assert_eq!(got.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [3, 4]);
        // a note without a verdict field checks nothing for that field
        let mut partial = kept.clone();
        partial.get_mut(&format!("{:040}", 3)).unwrap().decision = None;
        partial.get_mut(&format!("{:040}", 3)).unwrap().correctness = None;
        let got = audit_rows(&rows[..4], &partial, true);
        assert_eq!(got, [(3, "it repeats experiment number 3".to_string())]);
    }

    #[test]
    fn set_aside_rows_leave_the_rows_but_keep_their_numbers_taken() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = ResultsLog::open(dir.path().join("results.tsv")).unwrap();
        log.append(row(1, Decision::Baseline)).unwrap();
        log.append(row(7, Decision::Keep)).unwrap();
        log.append(row(2, Decision::Keep)).unwrap();
        let aside = log.set_aside(vec![(1, "forged".into())]);
        assert_eq!(aside.len(), 1);
        assert_eq!(aside[0].row.experiment, 7);
        assert_eq!(
            log.rows().iter().map(|r| r.experiment).collect::<Vec<_>>(),
            [1, 2]
        );
        assert_eq!(log.next_experiment(), 8);
        assert_eq!(log.rows_set_aside().len(), 1);
    }

    #[test]
    fn a_new_log_has_exactly_the_header() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("results.tsv");
        ResultsLog::open(&p).unwrap();
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "experiment\ttimestamp\ttarget\tkind\tagent\tdescription\tcommit\tdecision\tcorrectness\tlatency_us\tthroughput\tthroughput_unit\tpct_peak\tspeedup_vs_reference\tpeak_vram_mb\tduration_s\n"
        );
    }

    #[test]
    fn reopening_continues_the_numbering_and_reads_rows_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("results.tsv");
        let mut log = ResultsLog::open(&p).unwrap();
        log.append(row(1, Decision::Baseline)).unwrap();
        log.append(row(2, Decision::Keep)).unwrap();
        drop(log);
        let log = ResultsLog::open(&p).unwrap();
        assert_eq!(log.next_experiment(), 3);
        assert_eq!(log.rows().len(), 2);
        assert_eq!(log.rows()[1].decision, Decision::Keep);
        assert_eq!(log.rows()[1].latency_us, Some(12.346));
        // the control characters in the description were replaced, so the row still has
        // 16 fields and nothing a terminal would act on
        assert_eq!(
            log.rows()[0].description,
            "try 1 with a tab , a NUL and  [31man ESC"
        );
    }

    #[test]
    fn a_torn_last_row_is_cut_off_and_saved_and_earlier_rows_survive() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("results.tsv");
        let mut log = ResultsLog::open(&p).unwrap();
        log.append(row(1, Decision::Baseline)).unwrap();
        log.append(row(2, Decision::Revert)).unwrap();
        drop(log);
        // simulate a kill in the middle of writing row 3
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"3\t2026-11-29T22:01:00Z\t01-soft").unwrap();
        drop(f);
        let mut log = ResultsLog::open(&p).unwrap();
        assert!(log.repaired_torn_line());
        assert_eq!(log.rows().len(), 2);
        assert_eq!(log.next_experiment(), 3);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("results.tsv.torn")).unwrap(),
            "3\t2026-11-29T22:01:00Z\t01-soft"
        );
        log.append(row(3, Decision::Keep)).unwrap();
        drop(log);
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text.lines().count(), 4, "{text}");
        assert!(text.lines().all(|l| l.split('\t').count() == 16));
    }

    /// The header is line 1, so the 12th row is line 13 (an editor's number, not the row's).
    #[test]
    fn a_malformed_row_is_named_by_its_line_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("results.tsv");
        let mut log = ResultsLog::open(&p).unwrap();
        for n in 1..=12 {
            log.append(row(n, Decision::Revert)).unwrap();
        }
        drop(log);
        let text = std::fs::read_to_string(&p).unwrap();
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        lines[12] = lines[12].replace("\trevert\t", "\tmaybe\t");
        std::fs::write(&p, lines.join("\n") + "\n").unwrap();
        for err in [
            ResultsLog::open(&p).unwrap_err(),
            ResultsLog::read(&p).unwrap_err(),
        ] {
            assert!(err.to_string().contains(": line 13: "), "{err}");
        }
        // a blank line (skipped by the reader) still counts
        lines.insert(3, String::new());
        std::fs::write(&p, lines.join("\n") + "\n").unwrap();
        let err = ResultsLog::read(&p).unwrap_err();
        assert!(err.to_string().contains(": line 14: "), "{err}");
    }

    /// `read` takes a log it may not write (a read-only workspace, or one a run is
    /// appending to): it opens nothing for writing, and leaves a torn line alone.
    #[cfg(unix)]
    #[test]
    fn reading_needs_no_write_access_and_changes_nothing() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("results.tsv");
        let mut log = ResultsLog::open(&p).unwrap();
        log.append(row(1, Decision::Baseline)).unwrap();
        drop(log);
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"2\t2026-11-29T22:01:00Z\t01-soft").unwrap();
        drop(f);
        let before = std::fs::read(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o444)).unwrap();
        let rows = ResultsLog::read(&p).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(std::fs::read(&p).unwrap(), before);
        assert!(!dir.path().join("results.tsv.torn").exists());
        let empty = dir.path().join("empty.tsv");
        std::fs::write(&empty, "").unwrap();
        assert!(ResultsLog::read(&empty).unwrap().is_empty());
    }

    /// Every verdict word reads back as the verdict written (the TSV keeps its words), and
    /// an unknown word is an error naming its line, never a silent default.
    #[test]
    fn every_verdict_word_round_trips_and_an_unknown_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("results.tsv");
        let mut log = ResultsLog::open(&p).unwrap();
        for (i, v) in crate::Verdict::ALL.into_iter().enumerate() {
            let mut r = row(i as u64 + 1, Decision::Revert);
            r.correctness = v;
            log.append(r).unwrap();
        }
        drop(log);
        let text = std::fs::read_to_string(&p).unwrap();
        let words: Vec<&str> = text
            .lines()
            .skip(1)
            .map(|l| l.split('\t').nth(8).unwrap())
            .collect();
        assert_eq!(
            words,
            [
                "PASS",
                "FAIL",
                "TIMEOUT",
                "CRASH",
                "TAMPER",
                "NOT_RUN",
                "INTERRUPTED"
            ]
        );
        let back: Vec<crate::Verdict> = ResultsLog::read(&p)
            .unwrap()
            .iter()
            .map(|r| r.correctness)
            .collect();
        assert_eq!(back, crate::Verdict::ALL);
        let text = std::fs::read_to_string(&p)
            .unwrap()
            .replace("\tTAMPER\t", "\tMAYBE\t");
        std::fs::write(&p, text).unwrap();
        let err = ResultsLog::read(&p).unwrap_err().to_string();
        assert!(err.contains("line 6: unknown correctness `MAYBE`"), "{err}");
    }

    #[test]
    fn a_foreign_file_is_refused_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("results.tsv");
        std::fs::write(&p, "name\tvalue\nx\t1\n").unwrap();
        let err = ResultsLog::open(&p).unwrap_err();
        assert!(
            err.to_string().contains("not an autokernel results.tsv"),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "name\tvalue\nx\t1\n");
    }
}

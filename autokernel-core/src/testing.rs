//! In-memory doubles of the four traits for tests of loops built on this crate (feature
//! `testing`). They are deliberately simple and deterministic; the default implementations
//! in the sibling crates are tested against the real things.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use crate::{
    Agent, AgentError, BenchError, BenchRequest, BenchResult, Benchmarker, CommitId,
    CompareRequest, Comparison, Correctness, DType, Decision, ExperimentDraft, ExperimentRecord,
    KernelKind, Layout, Metrics, Proposal, ProposalContext, Reconciliation, Shape, StoreError,
    Target, UnloggedExperiment, VersionStore,
};

/// An agent that returns proposals from a script, then [`Proposal::Exhausted`].
#[derive(Debug, Default)]
pub struct ScriptedAgent {
    /// Proposals still to give, front first.
    pub script: VecDeque<Proposal>,
    /// Experiment numbers it was asked for, in order.
    pub asked: Vec<u64>,
}

impl ScriptedAgent {
    /// An agent proposing each `(description, source)` in turn.
    pub fn candidates(items: &[(&str, &str)]) -> Self {
        ScriptedAgent {
            script: items
                .iter()
                .map(|(d, s)| Proposal::Candidate {
                    description: d.to_string(),
                    source: s.to_string(),
                    usage: None,
                })
                .collect(),
            asked: Vec::new(),
        }
    }
}

#[async_trait]
impl Agent for ScriptedAgent {
    fn name(&self) -> String {
        "scripted".into()
    }
    async fn propose(&mut self, context: &ProposalContext<'_>) -> Result<Proposal, AgentError> {
        self.asked.push(context.experiment);
        Ok(self.script.pop_front().unwrap_or(Proposal::Exhausted))
    }
}

/// How [`FakeBenchmarker`] judges a source: its verdict and its latency in µs.
pub type Judge = dyn Fn(&str) -> (Correctness, f64) + Send + Sync;

/// A benchmarker that reads the kernel file and asks a closure for the verdict and latency.
/// `compare` returns the ratio of the two latencies the closure gives.
pub struct FakeBenchmarker {
    judge: Box<Judge>,
    /// Sources it was asked to bench, in order.
    pub benched: Mutex<Vec<String>>,
    /// The input layout of every bench and compare request, in order.
    pub layouts: Mutex<Vec<Layout>>,
}

impl FakeBenchmarker {
    /// A benchmarker judging with `judge`.
    pub fn new(judge: impl Fn(&str) -> (Correctness, f64) + Send + Sync + 'static) -> Self {
        FakeBenchmarker {
            judge: Box::new(judge),
            benched: Mutex::new(Vec::new()),
            layouts: Mutex::new(Vec::new()),
        }
    }

    /// Judges by a `# latency_us = X` line and a `# verdict = FAIL|CRASH|TIMEOUT` line in the source.
    pub fn from_comments() -> Self {
        FakeBenchmarker::new(|src| {
            let value = |key: &str| {
                src.lines().find_map(|l| {
                    l.strip_prefix(&format!("# {key} = "))
                        .map(|v| v.trim().to_string())
                })
            };
            let latency = value("latency_us")
                .and_then(|v| v.parse().ok())
                .unwrap_or(100.0);
            let verdict = match value("verdict").as_deref() {
                Some("FAIL") => Correctness::Fail {
                    stage: crate::Stage::Stability,
                    reason: "nan in output".into(),
                },
                Some("CRASH") => Correctness::Crash {
                    reason: "segfault".into(),
                },
                Some("TIMEOUT") => Correctness::Timeout {
                    reason: "no reply in 300 s".into(),
                },
                _ => Correctness::Pass,
            };
            (verdict, latency)
        })
    }
}

/// The kind of a `KERNEL_KIND = "name"` line of `src`, when it names a [`KernelKind`].
fn literal_kind(src: &str) -> Option<KernelKind> {
    src.lines().find_map(|l| {
        let rest = l.trim().strip_prefix("KERNEL_KIND")?.trim_start();
        rest.strip_prefix('=')?
            .trim()
            .trim_matches(|c| c == '"' || c == '\'')
            .parse()
            .ok()
    })
}

fn read(path: &Path) -> Result<String, BenchError> {
    std::fs::read_to_string(path).map_err(|source| BenchError::KernelFile {
        path: path.to_path_buf(),
        source,
    })
}

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[async_trait]
impl Benchmarker for FakeBenchmarker {
    async fn bench(&self, request: &BenchRequest) -> Result<BenchResult, BenchError> {
        let src = read(&request.kernel_path)?;
        self.benched.lock().expect("not poisoned").push(src.clone());
        self.layouts
            .lock()
            .expect("not poisoned")
            .push(request.layout);
        let (correctness, latency_us) = (self.judge)(&src);
        // as the worker does: the request's kind, else the file's literal KERNEL_KIND
        let kind = request.kind.or_else(|| literal_kind(&src));
        let shape = Shape(vec![1024, 1024]);
        let metrics = correctness.is_pass().then(|| Metrics {
            throughput: kind.map_or(0.0, |k| k.throughput(&shape, DType::Float16, latency_us)),
            shape,
            dtype: DType::Float16,
            latency_us,
            reference_latency_us: 100.0,
            compiled_latency_us: None,
            speedup_vs_reference: 100.0 / latency_us,
            samples_us: Vec::new(),
            reference_samples_us: Vec::new(),
            throughput_unit: kind.map_or("", |k| k.bound().throughput_unit()).into(),
            pct_peak: None,
            peak_vram_mb: 1.0,
            config_keys_read: None,
            conditions: None,
        });
        Ok(BenchResult {
            kind,
            correctness,
            stages: vec![],
            metrics,
            device: "fake".into(),
            timing_representative: false,
            source_sha256: sha256_hex(&src),
        })
    }

    async fn compare(&self, request: &CompareRequest) -> Result<Comparison, BenchError> {
        self.layouts
            .lock()
            .expect("not poisoned")
            .push(request.layout);
        let (_, a) = (self.judge)(&read(&request.incumbent)?);
        let (_, b) = (self.judge)(&read(&request.candidate)?);
        Ok(Comparison {
            incumbent_latency_us: a,
            candidate_latency_us: b,
            median_speedup: a / b,
            repetitions: request.repetitions,
            spread: 0.0,
            ..Default::default()
        })
    }
}

#[derive(Debug, Clone)]
struct MemCommit {
    id: CommitId,
    experiment: u64,
    target: String,
    description: String,
    agent: String,
    source: String,
}

/// A version store in memory that writes `targets/<id>/kernel.py` under a folder, so a
/// benchmarker can read it.
#[derive(Debug)]
pub struct MemoryStore {
    root: PathBuf,
    commits: Vec<MemCommit>,
    /// Commit ids on the branch (kept and baseline), per target, in order.
    pub kept: HashMap<String, Vec<CommitId>>,
    /// Reverted experiment numbers.
    pub reverted: Vec<u64>,
    /// The record given at each keep or revert, by commit id: the store's notes.
    notes: HashMap<String, ExperimentRecord>,
}

impl MemoryStore {
    /// A store whose work tree is `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        MemoryStore {
            root: root.into(),
            commits: Vec::new(),
            kept: HashMap::new(),
            reverted: Vec::new(),
            notes: HashMap::new(),
        }
    }

    /// Forgets every note, as a store written before notes kept a configuration: what
    /// [`VersionStore::recall`] gives back is then only what the commits still say.
    pub fn forget_notes(&mut self) {
        self.notes.clear();
    }

    fn note(&mut self, record: &ExperimentRecord) {
        if let Some(c) = &record.commit {
            self.notes.insert(c.clone(), record.clone());
        }
    }

    fn find(&self, id: &str) -> Option<&MemCommit> {
        self.commits.iter().find(|c| c.id.0 == id)
    }

    fn write(&self, target: &str, source: &str) -> Result<(), StoreError> {
        let path = self.root.join("targets").join(target).join("kernel.py");
        std::fs::create_dir_all(path.parent().expect("has a parent"))
            .and_then(|_| std::fs::write(&path, source))
            .map_err(|source| StoreError::Io { path, source })
    }
}

#[async_trait]
impl VersionStore for MemoryStore {
    fn kernel_path(&self, target: &Target) -> PathBuf {
        self.root.join(target.kernel_relpath())
    }

    async fn commit(&mut self, draft: &ExperimentDraft<'_>) -> Result<CommitId, StoreError> {
        self.write(&draft.target.id, draft.source)?;
        let id = CommitId(format!("{:040x}", self.commits.len() + 1));
        self.commits.push(MemCommit {
            id: id.clone(),
            experiment: draft.experiment,
            target: draft.target.id.clone(),
            description: draft.description.to_string(),
            agent: draft.agent.to_string(),
            source: draft.source.to_string(),
        });
        Ok(id)
    }

    async fn keep(&mut self, record: &ExperimentRecord) -> Result<(), StoreError> {
        let id = CommitId(record.commit.clone().unwrap_or_default());
        self.kept.entry(record.target.clone()).or_default().push(id);
        self.note(record);
        Ok(())
    }

    async fn revert(&mut self, record: &ExperimentRecord) -> Result<(), StoreError> {
        self.reverted.push(record.experiment);
        self.note(record);
        let best = self
            .kept
            .get(&record.target)
            .and_then(|v| v.last())
            .and_then(|id| self.find(&id.0))
            .map(|c| c.source.clone());
        if let Some(src) = best {
            self.write(&record.target, &src)?;
        }
        Ok(())
    }

    async fn best(&self, target: &Target) -> Result<Option<(CommitId, String)>, StoreError> {
        Ok(self
            .kept
            .get(&target.id)
            .and_then(|v| v.last())
            .and_then(|id| self.find(&id.0))
            .map(|c| (c.id.clone(), c.source.clone())))
    }

    async fn reconcile(
        &mut self,
        logged: &[ExperimentRecord],
    ) -> Result<Reconciliation, StoreError> {
        let mut out = Reconciliation::default();
        for c in &self.commits {
            if !logged.iter().any(|r| r.experiment == c.experiment) {
                out.unlogged.push(UnloggedExperiment {
                    experiment: c.experiment,
                    target: c.target.clone(),
                    commit: c.id.clone(),
                    description: c.description.clone(),
                    agent: c.agent.clone(),
                });
            }
        }
        for r in logged {
            if let Some(commit) = &r.commit {
                if r.decision != Decision::Invalid && self.find(commit).is_none() {
                    out.missing_commits.push((r.experiment, commit.clone()));
                }
            }
        }
        Ok(out)
    }

    async fn recall(&self, rows: &mut [ExperimentRecord]) -> Result<(), StoreError> {
        for row in rows {
            let note = row.commit.as_ref().and_then(|c| self.notes.get(c));
            if let Some(note) = note.filter(|n| n.experiment == row.experiment) {
                row.head_to_head = row.head_to_head.take().or(note.head_to_head.clone());
                row.config = row.config.take().or(note.config.clone());
            }
        }
        Ok(())
    }

    async fn source_at(
        &self,
        target_id: &str,
        commit: &CommitId,
    ) -> Result<Option<String>, StoreError> {
        Ok(self
            .find(&commit.0)
            .filter(|c| c.target == target_id)
            .map(|c| c.source.clone()))
    }
}

/// A PASS row of experiment `n` for a softmax `target` at `latency` µs, as if PyTorch's own
/// op took 100 µs (so `speedup_vs_reference` is `100 / latency`) and the kernel reached 50%
/// of the roofline: tests of reports and progress lines start from it and set what they test.
pub fn pass_row(n: u64, target: &str, decision: Decision, latency: f64) -> ExperimentRecord {
    ExperimentRecord {
        experiment: n,
        timestamp: "2026-12-01T21:00:00Z".into(),
        target: target.into(),
        kind: KernelKind::Softmax,
        agent: "tune".into(),
        description: format!("try {n}"),
        commit: Some(format!("{n:040}")),
        decision,
        correctness: crate::Verdict::Pass,
        latency_us: Some(latency),
        throughput: None,
        throughput_unit: String::new(),
        pct_peak: Some(50.0),
        speedup_vs_reference: Some(100.0 / latency),
        peak_vram_mb: None,
        duration_s: 1.0,
        head_to_head: None,
        bench_samples_us: Vec::new(),
        bench_reference_samples_us: Vec::new(),
        config: None,
    }
}

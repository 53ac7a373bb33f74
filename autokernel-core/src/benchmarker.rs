//! The [`Benchmarker`] trait: judges a `kernel.py` (correctness stages, then timing) and
//! compares two kernels head to head for the keep rule.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::{DType, KernelKind, Layout, Params, Shape};

/// Where a kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// CUDA when available, else the CPU with Triton's interpreter.
    #[default]
    Auto,
    /// A CUDA (or ROCm) GPU; an error when there is none.
    Cuda,
    /// The CPU with Triton's interpreter: correctness is real, timings are not representative.
    Cpu,
}

impl std::str::FromStr for Device {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Device::Auto),
            "cuda" | "gpu" => Ok(Device::Cuda),
            "cpu" => Ok(Device::Cpu),
            other => Err(format!(
                "unknown device `{other}`; expected auto, cuda or cpu"
            )),
        }
    }
}

/// The correctness stages, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Compiling and importing `kernel.py` (syntax errors, missing `kernel_fn`).
    Load,
    /// One small call of each dtype.
    Smoke,
    /// Every shape × dtype of the chosen set.
    ShapeSweep,
    /// Adversarial scales near the dtype's max and near zero, mixed scales, zeros, constants.
    Stability,
    /// Bitwise identical outputs over three runs.
    Determinism,
    /// Shapes that are not powers of two.
    Edge,
    /// Integrity checks around the candidate (inputs untouched, no aliasing, no reference
    /// ops, harness functions intact, a fresh input re-checked after timing).
    Integrity,
    /// Timing.
    Timing,
}

impl Stage {
    /// The snake-case name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Load => "load",
            Stage::Smoke => "smoke",
            Stage::ShapeSweep => "shape_sweep",
            Stage::Stability => "stability",
            Stage::Determinism => "determinism",
            Stage::Edge => "edge",
            Stage::Integrity => "integrity",
            Stage::Timing => "timing",
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The verdict on a candidate. A verdict is not an error: `Err` from a [`Benchmarker`]
/// means the harness itself could not do its job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Correctness {
    /// Every stage passed.
    Pass,
    /// A stage failed; `reason` says what differed and, where known, the likely cause.
    Fail {
        /// The first stage that failed.
        stage: Stage,
        /// What failed, e.g. `float16 4096x4096: max abs error 0.5 at [3, 17]`.
        reason: String,
    },
    /// No reply within the time limit; the worker was killed and restarted.
    Timeout {
        /// What was running and the limit.
        reason: String,
    },
    /// The worker died (segfault, `os._exit`, CUDA error, out of memory).
    Crash {
        /// Exit status and the tail of the worker's stderr.
        reason: String,
    },
    /// The candidate interfered with the harness (modified its inputs, replaced harness
    /// functions, dispatched the reference op, aliased an input).
    Tamper {
        /// What it did.
        reason: String,
    },
    /// Nothing was run: the agent produced nothing runnable. (Rows of workspaces made
    /// before [`Correctness::Interrupted`] also used it for an abandoned experiment.)
    NotRun,
    /// The experiment was cut short before it had a verdict: a second Ctrl-C or SIGTERM
    /// abandoned it, or the process was killed (found committed but never logged on
    /// resume). Not the candidate's fault: a baseline cut short is judged again on resume,
    /// and the tuner may try such a configuration once more.
    Interrupted {
        /// How it was cut short.
        reason: String,
    },
}

impl Correctness {
    /// The word used in `results.tsv` and JSON: `PASS`, `FAIL`, `TIMEOUT`, `CRASH`,
    /// `TAMPER`, `NOT_RUN`, `INTERRUPTED`.
    pub fn label(&self) -> &'static str {
        self.verdict().label()
    }

    /// The verdict without its reason, as an experiment's row keeps it.
    pub fn verdict(&self) -> Verdict {
        match self {
            Correctness::Pass => Verdict::Pass,
            Correctness::Fail { .. } => Verdict::Fail,
            Correctness::Timeout { .. } => Verdict::Timeout,
            Correctness::Crash { .. } => Verdict::Crash,
            Correctness::Tamper { .. } => Verdict::Tamper,
            Correctness::NotRun => Verdict::NotRun,
            Correctness::Interrupted { .. } => Verdict::Interrupted,
        }
    }

    /// Whether every stage passed.
    pub fn is_pass(&self) -> bool {
        matches!(self, Correctness::Pass)
    }

    /// The failed stage, when the verdict names one (only `FAIL` does;
    /// [`BenchResult::failed_stage`] also finds the stage that caught a `TAMPER`).
    pub fn failed_stage(&self) -> Option<Stage> {
        match self {
            Correctness::Fail { stage, .. } => Some(*stage),
            _ => None,
        }
    }

    /// The reason, for any verdict but `PASS` and `NOT_RUN`.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Correctness::Fail { reason, .. }
            | Correctness::Timeout { reason }
            | Correctness::Crash { reason }
            | Correctness::Tamper { reason }
            | Correctness::Interrupted { reason } => Some(reason),
            Correctness::Pass | Correctness::NotRun => None,
        }
    }
}

/// The judge's word on an experiment, as `results.tsv` writes it (the `correctness`
/// column): [`Correctness`] without its reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verdict {
    /// Every stage passed.
    Pass,
    /// A stage failed.
    Fail,
    /// No reply within the time limit.
    Timeout,
    /// The worker died.
    Crash,
    /// The candidate interfered with the harness.
    Tamper,
    /// Nothing was run: the agent produced nothing runnable (and, in workspaces made before
    /// [`Verdict::Interrupted`], an abandoned experiment).
    NotRun,
    /// The experiment was cut short before a verdict (a second Ctrl-C, a kill).
    Interrupted,
}

impl Verdict {
    /// Every verdict, in the order of the words above.
    pub const ALL: [Verdict; 7] = [
        Verdict::Pass,
        Verdict::Fail,
        Verdict::Timeout,
        Verdict::Crash,
        Verdict::Tamper,
        Verdict::NotRun,
        Verdict::Interrupted,
    ];

    /// The word in `results.tsv` and JSON.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Timeout => "TIMEOUT",
            Verdict::Crash => "CRASH",
            Verdict::Tamper => "TAMPER",
            Verdict::NotRun => "NOT_RUN",
            Verdict::Interrupted => "INTERRUPTED",
        }
    }

    /// Whether it is `PASS`.
    pub fn is_pass(self) -> bool {
        self == Verdict::Pass
    }

    /// Whether it is a verdict on the kernel: not an experiment cut short
    /// (`INTERRUPTED`, or `NOT_RUN` on a measured row of a workspace made before that word).
    pub fn is_judged(self) -> bool {
        !matches!(self, Verdict::Interrupted | Verdict::NotRun)
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

impl std::str::FromStr for Verdict {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Verdict::ALL
            .into_iter()
            .find(|v| v.label() == s)
            .ok_or_else(|| format!("unknown correctness `{s}`"))
    }
}

/// The report of one stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageReport {
    /// Which stage.
    pub stage: Stage,
    /// Whether it passed.
    pub passed: bool,
    /// Number of (shape, dtype, input) cases it checked.
    pub cases: u32,
    /// What failed, or a one-line summary.
    pub detail: String,
    /// Wall time of the stage, in seconds.
    pub duration_s: f64,
}

/// Timing figures of one kernel at one shape and dtype.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// The shape timed.
    pub shape: Shape,
    /// The dtype timed.
    pub dtype: DType,
    /// Median latency of the candidate over the interleaved timing's repetitions, in
    /// microseconds.
    pub latency_us: f64,
    /// Median latency of the PyTorch reference at the same shape over the same
    /// repetitions, in microseconds.
    pub reference_latency_us: f64,
    /// Median latency of `torch.compile` of the reference, when requested, in microseconds.
    pub compiled_latency_us: Option<f64>,
    /// The median over the interleaved timing's repetitions of the reference's latency
    /// over the candidate's, each pair timed one right after the other
    /// ([`Metrics::samples_us`], [`Metrics::reference_samples_us`]); where there are no
    /// pairs, `reference_latency_us / latency_us`.
    pub speedup_vs_reference: f64,
    /// The candidate's latency in each repetition of the interleaved timing, in
    /// microseconds, in order (`latency_us` is their median). Empty in results that
    /// predate it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples_us: Vec<f64>,
    /// The reference's, paired with [`Metrics::samples_us`] by index.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reference_samples_us: Vec<f64>,
    /// Throughput by the kind's formula, in `throughput_unit`.
    pub throughput: f64,
    /// `GB/s` or `TFLOP/s`.
    pub throughput_unit: String,
    /// Percentage of the GPU's ceiling; `None` when the GPU is unknown or on the CPU.
    pub pct_peak: Option<f64>,
    /// Peak device memory allocated during the candidate's calls, in MB (1e6 B).
    pub peak_vram_mb: f64,
    /// The keys of the file's `CONFIG` dict that `kernel_fn` read in one call at this
    /// shape and dtype, sorted: the keys that surely can change this timing (the tuner
    /// moves them first). Reads outside that call (at import, cached from an earlier call)
    /// are not seen. `None` when the file has no `CONFIG` dict, read it as a whole
    /// (iterated, copied, unpacked) or read none of it, or the result predates this field.
    #[serde(default)]
    pub config_keys_read: Option<Vec<String>>,
    /// What the GPU was doing while the candidate and the reference were timed, where it
    /// could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<GpuConditions>,
}

/// The full result of judging one `kernel.py`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchResult {
    /// The kind the file declared; `None` when it is unknown: the candidate crashed, timed
    /// out or tampered before declaring one (and the request named none), or it declared a
    /// kind that is not a [`KernelKind`] (a catalogue extension's kind, named in the load
    /// stage's report).
    pub kind: Option<KernelKind>,
    /// The verdict.
    pub correctness: Correctness,
    /// One report per stage that ran.
    pub stages: Vec<StageReport>,
    /// Timing, present when the candidate passed and was timed.
    pub metrics: Option<Metrics>,
    /// `cuda` with the GPU's name, or `cpu`.
    pub device: String,
    /// False on the CPU (Triton's interpreter): latencies are not a kernel's speed.
    pub timing_representative: bool,
    /// sha256 of the exact source the worker ran, lower-case hex.
    pub source_sha256: String,
}

impl BenchResult {
    /// The stage the verdict failed in: a `FAIL`'s own stage; for any other verdict but
    /// `PASS`, the last stage whose report did not pass (a `TAMPER` carries no stage of
    /// its own, but the stage that caught it is reported failed); `None` when no stage
    /// failed (a `PASS`, or a worker that died before reporting any).
    pub fn failed_stage(&self) -> Option<Stage> {
        if self.correctness.is_pass() {
            return None;
        }
        self.correctness.failed_stage().or_else(|| {
            self.stages
                .iter()
                .rev()
                .find(|s| !s.passed)
                .map(|s| s.stage)
        })
    }
}

/// What to judge and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchRequest {
    /// The `kernel.py` to load (from disk: Triton reads kernel source from the file).
    pub kernel_path: PathBuf,
    /// The kind to judge it as; `None` takes the file's `KERNEL_KIND`.
    pub kind: Option<KernelKind>,
    /// Where to run.
    pub device: Device,
    /// Shapes added to the kind's sets, e.g. the model's own shapes for a profiled target.
    pub extra_shapes: Vec<Shape>,
    /// The shape and dtype to time; `None` times the first extra shape, else the first
    /// shape of the device's set, in float16 on a GPU and float32 on the CPU.
    pub timing: Option<(Shape, DType)>,
    /// Dtypes to judge (every stage); empty judges the kind's dtypes for the device
    /// ([`KernelKind::dtypes`]). A target from a model sets its own dtype: a kernel for an
    /// fp16 model need not be compiled and checked in three dtypes every experiment.
    pub dtypes: Vec<DType>,
    /// Fewer shapes and repetitions, for a quick look.
    pub quick: bool,
    /// Also time `torch.compile` of the reference.
    pub time_compiled: bool,
    /// How the inputs are laid out in memory (a target's [`Layout`], e.g. `nn.Linear`'s
    /// transposed weight), in every stage and in the timing.
    pub layout: Layout,
    /// The kind's semantic parameters (a target's [`crate::Target::params`]), in every
    /// stage and in the timing: handed to the input generator, the reference, the eager
    /// baseline and `kernel_fn`. Unset ones take their defaults; a name or value the kind
    /// does not accept makes the request invalid ([`BenchError::Request`]).
    #[serde(default)]
    pub params: Params,
    /// Wall-clock limit of the whole request.
    pub timeout: Duration,
}

impl BenchRequest {
    /// A request with defaults: kind from the file, automatic device, 300 s limit.
    pub fn new(kernel_path: impl Into<PathBuf>) -> Self {
        BenchRequest {
            kernel_path: kernel_path.into(),
            kind: None,
            device: Device::Auto,
            extra_shapes: Vec::new(),
            timing: None,
            dtypes: Vec::new(),
            quick: false,
            time_compiled: false,
            layout: Layout::Contiguous,
            params: Params::new(),
            timeout: Duration::from_secs(300),
        }
    }
}

/// What the GPU was doing while a measurement was taken (issue 36), read by NVML at its
/// start and end: the note of each bench and head-to-head keeps it, so that a figure that
/// swings can be traced to its cause. Over several measurements ([`GpuConditions::absorb`])
/// the ranges widen, the waits add up and the process count is the largest seen.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuConditions {
    /// How long the measurement waited for the GPU lease (another worker's warm-up or
    /// measurement on the same GPU; docs/bench.md, "The GPU lease"), in milliseconds.
    pub lease_wait_ms: f64,
    /// Lowest and highest SM clock read, in MHz; `None` where NVML could not be read.
    pub sm_clock_mhz: Option<(u32, u32)>,
    /// Lowest and highest GPU temperature read, in °C.
    pub temperature_c: Option<(u32, u32)>,
    /// Most processes seen holding a CUDA context on the GPU, the measuring one included
    /// (a spare worker of autokernel's, an idle one, counts; one running work during a
    /// measurement cannot be ours, the lease forbids it).
    pub gpu_processes: Option<u32>,
}

impl GpuConditions {
    /// Widens `self` by `other`: ranges joined, waits added, process counts maxed.
    pub fn absorb(&mut self, other: &GpuConditions) {
        fn join(a: Option<(u32, u32)>, b: Option<(u32, u32)>) -> Option<(u32, u32)> {
            match (a, b) {
                (Some((l1, h1)), Some((l2, h2))) => Some((l1.min(l2), h1.max(h2))),
                (a, b) => a.or(b),
            }
        }
        self.lease_wait_ms += other.lease_wait_ms;
        self.sm_clock_mhz = join(self.sm_clock_mhz, other.sm_clock_mhz);
        self.temperature_c = join(self.temperature_c, other.temperature_c);
        self.gpu_processes = match (self.gpu_processes, other.gpu_processes) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }

    /// One line for a note: `lease_wait_ms=0.0 sm_clock_mhz=1980-1980 temperature_c=41-42
    /// gpu_processes=3`, fields NVML could not read left out.
    pub fn to_line(&self) -> String {
        let mut line = format!("lease_wait_ms={:.1}", self.lease_wait_ms);
        if let Some((lo, hi)) = self.sm_clock_mhz {
            line.push_str(&format!(" sm_clock_mhz={lo}-{hi}"));
        }
        if let Some((lo, hi)) = self.temperature_c {
            line.push_str(&format!(" temperature_c={lo}-{hi}"));
        }
        if let Some(n) = self.gpu_processes {
            line.push_str(&format!(" gpu_processes={n}"));
        }
        line
    }
}

/// Incumbent and candidate timed in the same worker, interleaved, several repetitions: the
/// measurement the keep rule trusts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Median latency of the incumbent over the repetitions, in microseconds.
    pub incumbent_latency_us: f64,
    /// Median latency of the candidate over the repetitions, in microseconds.
    pub candidate_latency_us: f64,
    /// Median over repetitions of `incumbent / candidate` latency; > 1 means faster.
    pub median_speedup: f64,
    /// Number of interleaved repetitions.
    pub repetitions: u32,
    /// Spread of the per-repetition speedups: (max − min) / median.
    pub spread: f64,
    /// The incumbent's latency in each repetition, in microseconds (empty in results that
    /// predate it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub incumbent_samples_us: Vec<f64>,
    /// The candidate's, in the same order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidate_samples_us: Vec<f64>,
    /// Head-to-heads run again before this one, because each was too noisy to decide
    /// (`keep::MAX_SPREAD`): 0 when the first decided.
    #[serde(default)]
    pub retries: u32,
    /// What the GPU was doing meanwhile, where it could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<GpuConditions>,
}

impl Comparison {
    /// The candidate's latency at the ratio the keep rule decided on,
    /// `incumbent_latency_us / median_speedup`, in microseconds. Under noise the candidate's
    /// own median ([`Comparison::candidate_latency_us`]) can fall on the other side of the
    /// incumbent's while the median of the paired ratios does not (seen on the CPU
    /// interpreter with a 47% spread); figures shown beside a decision use this one, so that
    /// they agree with it.
    pub fn decided_candidate_us(&self) -> f64 {
        self.incumbent_latency_us / self.median_speedup
    }
}

/// Two kernels to time head to head.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompareRequest {
    /// The current best `kernel.py`.
    pub incumbent: PathBuf,
    /// The candidate `kernel.py`.
    pub candidate: PathBuf,
    /// The kind both implement.
    pub kind: KernelKind,
    /// Where to run.
    pub device: Device,
    /// The shape and dtype to time.
    pub timing: (Shape, DType),
    /// Interleaved repetitions (each one times both).
    pub repetitions: u32,
    /// How the inputs are laid out in memory (see [`BenchRequest::layout`]).
    pub layout: Layout,
    /// The kind's semantic parameters (see [`BenchRequest::params`]).
    #[serde(default)]
    pub params: Params,
    /// Wall-clock limit of the whole request.
    pub timeout: Duration,
}

/// Errors of the harness itself (not verdicts on a candidate).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// The kernel file does not exist or cannot be read.
    #[error("cannot read kernel file `{path}`")]
    KernelFile {
        /// The path given.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The Python environment cannot run the worker (wrong version, missing packages).
    #[error("cannot run kernels with this setup: {message}")]
    Environment {
        /// What is wrong and how to fix it.
        message: String,
    },
    /// The worker could not be started or stopped answering in a way that is not the
    /// candidate's fault.
    #[error("bench worker failed: {message}")]
    Worker {
        /// What happened, with the tail of the worker's stderr.
        message: String,
    },
    /// The request itself is invalid (e.g. a shape of the wrong rank, CUDA asked but absent).
    #[error("invalid bench request: {0}")]
    Request(String),
}

/// Judges kernels. Implementations must survive anything a candidate does: crashes,
/// hangs and tampering become verdicts ([`Correctness`]), never an `Err`.
#[async_trait]
pub trait Benchmarker: Send + Sync {
    /// Runs every correctness stage on `request.kernel_path`, then times it against the
    /// PyTorch reference.
    ///
    /// # Errors
    /// [`BenchError`] when the harness cannot run at all (no Python, unreadable file).
    async fn bench(&self, request: &BenchRequest) -> Result<BenchResult, BenchError>;

    /// Times incumbent and candidate interleaved in the same process (no correctness
    /// stages), for the keep rule.
    ///
    /// # Errors
    /// As [`Benchmarker::bench`]; a candidate that crashes here is an `Err`, and the loop
    /// reverts it.
    async fn compare(&self, request: &CompareRequest) -> Result<Comparison, BenchError>;
}

#[async_trait]
impl<T: Benchmarker + ?Sized> Benchmarker for Box<T> {
    async fn bench(&self, request: &BenchRequest) -> Result<BenchResult, BenchError> {
        (**self).bench(request).await
    }
    async fn compare(&self, request: &CompareRequest) -> Result<Comparison, BenchError> {
        (**self).compare(request).await
    }
}

#[async_trait]
impl<T: Benchmarker + ?Sized> Benchmarker for std::sync::Arc<T> {
    async fn bench(&self, request: &BenchRequest) -> Result<BenchResult, BenchError> {
        (**self).bench(request).await
    }
    async fn compare(&self, request: &CompareRequest) -> Result<Comparison, BenchError> {
        (**self).compare(request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_widen_ranges_add_waits_and_keep_the_most_processes() {
        let mut a = GpuConditions {
            lease_wait_ms: 1.5,
            sm_clock_mhz: Some((1980, 1980)),
            temperature_c: Some((40, 41)),
            gpu_processes: Some(2),
        };
        a.absorb(&GpuConditions {
            lease_wait_ms: 2.0,
            sm_clock_mhz: Some((1755, 1980)),
            temperature_c: None,
            gpu_processes: Some(3),
        });
        assert_eq!(a.lease_wait_ms, 3.5);
        assert_eq!(a.sm_clock_mhz, Some((1755, 1980)));
        assert_eq!(a.temperature_c, Some((40, 41)));
        assert_eq!(a.gpu_processes, Some(3));
        assert_eq!(
            a.to_line(),
            "lease_wait_ms=3.5 sm_clock_mhz=1755-1980 temperature_c=40-41 gpu_processes=3"
        );
        // what NVML could not read is left out of the line
        assert_eq!(GpuConditions::default().to_line(), "lease_wait_ms=0.0");
    }

    fn report(stage: Stage, passed: bool) -> StageReport {
        StageReport {
            stage,
            passed,
            cases: 1,
            detail: String::new(),
            duration_s: 0.0,
        }
    }

    fn result(correctness: Correctness, stages: Vec<StageReport>) -> BenchResult {
        BenchResult {
            kind: Some(crate::KernelKind::Softmax),
            correctness,
            stages,
            metrics: None,
            device: "cpu".into(),
            timing_representative: false,
            source_sha256: String::new(),
        }
    }

    /// A TAMPER names no stage itself; the stage whose report failed is the one that caught
    /// it (`bench --json` had `failed_stage: null` while its table showed that stage FAIL).
    #[test]
    fn a_tamper_verdict_fails_in_the_stage_that_reported_it() {
        let tamper = Correctness::Tamper {
            reason: "modified its input `x`".into(),
        };
        let stages = vec![report(Stage::Load, true), report(Stage::Smoke, false)];
        assert_eq!(
            result(tamper.clone(), stages).failed_stage(),
            Some(Stage::Smoke)
        );
        // no failed report (a worker that died mid-request): no stage to name
        assert_eq!(
            result(tamper, vec![report(Stage::Load, true)]).failed_stage(),
            None
        );
        // a FAIL keeps its own stage; a PASS has none
        let fail = Correctness::Fail {
            stage: Stage::Edge,
            reason: "masking bug".into(),
        };
        assert_eq!(
            result(fail, vec![report(Stage::Load, true)]).failed_stage(),
            Some(Stage::Edge)
        );
        assert_eq!(
            result(Correctness::Pass, vec![report(Stage::Load, true)]).failed_stage(),
            None
        );
    }
}

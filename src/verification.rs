//! The record of an end-to-end verification (`verify.json`): which kernels were plugged
//! into the model, which were left out and why, the model's timings, and the digest of each
//! `kernel.py` it saw, by which it turns stale. Pure data: reading and writing the file is
//! the workspace's ([`crate::Workspace::saved_verification`]), running a check is
//! [`crate::verify`]'s.

use std::collections::BTreeMap;
use std::path::Path;

use autokernel_core::Target;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The end-to-end check of the kept kernels plugged into the model (`verify.json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Verification {
    /// Whether the model with the included kernels matched the unmodified model and no
    /// kernel was left out for being wrong (an [`Excluded::broken`] one): false fails
    /// `autokernel verify` (exit 1).
    pub passed: bool,
    /// Target ids whose kernels were plugged in.
    pub included: Vec<String>,
    /// Targets left out, with the reason (broke the model, not pluggable, not faster).
    pub excluded: Vec<Excluded>,
    /// Largest absolute difference of the outputs.
    pub max_abs_error: Option<f64>,
    /// Eager model latency, in milliseconds.
    pub eager_ms: Option<f64>,
    /// Model latency with the kernels plugged in, in milliseconds.
    pub optimized_ms: Option<f64>,
    /// `eager_ms / optimized_ms`.
    pub speedup: Option<f64>,
    /// Where it ran (`cuda` + name, or `cpu`).
    pub device: String,
    /// False on the CPU: Triton's interpreter is not a speed.
    pub timing_representative: bool,
    /// The sha256 (hex) of each target's `kernel.py` as the verification saw it, by target
    /// id (a target that had none is absent): a kernel edited, added or removed since makes
    /// the verification stale ([`Verification::changed_kernels`]). `None` in a
    /// `verify.json` written before this field (staleness then unknown); an empty map is a
    /// verification that saw no kernel, stale once one is added.
    #[serde(default)]
    pub kernel_sha256: Option<BTreeMap<String, String>>,
    /// The torch version the verification ran with (`torch.__version__`); absent in a
    /// `verify.json` written before this field. An exported package records it and warns
    /// where it differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch_version: Option<String>,
    /// The triton version the verification ran with (`triton.__version__`), as
    /// [`Verification::torch_version`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_version: Option<String>,
    /// The deploy mode whose timings decided which kernels went in (`eager`, `cudagraph`,
    /// `compile`); absent in a `verify.json` written before this field (eager).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deploy: Option<String>,
    /// The model's time per forward in each deploy mode the device has, without and with
    /// the included kernels; `eager_ms`, `optimized_ms` and `speedup` above are its eager
    /// row. Empty in a `verify.json` written before this field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub modes: Vec<ModeTiming>,
    /// Where an exported package's plugs take calls, decided from [`Verification::modes`]
    /// (`deploy._contexts` in `python/deploy.py`): some of `eager`, `cudagraph` (while a
    /// CUDA graph captures) and `compile` (while torch.compile traces); in the others the
    /// model's own code runs. `None` when no kernel went in, or in a `verify.json` written
    /// before this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contexts: Option<Vec<String>>,
    /// Whether the verification was cut short (its budget ran out, or Ctrl-C or SIGTERM
    /// stopped it) before it decided every kernel: [`Verification::included`] holds the
    /// kernels decided in by then (each checked alone and together, as in a whole one); the
    /// kernels not decided are in [`Verification::excluded`], each
    /// [`Excluded::undecided`]; modes not timed have a row whose `error` says so. False in a
    /// `verify.json` written before this field.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut_short: bool,
    /// Why and where a verification was cut short (`its budget ran out while timing eager
    /// …`); `None` for a whole one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_short_reason: Option<String>,
}

/// One row of a verification's modes table: the model in one deploy mode (`eager`,
/// `cudagraph`: one forward captured and replayed, `compile`: `torch.compile`,
/// `reduce-overhead`: `torch.compile` with inductor's CUDA graphs), each time per forward a
/// median over plain loops of forwards with one synchronize.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ModeTiming {
    /// The mode's name.
    pub mode: String,
    /// Time per forward without autokernel's kernels, in milliseconds.
    pub baseline_ms: Option<f64>,
    /// Time per forward with the included kernels, in milliseconds; `None` without any.
    pub kernels_ms: Option<f64>,
    /// `baseline_ms / kernels_ms`.
    pub speedup: Option<f64>,
    /// GPU kernels one forward launches without autokernel's kernels (torch.profiler's
    /// CUPTI records, a CUDA graph's replay counting the kernels it holds; memory copies
    /// and sets left out); `None` on the CPU or where it could not be counted.
    #[serde(default)]
    pub baseline_launches: Option<u64>,
    /// The same with the included kernels.
    #[serde(default)]
    pub kernels_launches: Option<u64>,
    /// Why the mode has no timings: a variant that could not be captured or compiled, or
    /// whose output differs from the eager model's.
    pub error: Option<String>,
}

/// The sha256 (lowercase hex) of the file at `path`, or `None` when it cannot be read.
pub fn file_sha256(path: &Path) -> Option<String> {
    std::fs::read(path)
        .ok()
        .map(|bytes| format!("{:x}", Sha256::digest(&bytes)))
}

/// What the workspace's `verify.json` holds, as the reports show it.
// one value per verification: boxing the record would buy nothing
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum SavedVerification {
    /// No verification yet: no `verify.json`.
    None,
    /// A `verify.json` that cannot be read or is not a verification; the error, for the
    /// warning. A report still shows everything else.
    Unreadable(String),
    /// The last verification.
    Saved(Verification),
}

impl SavedVerification {
    /// The verification, when there is a readable one.
    pub fn get(&self) -> Option<&Verification> {
        match self {
            Self::Saved(v) => Some(v),
            Self::None | Self::Unreadable(_) => None,
        }
    }
}

/// One line for `autokernel report`'s stdout on the saved verification, so that a failed,
/// stale, missing or unreadable verification is seen without opening report.md:
/// `verification: PASS on cuda NVIDIA H200, 1.234x end to end`, `verification: FAIL on cpu
/// (report.md says why)`, `verification: none yet (autokernel verify --workspace DIR)`,
/// `verification: unreadable verify.json (…)`. `stale`: the targets whose kernel.py changed
/// since ([`Verification::changed_kernels`]).
pub fn verification_summary(
    workspace: &Path,
    saved: &SavedVerification,
    stale: &[String],
) -> String {
    let v = match saved {
        SavedVerification::Saved(v) => v,
        SavedVerification::None => {
            return format!(
                "verification: none yet (autokernel verify --workspace {})",
                workspace.display()
            )
        }
        SavedVerification::Unreadable(_) => {
            return format!(
                "verification: unreadable verify.json (autokernel verify --workspace {} writes a new one)",
                workspace.display()
            )
        }
    };
    let mut line = if v.passed && v.included.is_empty() {
        // as `verify` says it: a check of no kernel is no PASS
        format!(
            "verification: n/a on {} (no kernel was plugged in)",
            v.device
        )
    } else if v.passed {
        let speedup = match v.speedup {
            Some(x) if v.timing_representative => format!(", {x:.3}x end to end"),
            Some(x) => format!(", {x:.3}x end to end on the CPU interpreter (not a speed)"),
            None => String::new(),
        };
        format!("verification: PASS on {}{speedup}", v.device)
    } else {
        format!("verification: FAIL on {} (report.md says why)", v.device)
    };
    if v.cut_short {
        line.push_str(
            "; cut short: the kernels it did not decide are left out (autokernel verify again decides them)",
        );
    }
    if !stale.is_empty() {
        line.push_str(&format!(
            "; stale: the kernel.py of {} is not the one verified",
            stale.join(", ")
        ));
    }
    line
}

/// A target left out of verification.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Excluded {
    /// The target id.
    pub target: String,
    /// Why.
    pub reason: String,
    /// Whether it was left out for being wrong: it cannot be loaded, raises inside the
    /// model, or changes the model's output beyond the tolerance. False for a kernel left
    /// out only because the model has no call site for it or it does not make the model
    /// faster. (Absent from a `verify.json` written before this field: false.)
    #[serde(default)]
    pub broken: bool,
    /// Whether it was left out only because the verification was cut short before deciding
    /// it ([`Verification::cut_short`]): nothing is known against it; a whole verification
    /// decides it. (Absent from a `verify.json` written before this field: false.)
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub undecided: bool,
}

impl Verification {
    /// The targets whose `kernel.py` in the workspace at `root` is no longer the one the
    /// verification saw
    /// (edited, added or removed since), in plan order: the verification says nothing about
    /// them any more, whether it plugged them in or left them out. Empty when nothing
    /// changed, or when `verify.json` predates the hashes ([`Verification::has_hashes`]).
    pub fn changed_kernels(&self, root: &Path, targets: &[Target]) -> Vec<String> {
        let Some(hashes) = &self.kernel_sha256 else {
            return Vec::new();
        };
        targets
            .iter()
            .filter(|t| {
                let verified = hashes.get(&t.id).map(|h| h.to_ascii_lowercase());
                verified != file_sha256(&root.join(t.kernel_relpath()))
            })
            .map(|t| t.id.clone())
            .collect()
    }

    /// Whether this verification recorded the kernels it saw (a `verify.json` written before
    /// `kernel_sha256` did not: whether they changed since cannot be told).
    pub fn has_hashes(&self) -> bool {
        self.kernel_sha256.is_some()
    }

    /// Whether the verification reached any decision of its own on a kernel: one plugged in,
    /// or one left out for a reason other than being undecided. A verification cut short
    /// before any is worth nothing (and is not saved over the last one).
    pub fn decided_anything(&self) -> bool {
        !self.included.is_empty() || self.excluded.iter().any(|e| !e.undecided)
    }

    /// The `verified:` value of the summaries: `false` with the count of wrong kernels when
    /// the check failed, `n/a` when nothing was plugged in, else `true`; a verification cut
    /// short says so after it, with the reason.
    pub fn verdict(&self) -> String {
        let verdict = self.whole_verdict();
        match (self.cut_short, &self.cut_short_reason) {
            (false, _) => verdict,
            (true, Some(why)) => format!("{verdict}; cut short: {why}"),
            (true, None) => format!("{verdict}; cut short"),
        }
    }

    fn whole_verdict(&self) -> String {
        let broken = self.excluded.iter().filter(|e| e.broken).count();
        if !self.passed {
            if broken == 0 {
                return "false (the model with the kernels does not match the unmodified model)"
                    .into();
            }
            return format!("false ({broken} kernel(s) break the model or cannot be loaded)");
        }
        if self.included.is_empty() {
            return "n/a (no kernel was plugged into the model; PyTorch's own ops are kept)".into();
        }
        "true".into()
    }
}

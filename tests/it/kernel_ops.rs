//! `python/kernel_ops.py`, the kernels as PyTorch operators, checked in the project's
//! Python on the CPU (Triton's interpreter) for every starter: the operator's CPU path and
//! its forced Triton kernel against PyTorch's own functions (a wrong kernel fails), under
//! `torch.compile(fullgraph=True)` with no graph break, with symbolic shapes, and the
//! launcher cached per key. The checks are `tests/python/kernel_ops_check.py`; the files
//! it imports are written as `autokernel` writes them ([`autokernel::services::write_kernel_ops`]).

use std::path::{Path, PathBuf};
use std::process::Command;

fn python() -> PathBuf {
    std::env::var_os("AUTOKERNEL_PYTHON")
        .map(Into::into)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python"))
}

/// Runs one check of `kernel_ops_check.py` against freshly written operator files; panics
/// with the script's output unless it prints `ok` and exits 0.
fn check(name: &str) {
    let dir = tempfile::tempdir().unwrap();
    autokernel::services::write_kernel_ops(dir.path()).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(python())
        .arg(root.join("tests/python/kernel_ops_check.py"))
        .arg(name)
        .arg(dir.path())
        .arg(root.join("autokernel-bench/python/starters"))
        .env("TRITON_INTERPRET", "1")
        .env_remove("AUTOKERNEL_FORCE_KERNEL")
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.lines().last() == Some("ok"),
        "check `{name}` failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn every_starters_operator_matches_pytorch_on_the_cpu_and_forced_through_its_kernel() {
    check("outputs");
}

#[test]
fn a_wrong_kernel_fails_the_forced_kernel_check() {
    check("wrong_kernel");
}

#[test]
fn the_operators_compile_fullgraph_without_a_graph_break_and_with_symbolic_shapes() {
    check("compile");
}

#[test]
fn the_launcher_replays_a_key_without_calling_kernel_fn_again() {
    check("launcher");
}

#[test]
fn a_plain_eager_call_skips_the_dispatcher_and_a_mode_or_the_profiler_sees_the_operator() {
    check("direct");
}

/// `benches/gpu/host_time.py` (the host time of one call per kind: kernel_fn, the cached
/// launcher, the operator through the dispatcher and past it, PyTorch) runs on the CPU under the interpreter, one call per way,
/// and tables every kind with its launcher replaying, and the launcher's parts (Triton's
/// compiled launch alone exists only on a GPU).
#[test]
fn the_host_time_benchmark_runs_on_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    autokernel::services::write_kernel_ops(dir.path()).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let json = dir.path().join("host_time.json");
    let out = Command::new(python())
        .arg(root.join("benches/gpu/host_time.py"))
        .arg(dir.path())
        .args(["--device", "cpu", "--calls", "1", "--rounds", "1", "--json"])
        .arg(&json)
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| ---"))
        .collect();
    // per table, the header, then one row per kind: the ways, then the launcher's parts
    assert_eq!(rows.len(), 2 * (1 + 9), "{stdout}");
    assert!(!stdout.contains("not replayed"), "{stdout}");
    let figures = std::fs::read_to_string(&json).unwrap();
    for line in figures.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["replayed"], true, "{line}");
        for way in [
            "kernel_fn_us",
            "launcher_us",
            "operator_us",
            "op_call_us",
            "pytorch_us",
        ] {
            assert!(v[way].as_f64().is_some_and(|us| us > 0.0), "{way}: {line}");
        }
        for part in ["replay", "launches", "empty"] {
            let us = v["parts_us"][part].as_f64();
            assert!(us.is_some_and(|us| us > 0.0), "{part}: {line}");
        }
        assert!(v["parts_us"]["triton_run"].is_null(), "{line}");
    }
}

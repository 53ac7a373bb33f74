//! No reference in a candidate's process (issue 21, point 1): the trusted reference worker
//! computes every reference from the case's seed, and the parent compares
//! (`tests/cases/reference/`, see its README).

use autokernel_bench::{PyWorkerBenchmarker, SandboxOptions, Worker};
use autokernel_core::{Correctness, Stage};

use super::*;

/// A candidate that copies whatever tensor of the output's shape it finds in the
/// harness's frames into its own kernel's output passed every correctness stage before (the
/// reference was computed there) and was caught only at the timing; now its own copy kernel
/// is all it has, and the first case fails.
#[tokio::test]
async fn a_candidate_that_looks_for_the_reference_in_the_harness_frames_finds_none() {
    let b = PyWorkerBenchmarker::with_worker(worker());
    let r = bench(
        &b,
        &cases_dir("reference").join("steals_it_from_the_harness_frames.py"),
        true,
        120,
    )
    .await;
    match &r.correctness {
        Correctness::Fail { stage, reason } => assert_eq!(
            *stage,
            Stage::Smoke,
            "it failed only at {stage}, so a reference was within reach: {reason}"
        ),
        other => panic!("expected FAIL at smoke, got {other:?}"),
    }
    let mut wrong = Vec::new();
    the_starter_passes_after(&b, "steals_it_from_the_harness_frames.py", 120, &mut wrong).await;
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The reference worker is another process than the candidate's, and the candidate can
/// neither open its open files (its reply pipe) nor its memory through `/proc`, even in the
/// fallback sandbox (no namespaces): Landlock refuses ptrace access outside the candidate's
/// domain, and the reference worker is undumpable for kernels without Landlock.
#[tokio::test]
async fn a_candidate_cannot_reach_the_reference_workers_pipes_or_memory() {
    let options = SandboxOptions {
        namespaces: false,
        ..SandboxOptions::default()
    };
    let worker = std::sync::Arc::new(Worker::new(super::options()).with_sandbox(options));
    let b = PyWorkerBenchmarker::with_worker(worker.clone());
    let first = bench(&b, &starter_path("rmsnorm"), true, 120).await;
    assert!(first.correctness.is_pass(), "{:?}", first.correctness);
    let pid = worker
        .reference_pid()
        .await
        .expect("a reference worker after a bench");
    let dir = tempfile::tempdir().unwrap();
    let source =
        std::fs::read_to_string(cases_dir("reference").join("probes_the_reference_worker.py"))
            .unwrap()
            .replace("REFERENCE_PID = 0", &format!("REFERENCE_PID = {pid}"))
            .replace(
                "PARENT_PID = 0",
                &format!("PARENT_PID = {}", std::process::id()),
            );
    let probe = write(dir.path(), "probes_the_reference_worker.py", &source);
    let r = bench(&b, &probe, true, 120).await;
    let reason = r.correctness.reason().unwrap_or_default().to_string();
    assert!(
        reason.contains(&format!(
            "probe of pid {pid}: alive: True, fd: refused, mem: refused"
        )),
        "{reason}"
    );
    // the parent's handle on the reference's payload area: out of reach where Landlock is
    // in force (its ptrace scope covers /proc/<pid>/fd); without it the parent made itself
    // undumpable, which only root's capabilities pass (docs/bench.md, the threat model)
    // SAFETY: geteuid has no arguments and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let parent = if reason.contains("writes outside: refused") || !root {
        "the parent's payload areas: refused"
    } else {
        "the parent's payload areas: open"
    };
    assert!(reason.contains(parent), "{reason}");
    assert_eq!(
        worker.reference_pid().await,
        Some(pid),
        "the same reference worker serves on"
    );
}

/// One request line to a worker started by hand, and its reply line as JSON.
fn ask(
    stdin: &mut std::process::ChildStdin,
    stdout: &mut std::io::BufReader<std::process::ChildStdout>,
    id: u64,
    request: serde_json::Value,
) -> serde_json::Value {
    use std::io::{BufRead, Write};
    let line = serde_json::json!({ "id": id, "nonce": format!("n{id}"), "request": request });
    writeln!(stdin, "{line}").unwrap();
    stdin.flush().unwrap();
    let mut reply = String::new();
    stdout.read_line(&mut reply).unwrap();
    serde_json::from_str(&reply).unwrap_or_else(|e| panic!("{e}: {reply}"))
}

/// The reference worker computes a reference on `reference` but writes it to its payload
/// area only on `deliver` (the parent asks once the candidate's outputs are in its own
/// memory, so a candidate that can open the parent's fds finds no reference there while it
/// still writes): the area is untouched after the first, and holds the softmax after the
/// second (each row sums to 1), once.
#[test]
fn the_reference_worker_writes_a_reference_only_when_asked_to_deliver_it() {
    use std::io::BufRead;
    use std::os::fd::FromRawFd;
    use std::os::unix::fs::FileExt;
    // SAFETY: memfd_create with a NUL-terminated name; the fd is owned by the File. Without
    // MFD_CLOEXEC, the worker started below inherits it, as the parent's own hook arranges.
    let area = unsafe {
        let fd = libc::memfd_create(c"test-payload".as_ptr(), 0);
        assert!(fd >= 0, "memfd_create");
        std::fs::File::from_raw_fd(fd)
    };
    let fd = std::os::fd::AsRawFd::as_raw_fd(&area);
    let (rows, cols) = (4usize, 8usize);
    area.set_len((rows * cols * 4) as u64).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_autokernel-bench-worker"))
        .env("AUTOKERNEL_WORKER_PYTHON", python())
        .env("AUTOKERNEL_WORKER_DEVICE", "cpu")
        .env("AUTOKERNEL_WORKER_REFERENCE", "1")
        .env("AUTOKERNEL_WORKER_PAYLOAD_FD", fd.to_string())
        .env("TRITON_INTERPRET", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut hello = String::new();
    stdout.read_line(&mut hello).unwrap();
    assert!(hello.contains("\"error\":null"), "{hello}");
    let read_area = || {
        let mut bytes = vec![0u8; rows * cols * 4];
        area.read_exact_at(&mut bytes, 0).unwrap();
        bytes
            .chunks(4)
            .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
            .collect::<Vec<f32>>()
    };

    let job = serde_json::json!({
        "op": "reference", "kind": "softmax", "shape": [rows, cols], "dtype": "float32",
        "seed": 1001, "mode": "normal", "layout": "contiguous", "params": "{}",
    });
    let computed = ask(&mut stdin, &mut stdout, 1, job.clone());
    assert_eq!(computed["body"]["status"], "ok", "{computed}");
    assert_eq!(
        computed["body"]["value"]["bytes"],
        rows * cols * 4,
        "{computed}"
    );
    assert!(
        read_area().iter().all(|&v| v == 0.0),
        "the reference reached the area before it was delivered"
    );

    let delivered = ask(
        &mut stdin,
        &mut stdout,
        2,
        serde_json::json!({ "op": "deliver" }),
    );
    assert_eq!(
        delivered["body"]["value"]["bytes"],
        rows * cols * 4,
        "{delivered}"
    );
    let values = read_area();
    for row in values.chunks(cols) {
        let sum: f32 = row.iter().sum();
        assert!(
            (sum - 1.0).abs() < 1e-5,
            "a softmax row sums to {sum}: {values:?}"
        );
    }

    let again = ask(
        &mut stdin,
        &mut stdout,
        3,
        serde_json::json!({ "op": "deliver" }),
    );
    assert!(
        again["body"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no reference to deliver")),
        "{again}"
    );

    // offsets of a timed call's inputs that no rotation draws (past the pool's end: the
    // pool of 32 values holds windows at 0..=32 only) are refused by name, which the
    // parent reads as a failed check of the candidate, not an error of its own
    let mut job_at = job.clone();
    job_at["offsets"] = serde_json::json!({ "x": 33 });
    let refused = ask(&mut stdin, &mut stdout, 4, job_at.clone());
    assert!(
        refused["body"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("OffsetsRefused") && m.contains("outside 0..=32")),
        "{refused}"
    );
    job_at["offsets"] = serde_json::json!({ "x": 32 });
    let taken = ask(&mut stdin, &mut stdout, 5, job_at);
    assert_eq!(taken["body"]["status"], "ok", "{taken}");
    drop(stdin);
    child.wait().unwrap();
}

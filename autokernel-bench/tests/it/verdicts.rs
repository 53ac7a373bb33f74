//! Whatever a candidate returns or raises is a verdict (issue 21, point 6): the kernel
//! files of `tests/cases/verdicts/` (see its README) each broke the tool or passed, and
//! each must now get FAIL or TAMPER with a reason, after which the softmax starter, judged
//! next on the same worker, passes.

use std::path::{Path, PathBuf};

use autokernel_bench::PyWorkerBenchmarker;
use autokernel_core::{Benchmarker, CompareRequest, Correctness, DType, KernelKind, Layout, Shape};

use super::*;

/// Each case: file, whether its verdict is TAMPER (else FAIL), a fragment of its reason.
const CASES: [(&str, bool, &str); 12] = [
    (
        "returns_meta_tensor.py",
        false,
        "output is on `meta`, inputs were on `cpu`",
    ),
    (
        "raises_unprintable_exception.py",
        false,
        "Unprintable: (its message could not be printed",
    ),
    (
        "raises_exception_with_unreadable_class.py",
        false,
        "(its message could not be printed",
    ),
    (
        "deletes_itself.py",
        true,
        "removed the copy it was loaded from",
    ),
    (
        "closes_std_streams.py",
        true,
        "sys.stdout (closed), sys.stderr (closed)",
    ),
    (
        "closes_fds_1_and_2.py",
        true,
        "fd 1 (stdout) was closed, fd 2 (stderr) was closed",
    ),
    (
        "replaces_std_streams.py",
        true,
        "sys.stdout (replaced), sys.stderr (replaced)",
    ),
    (
        "returns_non_tensor_of_unreadable_class.py",
        false,
        "not a plain torch.Tensor",
    ),
    (
        "returns_subclass_whose_methods_raise.py",
        false,
        "not a plain torch.Tensor",
    ),
    (
        "floods_the_reply_channel.py",
        true,
        "a line of more than 16 MiB on the reply channel",
    ),
    (
        "closes_the_payload_area.py",
        false,
        "float32 8x128: its outputs could not be sent to the judge",
    ),
    (
        "edits_the_catalogue_in_place.py",
        true,
        "the catalogue's tables (edited in place)",
    ),
];

/// Cases whose trick the sandbox's Landlock refuses (where the kernel has it): the refusal
/// raises at import, a FAIL at load naming `PermissionError`.
const SANDBOX_REFUSES: &[&str] = &["deletes_itself.py"];

/// `name` from tests/cases/verdicts/, copied into `dir` (one case deletes its own file).
fn copy_case(dir: &Path, name: &str) -> PathBuf {
    let to = dir.join(name);
    std::fs::copy(cases_dir("verdicts").join(name), &to).expect("copy a case");
    to
}

/// Every case gets its verdict and reason (no harness error), and the starter judged
/// after it on the same worker passes. All cases run before the assertion, so a failure
/// lists each case that went wrong.
#[tokio::test]
async fn every_trick_is_a_verdict_and_the_next_honest_kernel_passes() {
    let dir = tempfile::tempdir().unwrap();
    let b = PyWorkerBenchmarker::with_worker(worker());
    let mut wrong = Vec::new();
    for (name, tamper, fragment) in CASES {
        let path = copy_case(dir.path(), name);
        let mut r = BenchRequest::new(&path);
        r.device = Device::Cpu;
        r.quick = true;
        r.timeout = Duration::from_secs(120);
        match b.bench(&r).await {
            Ok(res) => {
                let kind_ok = match &res.correctness {
                    Correctness::Tamper { .. } => tamper,
                    // the sandbox refused what the trick needed: it fails at load
                    Correctness::Fail { .. } => !tamper || SANDBOX_REFUSES.contains(&name),
                    _ => false,
                };
                let reason = res.correctness.reason().unwrap_or_default();
                let refused =
                    SANDBOX_REFUSES.contains(&name) && reason.contains("Permission denied");
                if !kind_ok || !(reason.contains(fragment) || refused) {
                    wrong.push(format!("{name}: {:?}", res.correctness));
                }
            }
            Err(e) => wrong.push(format!("{name}: harness error {e}")),
        }
        the_starter_passes_after(&b, name, 120, &mut wrong).await;
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A kernel that deletes its own file at import deletes at most the private copy it was
/// loaded from (none under the sandbox): the file itself is still there, so it can be benched again and compared
/// head to head, twice, with the starter (it deleted the file itself before).
#[tokio::test]
async fn a_kernel_that_deletes_its_file_leaves_later_benches_and_head_to_heads_working() {
    let dir = tempfile::tempdir().unwrap();
    let path = copy_case(dir.path(), "deletes_itself.py");
    let b = PyWorkerBenchmarker::with_worker(worker());
    for _ in 0..2 {
        let r = bench(&b, &path, true, 120).await;
        // TAMPER where it could remove its copy; where the sandbox refused, a FAIL at load
        // and a head-to-head that says it does not load (the file untouched either way)
        let refused = matches!(&r.correctness,
            Correctness::Fail { reason, .. } if reason.contains("Permission denied"));
        assert!(
            matches!(r.correctness, Correctness::Tamper { .. }) || refused,
            "{:?}",
            r.correctness
        );
        let c = b
            .compare(&CompareRequest {
                incumbent: good_softmax(),
                candidate: path.clone(),
                kind: KernelKind::Softmax,
                device: Device::Cpu,
                timing: (Shape(vec![8, 128]), DType::Float32),
                repetitions: 2,
                layout: Layout::default(),
                params: Default::default(),
                timeout: Duration::from_secs(120),
            })
            .await;
        match c {
            Ok(c) => assert_eq!(c.repetitions, 2),
            Err(e) if refused => assert!(e.to_string().contains("does not load"), "{e}"),
            Err(e) => panic!("a head-to-head with a kernel that deleted its copy: {e}"),
        }
        assert!(path.exists(), "the kernel file itself was deleted");
    }
}

/// Every file in tests/cases/verdicts/ is listed in its README and judged above.
#[test]
fn every_verdict_case_is_listed_in_the_readme_and_judged() {
    let dir = cases_dir("verdicts");
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name != "README.md" {
            assert!(readme.contains(&format!("`{name}`")), "{name} not listed");
            assert!(CASES.iter().any(|c| c.0 == name), "{name} not judged");
        }
    }
}

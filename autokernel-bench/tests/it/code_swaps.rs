//! Guards that see through code swaps (issue 21, point 4): a function the judge relies on
//! whose `__code__` or defaults were replaced, or a callable dunder such as
//! `builtins.__import__` rebound, makes the candidate TAMPER, naming it
//! (`tests/cases/code_swaps/`, see its README). Before, each of these PASSed.

use autokernel_bench::PyWorkerBenchmarker;
use autokernel_core::Correctness;

use super::*;

/// (case folder, file, what the reason must name)
const CASES: &[(&str, &str, &str)] = &[
    (
        "code_swaps",
        "swaps_layer_norm_code.py",
        "torch.nn.functional.layer_norm (its code or defaults were replaced)",
    ),
    ("code_swaps", "replaces_import.py", "builtins.__import__"),
    (
        "poison",
        "swaps_reference_code.py",
        "catalogue._builtin_reference (its code or defaults were replaced)",
    ),
];

#[tokio::test]
async fn a_swapped_code_object_or_dunder_is_tamper() {
    let b = PyWorkerBenchmarker::with_worker(worker());
    let mut wrong = Vec::new();
    for (area, name, fragment) in CASES {
        let r = bench(&b, &cases_dir(area).join(name), true, 120).await;
        match &r.correctness {
            Correctness::Tamper { reason } if reason.contains(fragment) => {}
            other => wrong.push(format!("{name}: {other:?}")),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

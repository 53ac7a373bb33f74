//! Adding a kind touches only the places docs/kernels.md ("Adding a kind") lists: a toy
//! kind, `toy_scale` (y = 2·x), is added through exactly those (a catalogue entry, here
//! built at run time since an enum variant cannot be; a registry module with its input
//! generator and reference; a starter) and judged by the real worker.

use std::path::PathBuf;

use autokernel_bench::{PyWorkerBenchmarker, Worker};
use autokernel_core::{
    Bound, Catalogue, Correctness, DType, DTypes, ElementType, InputRole, InputSpec, KindSpec,
    OutputSpec, Shape, ShapeSets, Stage, Tolerances,
};

use super::*;

/// The toy's catalogue entry, as its Rust entry in `catalogue.rs` would read.
fn toy_spec() -> KindSpec {
    let rows_cols = vec!["rows".to_string(), "cols".to_string()];
    let shapes = |v: &[&[u64]]| v.iter().map(|d| Shape(d.to_vec())).collect();
    KindSpec {
        name: "toy_scale".into(),
        summary: "y = 2·x".into(),
        dim_names: rows_cols.clone(),
        inputs: vec![InputSpec {
            name: "x".into(),
            role: InputRole::Data,
            dims: rows_cols.clone(),
            dtype: ElementType::Judged,
            only_if: None,
        }],
        output: OutputSpec {
            dims: rows_cols,
            dtype: ElementType::Judged,
        },
        params: vec![],
        shapes: ShapeSets {
            cpu: shapes(&[&[8, 128], &[16, 256]]),
            gpu: shapes(&[&[4096, 4096]]),
            edge: shapes(&[&[7, 1000], &[33, 77]]),
        },
        tiny_shape: Shape(vec![4, 32]),
        dtypes: DTypes {
            gpu: DType::ALL.to_vec(),
            cpu: vec![DType::Float32, DType::Float16],
        },
        tolerances: Tolerances::DEFAULT,
        forbidden_ops: vec!["aten::mul".into()],
        allowed_ops: Vec::new(),
        masked_rows: false,
        pluggable: false,
        bound: Bound::Memory,
        formulas: None,
    }
}

fn case(name: &str) -> PathBuf {
    cases_dir("toy_kind").join(name)
}

fn toy_worker(registry: Vec<PathBuf>) -> Worker {
    Worker::new(options())
        .with_memory_limit_mb(12 * 1024)
        .with_kinds(Catalogue::builtin().clone().with(toy_spec()), registry)
}

#[tokio::test]
async fn a_toy_kind_added_through_the_listed_places_passes_its_starter_and_fails_a_wrong_kernel() {
    let b = PyWorkerBenchmarker::with_worker(std::sync::Arc::new(toy_worker(vec![case(
        "registry.py",
    )])));
    let r = bench(&b, &case("starter.py"), false, 300).await;
    assert!(
        r.correctness.is_pass(),
        "{:?}\n{:#?}",
        r.correctness,
        r.stages
    );
    // no KernelKind variant: the result is labelled by the load stage only
    assert_eq!(r.kind, None);
    assert!(
        r.stages[0].detail.contains("KERNEL_KIND toy_scale"),
        "{:?}",
        r.stages[0]
    );
    let stages: Vec<Stage> = r.stages.iter().map(|s| s.stage).collect();
    assert!(
        stages.contains(&Stage::Edge) && stages.contains(&Stage::Timing),
        "{stages:?}"
    );
    // the built-in kinds are still judged by the same worker
    let r = bench(&b, &good_softmax(), true, 300).await;
    assert!(r.correctness.is_pass(), "{:?}", r.correctness);

    // 3·x instead of 2·x: elementwise off by |x| at the first smoke case
    let dir = tempfile::tempdir().unwrap();
    let source = std::fs::read_to_string(case("starter.py")).unwrap();
    let wrong = write(
        dir.path(),
        "wrong.py",
        &source.replace("SCALE = 2.0", "SCALE = 3.0"),
    );
    let r = bench(&b, &wrong, true, 300).await;
    match &r.correctness {
        Correctness::Fail { stage, .. } => assert_eq!(*stage, Stage::Smoke, "{r:?}"),
        other => panic!("expected FAIL in smoke, got {other:?}"),
    }
}

#[tokio::test]
async fn a_catalogue_kind_without_its_python_side_stops_the_worker_naming_it() {
    let w = toy_worker(vec![]);
    let err = w
        .status(std::time::Duration::from_secs(300))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("kind `toy_scale` is in the catalogue but no Python"),
        "{text}"
    );
}

/// A reference that cannot be computed is the tool's failure, never the candidate's
/// verdict (issue 21, point 1): the trusted reference worker raises at every case (past the
/// tiny shape its start-up runs), the candidate's worker never computes a reference, and
/// `bench` answers with an error naming the reference worker.
#[tokio::test]
async fn a_reference_that_fails_in_the_reference_worker_is_an_error_not_a_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let source = std::fs::read_to_string(case("registry.py")).unwrap();
    let failing = source.replace(
        "    return 2.0 * f[\"x\"]",
        "    if f[\"x\"].shape[0] > 4:\n        raise RuntimeError(\"no reference past the tiny shape\")\n    return 2.0 * f[\"x\"]",
    );
    assert_ne!(failing, source, "the registry's reference line changed");
    let registry = write(dir.path(), "registry.py", &failing);
    let b = PyWorkerBenchmarker::with_worker(std::sync::Arc::new(toy_worker(vec![registry])));
    let mut r = BenchRequest::new(case("starter.py"));
    r.device = Device::Cpu;
    r.quick = true;
    r.timeout = std::time::Duration::from_secs(300);
    let err = b
        .bench(&r)
        .await
        .expect_err("no verdict without a reference");
    let text = err.to_string();
    assert!(
        text.contains("trusted reference worker failed")
            && text.contains("no reference past the tiny shape"),
        "{text}"
    );
}

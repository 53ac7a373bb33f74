//! Semantic parameters through the real worker: a toy kind, `toy_factor` (y = factor·x,
//! `factor` default 2), whose value reaches the input generator, the reference and
//! `kernel_fn` (as a keyword argument). A kernel that honours it passes at any value; one
//! that ignores it fails at any value but the default, and one written before the kind had
//! the parameter (no `factor` keyword) passes at the default only.

use std::path::{Path, PathBuf};
use std::time::Duration;

use autokernel_bench::{PyWorkerBenchmarker, Worker};
use autokernel_core::{
    BenchError, BenchRequest, BenchResult, Benchmarker, Bound, Catalogue, Correctness, DType,
    DTypes, Device, ElementType, InputRole, InputSpec, KindSpec, OutputSpec, ParamSpec, ParamType,
    Params, Shape, ShapeSets, Stage, Tolerances,
};
use serde_json::json;

use super::*;

fn spec() -> KindSpec {
    let rows_cols = vec!["rows".to_string(), "cols".to_string()];
    let shapes = |v: &[&[u64]]| v.iter().map(|d| Shape(d.to_vec())).collect();
    KindSpec {
        name: "toy_factor".into(),
        summary: "y = factor·x".into(),
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
        params: vec![ParamSpec::new(
            "factor",
            ParamType::Float { above: None },
            json!(2.0),
            "the scale",
        )],
        shapes: ShapeSets {
            cpu: shapes(&[&[8, 128]]),
            gpu: shapes(&[&[4096, 4096]]),
            edge: shapes(&[&[7, 100]]),
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
    cases_dir("params").join(name)
}

async fn judge(
    b: &PyWorkerBenchmarker,
    path: &Path,
    params: &[(&str, serde_json::Value)],
) -> Result<BenchResult, BenchError> {
    let mut r = BenchRequest::new(path);
    r.device = Device::Cpu;
    r.quick = true;
    r.timeout = Duration::from_secs(300);
    r.params = params
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect::<Params>();
    b.bench(&r).await
}

#[tokio::test]
async fn a_parameter_reaches_the_reference_and_kernel_fn_through_the_worker() {
    let worker = Worker::new(options())
        .with_memory_limit_mb(12 * 1024)
        .with_kinds(
            Catalogue::builtin().clone().with(spec()),
            vec![case("registry.py")],
        );
    let b = PyWorkerBenchmarker::with_worker(std::sync::Arc::new(worker));
    let honours = case("honours.py");
    let dir = tempfile::tempdir().unwrap();
    let source = std::fs::read_to_string(&honours).unwrap();
    // takes the keyword but computes 2·x whatever it says
    let ignores = write(
        dir.path(),
        "ignores.py",
        &source.replace("float(factor), BLOCK", "2.0, BLOCK"),
    );
    // written before the kind had the parameter: no `factor` keyword at all
    let predates = write(
        dir.path(),
        "predates.py",
        &source
            .replace("def kernel_fn(x, factor=2.0):", "def kernel_fn(x):")
            .replace("float(factor), BLOCK", "2.0, BLOCK"),
    );

    for (path, params, pass) in [
        (&honours, vec![], true),
        (&honours, vec![("factor", json!(-0.5))], true),
        (&ignores, vec![], true),
        (&ignores, vec![("factor", json!(-0.5))], false),
        (&predates, vec![("factor", json!(2))], true),
    ] {
        let r = judge(&b, path, &params).await.expect("the harness runs");
        assert_eq!(
            r.correctness.is_pass(),
            pass,
            "{} {params:?}: {:?}",
            path.display(),
            r.correctness
        );
        if !pass {
            assert_eq!(r.failed_stage(), Some(Stage::Smoke), "{r:?}");
        }
    }

    // a kernel that cannot take the parameter is told which keyword to add
    let r = judge(&b, &predates, &[("factor", json!(3.0))])
        .await
        .unwrap();
    match &r.correctness {
        Correctness::Fail { stage, reason } => {
            assert_eq!(*stage, Stage::Smoke);
            assert!(
                reason.contains("kernel_fn takes no `factor` keyword")
                    && reason.contains("factor=3.0"),
                "{reason}"
            );
        }
        other => panic!("expected FAIL in smoke, got {other:?}"),
    }

    // a name the kind does not declare is the request's mistake, not a verdict
    let e = judge(&b, &honours, &[("scale", json!(3.0))])
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("toy_factor has no parameter `scale`; its parameters are factor"),
        "{e}"
    );
}

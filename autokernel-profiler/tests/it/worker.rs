//! A CPU profile of the bundled `tiny` model through a real bench worker.

use std::sync::Arc;

use autokernel_bench::{Worker, WorkerOptions, WorkerProgram};
use autokernel_core::{DType, Device, KernelKind, ModelSource, ModelSpec, ProfileError};
use autokernel_profiler::{plan, ChromeTraceProfiler};

fn profiler() -> ChromeTraceProfiler {
    let mut options = WorkerOptions::new(Device::Cpu);
    options.program = WorkerProgram {
        exe: env!("CARGO_BIN_EXE_autokernel-profiler-worker").into(),
        args: vec![],
    };
    options.python = Some(concat!(env!("CARGO_MANIFEST_DIR"), "/../.venv/bin/python").into());
    ChromeTraceProfiler::new(Arc::new(Worker::new(options)))
        .with_cache_dir(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("profiler-cache"))
        .with_iterations(1, 2)
}

fn spec(source: ModelSource) -> ModelSpec {
    ModelSpec::new(source, Device::Cpu)
        .with_kwargs(serde_json::json!({}))
        .with_dtype(DType::Float32)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_example_profiles_on_cpu_and_plans_targets() {
    let p = profiler();
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("profiles/trace.json");
    let (t, run) = p
        .profile_imported(
            &spec(ModelSource::Example {
                name: "tiny".into(),
            }),
            &trace,
        )
        .await
        .expect("profile tiny");
    assert!(trace.is_file());
    assert_eq!(run["device"], "cpu");
    assert_eq!(run["input_kind"], "token_ids");
    assert_eq!(run["input_shape"], serde_json::json!([1, 32]));
    let r = &t.report;
    assert!(r.device.starts_with("cpu"), "{}", r.device);
    assert!(r.total_device_time_us > 0.0);
    let kind_of = |op: &str| r.ops.iter().find(|o| o.op == op).map(|o| o.kind);
    // leaf modules name the groups; the SwiGLU MLP is one group; 4 of the 5 RMSNorm calls
    // (all but the first layer's input norm, after the embedding) take a residual add's
    // sum: the op is the fused chain
    assert_eq!(
        kind_of("RMSNorm"),
        Some(Some(KernelKind::AddRmsnorm)),
        "{r:#?}"
    );
    let chain = r
        .call_sites
        .iter()
        .find(|c| c.kind == "add_rmsnorm")
        .expect("the chain's call site");
    assert_eq!((chain.calls, chain.instances), (4, 4), "{chain:?}");
    assert!(chain.added_us.is_some_and(|us| us > 0.0), "{chain:?}");
    assert_eq!(kind_of("Linear"), Some(Some(KernelKind::Matmul)), "{r:#?}");
    assert_eq!(
        kind_of("SwiGLU"),
        Some(Some(KernelKind::FusedMlp)),
        "{r:#?}"
    );
    assert_eq!(
        kind_of("RotaryEmbedding"),
        Some(Some(KernelKind::RotaryEmbedding)),
        "{r:#?}"
    );
    let sdpa = r
        .ops
        .iter()
        .find(|o| o.kind == Some(KernelKind::FlashAttention))
        .expect("sdpa op");
    assert_eq!(sdpa.shapes[0], vec![1, 2, 32, 32]);
    let rms = r.ops.iter().find(|o| o.op == "RMSNorm").unwrap();
    assert_eq!(rms.shapes[0], vec![1, 32, 64]);
    let targets = plan(r, 20, DType::Float32);
    let swiglu = targets
        .iter()
        .find(|t| t.kind == KernelKind::FusedMlp)
        .expect("fused_mlp target");
    // x [1, 32, 64], gate weight [128, 64] → tokens 32, hidden 64, intermediate 128
    assert_eq!(
        swiglu.shapes,
        vec![autokernel_core::Shape(vec![32, 64, 128])]
    );
    let rms_t = targets
        .iter()
        .find(|t| t.kind == KernelKind::AddRmsnorm)
        .unwrap();
    assert_eq!(rms_t.shapes, vec![autokernel_core::Shape(vec![32, 64])]);
    // the norm's own parameters, decided by its forward on the sum
    assert_eq!(rms_t.params, chain.params.clone().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_class_is_a_model_error_naming_it() {
    let p = profiler();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.py");
    std::fs::write(
        &file,
        "import torch\nclass Net(torch.nn.Module):\n    pass\n",
    )
    .unwrap();
    let e = p
        .run_model(
            &spec(ModelSource::File {
                path: file,
                class: "Missing".into(),
            }),
            &dir.path().join("t.json"),
        )
        .await
        .unwrap_err();
    match e {
        ProfileError::Model(m) => assert!(
            m.contains("`Missing` not found") && m.contains("Net"),
            "{m}"
        ),
        other => panic!("not a model error: {other}"),
    }
}

/// `calls` counts calls as `key_averages` does, not the ops or kernels under them: per
/// forward the model calls one `nn.Linear` 5 times and its `nn.LayerNorm` and `torch.relu`
/// once each (linear runs transpose, addmm and more under it); two recorded passes make
/// 10, 2 and 2 calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_count_module_forwards_and_outermost_ops() {
    let p = profiler();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("calls.py");
    std::fs::write(
        &file,
        "import torch\n\
         class Net(torch.nn.Module):\n\
         \x20   def __init__(self):\n\
         \x20       super().__init__()\n\
         \x20       self.lin = torch.nn.Linear(16, 16)\n\
         \x20       self.norm = torch.nn.LayerNorm(16)\n\
         \x20   def forward(self, x):\n\
         \x20       for _ in range(5):\n\
         \x20           x = self.lin(x)\n\
         \x20       return torch.relu(self.norm(x))\n",
    )
    .unwrap();
    let mut model = spec(ModelSource::File {
        path: file,
        class: "Net".into(),
    });
    model.input_shape = vec![4, 8, 16];
    let (t, _) = p
        .profile_imported(&model, &dir.path().join("t.json"))
        .await
        .expect("profile");
    let calls = |name: &str| {
        t.report
            .ops
            .iter()
            .find(|o| o.op == name)
            .unwrap_or_else(|| panic!("no {name} in {:#?}", t.report.ops))
            .calls
    };
    assert_eq!(calls("Linear"), 10);
    assert_eq!(calls("LayerNorm"), 2);
    assert_eq!(calls("aten::relu"), 2);
}

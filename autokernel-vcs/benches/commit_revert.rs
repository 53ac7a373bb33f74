//! Commit + revert throughput of `GixStore`: 200 experiments (each a commit, then a revert,
//! with its note) on a fresh repository per sample.

use std::time::Duration;

use autokernel_core::{
    CommitId, DType, Decision, ExperimentDraft, ExperimentRecord, KernelKind, Shape, Target,
    VersionStore,
};
use autokernel_vcs::{GixStore, StoreOptions};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const EXPERIMENTS: u64 = 200;

fn record(n: u64, commit: &CommitId, decision: Decision) -> ExperimentRecord {
    ExperimentRecord {
        experiment: n,
        timestamp: String::new(),
        target: "t".into(),
        kind: KernelKind::Softmax,
        agent: "bench".into(),
        description: String::new(),
        commit: Some(commit.0.clone()),
        decision,
        correctness: autokernel_core::Verdict::Pass,
        latency_us: Some(1.0),
        throughput: None,
        throughput_unit: String::new(),
        pct_peak: None,
        speedup_vs_reference: None,
        peak_vram_mb: None,
        duration_s: 0.0,
        head_to_head: None,
        bench_samples_us: Vec::new(),
        bench_reference_samples_us: Vec::new(),
        config: None,
    }
}

async fn run(store: &mut GixStore, target: &Target) {
    let base = "KERNEL_KIND = \"softmax\"\n".to_string();
    let c = store
        .commit(&ExperimentDraft {
            experiment: 1,
            target,
            description: "baseline",
            agent: "bench",
            source: &base,
        })
        .await
        .expect("commit");
    store
        .keep(&record(1, &c, Decision::Baseline))
        .await
        .expect("keep");
    for n in 2..=EXPERIMENTS + 1 {
        let source = format!("{base}# candidate {n}\n");
        let c = store
            .commit(&ExperimentDraft {
                experiment: n,
                target,
                description: "candidate",
                agent: "bench",
                source: &source,
            })
            .await
            .expect("commit");
        store
            .revert(&record(n, &c, Decision::Revert))
            .await
            .expect("revert");
    }
}

fn commit_revert(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let target = Target::new("t", KernelKind::Softmax)
        .with_shapes(vec![Shape(vec![64, 64])])
        .with_dtype(DType::Float16);
    let mut group = c.benchmark_group("gix_store");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    group.throughput(Throughput::Elements(EXPERIMENTS));
    group.bench_function("commit_revert_200", |b| {
        b.iter_batched(
            || tempfile::tempdir().expect("temp dir"),
            |dir| {
                let mut store = GixStore::open(&dir.path().join("ws"), StoreOptions::new("bench"))
                    .expect("open");
                rt.block_on(run(&mut store, &target));
                drop(store);
                dir
            },
            criterion::BatchSize::PerIteration,
        );
    });
    group.finish();
}

criterion_group!(benches, commit_revert);
criterion_main!(benches);

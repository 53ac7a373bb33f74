//! The Rust judge on the sizes the `gpu` shape set hands it: every case of an experiment
//! compares one float32 host copy of the candidate's output with the reference, element by
//! element, so at 8192×8192 (67M elements) its speed is part of every experiment's
//! turnaround. Run: `cargo bench -p autokernel-bench --bench judge`.

use autokernel_bench::judge::{check_bitwise_identical, compare_outputs, CaseContext};
use autokernel_core::{DType, KernelKind, Shape, Stage};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ndarray::{ArrayD, IxDyn};

fn judge(c: &mut Criterion) {
    let (rows, cols) = (4096usize, 4096usize);
    let shape = Shape(vec![rows as u64, cols as u64]);
    // a reference with varied magnitudes and an output off by a few fp16 ulps
    let reference = ArrayD::from_shape_fn(IxDyn(&[rows, cols]), |ix| {
        ((ix[0] * 31 + ix[1] * 7) % 1000) as f32 / 250.0 - 2.0
    });
    let out = reference.mapv(|r| r * (1.0 + 1e-3));
    let ctx = CaseContext {
        kind: "rmsnorm",
        stage: Stage::ShapeSweep,
        shape: &shape,
        dtype: DType::Float16,
        mode: "normal",
        note: None,
    };
    let tol = KernelKind::Rmsnorm.tolerance(DType::Float16);
    let mut group = c.benchmark_group("judge_4096x4096");
    group.throughput(Throughput::Elements((rows * cols) as u64));
    group.sample_size(10);
    group.bench_function("compare_outputs", |b| {
        b.iter(|| compare_outputs(out.view(), reference.view(), DType::Float16, tol, &ctx).unwrap())
    });
    group.bench_function("check_bitwise_identical_3_runs", |b| {
        let runs = [out.view(), out.view(), out.view()];
        b.iter(|| check_bitwise_identical(&runs, &ctx).unwrap())
    });
    group.finish();
}

criterion_group!(benches, judge);
criterion_main!(benches);

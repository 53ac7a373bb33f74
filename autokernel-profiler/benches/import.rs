//! Import speed of a synthetic torch.profiler trace of about 210 MB (generated into
//! `$CARGO_TARGET_TMPDIR` on first use, then reused), in the layout kineto writes: per op a
//! `cpu_op` with its nested op (`Input Dims`, strides, types), a `cudaLaunchKernel` with
//! its `ac2g` flow pair, and the kernel; module ranges around groups of ops.
//!
//! `cargo bench -p autokernel-profiler --bench import` prints MB/s (criterion throughput)
//! and the peak resident memory of the process after importing. Compare with Python's json
//! module on the same file: `python benches/import_python.py <path printed here>`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const TARGET_BYTES: u64 = 210_000_000;

const KERNELS: [&str; 4] = [
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)",
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
    "pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)",
];
const OPS: [(&str, &str); 4] = [
    ("aten::linear", "aten::addmm"),
    ("aten::add", "aten::add_"),
    ("aten::layer_norm", "aten::native_layer_norm"),
    (
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_flash_attention",
    ),
];
const MODULES: [&str; 3] = [
    "nn.Module: Linear",
    "nn.Module: LayerNorm",
    "nn.Module: Attention",
];

fn cpu_op(w: &mut impl Write, name: &str, ts: f64, dur: f64, ext: u64) -> std::io::Result<()> {
    write!(
        w,
        "  {{\n    \"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"{name}\", \"pid\": 417, \"tid\": 417,\n    \"ts\": {ts:.3}, \"dur\": {dur:.3},\n    \"args\": {{\n      \"External id\": {ext},\"Sequence number\": {ext}, \"Fwd thread id\": 0, \"Record function id\": 0, \"Concrete Inputs\": [\"\", \"\", \"\"], \"Input type\": [\"c10::BFloat16\", \"c10::BFloat16\", \"c10::BFloat16\"], \"Input Strides\": [[3145728, 768, 1], [1, 768], [1]], \"Input Dims\": [[4, 4096, 768], [768, 3072], [3072]], \"Ev Idx\": {ext}\n    }}\n  }},\n"
    )
}

/// Writes the synthetic trace; returns its size in bytes.
fn generate(path: &Path) -> std::io::Result<u64> {
    let mut w = BufWriter::with_capacity(1 << 20, File::create(path)?);
    write!(
        w,
        "{{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [\n    {{\n      \"id\": 0, \"name\": \"NVIDIA H200\", \"totalGlobalMem\": 150109880320\n    }}\n  ],\n  \"record_shapes\": 1,\n  \"traceEvents\": [\n"
    )?;
    let (mut ts, mut gpu_ts, mut i) = (5_128_770_840_000.0_f64, 5_128_770_840_500.0_f64, 0u64);
    let mut written = 0u64;
    while written < TARGET_BYTES {
        if i % 16 == 0 {
            let m = MODULES[(i / 16) as usize % MODULES.len()];
            write!(
                w,
                "  {{\n    \"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"{m}\", \"pid\": 417, \"tid\": 417,\n    \"ts\": {ts:.3}, \"dur\": 950.000,\n    \"args\": {{\n      \"External id\": {}, \"Record function id\": 0, \"Ev Idx\": 0\n    }}\n  }},\n",
                1_000_000 + i
            )?;
        }
        let k = (i % 4) as usize;
        let (outer, inner) = OPS[k];
        let ext = 2 * i + 1;
        cpu_op(&mut w, outer, ts, 40.0, ext)?;
        cpu_op(&mut w, inner, ts + 5.0, 30.0, ext + 1)?;
        let corr = i + 10;
        write!(
            w,
            "  {{\n    \"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": 417, \"tid\": 417,\n    \"ts\": {:.3}, \"dur\": 8.000,\n    \"args\": {{\n      \"External id\": {}, \"cbid\": 211, \"correlation\": {corr}\n    }}\n  }},\n  {{\n    \"ph\": \"s\", \"id\": {corr}, \"pid\": 417, \"tid\": 417, \"ts\": {:.3}, \"cat\": \"ac2g\", \"name\": \"ac2g\"\n  }},\n",
            ts + 10.0,
            ext + 1,
            ts + 10.0
        )?;
        write!(
            w,
            "  {{\n    \"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"{}\", \"pid\": 0, \"tid\": 7,\n    \"ts\": {gpu_ts:.3}, \"dur\": {:.3},\n    \"args\": {{\n      \"External id\": {}, \"queued\": 0, \"device\": 0, \"context\": 1, \"stream\": 7, \"correlation\": {corr}, \"registers per thread\": 128, \"shared memory\": 0, \"blocks per SM\": 7.757576, \"warps per SM\": 31.030304, \"grid\": [1024, 1, 1], \"block\": [128, 1, 1], \"est. achieved occupancy %\": 48\n    }}\n  }},\n  {{\n    \"ph\": \"f\", \"id\": {corr}, \"pid\": 0, \"tid\": 7, \"ts\": {gpu_ts:.3}, \"cat\": \"ac2g\", \"name\": \"ac2g\", \"bp\": \"e\"\n  }},\n",
            KERNELS[k],
            1.0 + k as f64 * 0.5,
            ext + 1
        )?;
        ts += 60.0;
        gpu_ts += 5.0;
        i += 1;
        if i % 1024 == 0 {
            w.flush()?;
            written = std::fs::metadata(path)?.len();
        }
    }
    // a closing metadata event, then the end of the array and of the object
    write!(
        w,
        "  {{\n    \"name\": \"process_name\", \"ph\": \"M\", \"ts\": 0, \"pid\": 417, \"tid\": 0,\n    \"args\": {{\n      \"name\": \"python3\"\n    }}\n  }}\n  ],\n  \"traceName\": \"synthetic.json\"\n}}\n"
    )?;
    w.flush()?;
    Ok(std::fs::metadata(path)?.len())
}

fn trace_path() -> PathBuf {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("synthetic_trace_210mb_v2.json");
    let ok = std::fs::metadata(&path).is_ok_and(|m| m.len() >= TARGET_BYTES);
    if !ok {
        generate(&path).expect("write the synthetic trace");
    }
    path
}

/// Peak resident set size of this process, in MB (Linux `VmHWM`).
fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn bench_import(c: &mut Criterion) {
    let path = trace_path();
    let bytes = std::fs::metadata(&path).expect("trace").len();
    #[allow(clippy::print_stderr)]
    {
        eprintln!("trace: {} ({:.1} MB)", path.display(), bytes as f64 / 1e6);
    }
    let mut group = c.benchmark_group("trace_import");
    group.throughput(Throughput::Bytes(bytes));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.bench_function("import_210mb", |b| {
        b.iter(|| {
            let t = autokernel_profiler::import_trace(&path).expect("import");
            assert!(t.report.total_device_time_us > 0.0);
            t
        })
    });
    group.finish();
    #[allow(clippy::print_stderr)]
    if let Some(mb) = peak_rss_mb() {
        eprintln!(
            "peak resident memory of the bench process: {mb:.0} MB (trace {:.0} MB)",
            bytes as f64 / 1e6
        );
    }
}

/// Calibration on the same machine and file: serde_json skipping the whole file from
/// memory (`IgnoredAny`), the speed limit of any serde_json-based importer.
fn bench_serde_baseline(c: &mut Criterion) {
    let path = trace_path();
    let data = std::fs::read(&path).expect("read trace");
    let mut group = c.benchmark_group("trace_import");
    group.throughput(Throughput::Bytes(data.len() as u64));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.bench_function("serde_ignored_any_from_memory_210mb", |b| {
        b.iter(|| serde_json::from_slice::<serde::de::IgnoredAny>(&data).expect("parse"))
    });
    group.finish();
}

criterion_group!(benches, bench_import, bench_serde_baseline);
criterion_main!(benches);

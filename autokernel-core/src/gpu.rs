//! GPU specifications for the roofline: a table of known GPUs, looked up by the full name
//! PyTorch reports (`torch.cuda.get_device_name()`).
//!
//! Every figure is a vendor datasheet number for dense (not 2:4-sparse) math; the source of
//! each row is in its `source` field. Tensor-core FP16/BF16 figures are with FP32
//! accumulation, which is what Triton's `tl.dot` uses.

use serde::{Deserialize, Serialize};

/// Peak figures of one GPU model, used as the roofline's ceilings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSpec {
    /// The model's name, e.g. `NVIDIA H200 (SXM)`.
    pub name: String,
    /// Dense FP16/BF16 tensor-core peak, in TFLOP/s (1e12 FLOP/s), FP32 accumulation.
    pub fp16_tflops: f64,
    /// FP32 (non-tensor-core) peak, in TFLOP/s.
    pub fp32_tflops: f64,
    /// DRAM bandwidth, in GB/s (1e9 B/s): the datasheet figure, or a measured copy
    /// bandwidth when [`GpuSpec::with_measured_bandwidth`] was applied.
    pub mem_bandwidth_gb_s: f64,
    /// Last-level (L2) cache, in MB.
    pub l2_mb: f64,
    /// Where the figures come from.
    pub source: String,
}

impl GpuSpec {
    /// Replaces the datasheet bandwidth with one measured on the machine (a device-to-device
    /// copy, bytes read plus written over time), which is the ceiling a kernel can reach.
    pub fn with_measured_bandwidth(mut self, copy_gb_s: f64) -> GpuSpec {
        self.mem_bandwidth_gb_s = copy_gb_s;
        self.source = format!("{}; bandwidth measured: {copy_gb_s} GB/s copy", self.source);
        self
    }

    /// Peak compute for `dtype` in TFLOP/s: the tensor-core figure for 16-bit types, the
    /// FP32 figure for float32 (the precision policy disables TF32).
    pub fn peak_tflops(&self, dtype: crate::DType) -> f64 {
        match dtype {
            crate::DType::Float32 => self.fp32_tflops,
            _ => self.fp16_tflops,
        }
    }

    /// The roofline's ridge point in FLOP/byte: peak FLOP/s over bandwidth. A kernel whose
    /// arithmetic intensity is below it is memory-bound.
    ///
    /// # Source
    /// Williams, Waterman & Patterson, "Roofline", CACM 52(4), 2009.
    pub fn ridge_point(&self, dtype: crate::DType) -> f64 {
        self.peak_tflops(dtype) * 1e12 / (self.mem_bandwidth_gb_s * 1e9)
    }

    /// Percentage of this GPU's ceiling reached by `throughput` given in `unit`
    /// (`GB/s` against bandwidth, `TFLOP/s` against [`Self::peak_tflops`]).
    pub fn pct_peak(&self, throughput: f64, unit: &str, dtype: crate::DType) -> f64 {
        let ceiling = if unit == "GB/s" {
            self.mem_bandwidth_gb_s
        } else {
            self.peak_tflops(dtype)
        };
        100.0 * throughput / ceiling
    }
}

/// The share of the datasheet DRAM bandwidth a kernel can be expected to reach: a
/// device-to-device copy moved 4244 of the H200's 4800 GB/s (docs/kernels.md, measured
/// 2026-11-29).
pub const REACHABLE_BANDWIDTH_FRACTION: f64 = 0.88;

/// The share of the datasheet tensor-core peak a kernel can be expected to reach: cuBLAS's
/// fp16 matmul at 4096³ ran 686 of the H200's 989 TFLOP/s (docs/benchmarks.md).
pub const REACHABLE_COMPUTE_FRACTION: f64 = 0.69;

impl GpuSpec {
    /// The shortest time, in µs, one call moving `bytes` and computing `flops` in `dtype`
    /// can be expected to take: the roofline's bound, `max(flops / peak, bytes /
    /// bandwidth)`, at [`REACHABLE_COMPUTE_FRACTION`] of the peak and
    /// [`REACHABLE_BANDWIDTH_FRACTION`] of the bandwidth. Launch overhead and wave
    /// quantisation are not counted, so small problems read optimistic.
    pub fn reachable_us(&self, flops: f64, bytes: f64, dtype: crate::DType) -> f64 {
        let compute = flops / (self.peak_tflops(dtype) * REACHABLE_COMPUTE_FRACTION * 1e6);
        let memory = bytes / (self.mem_bandwidth_gb_s * REACHABLE_BANDWIDTH_FRACTION * 1e3);
        compute.max(memory)
    }
}

/// The outcome of looking a GPU up by name.
#[derive(Debug, Clone, PartialEq)]
pub enum GpuLookup {
    /// The name matched a row of the table.
    Known(GpuSpec),
    /// No row matched: the roofline needs figures from the user (`autokernel.toml`
    /// `[gpu]` section) or a measurement; autokernel never guesses them.
    Unknown {
        /// The name as reported.
        reported_name: String,
    },
}

impl GpuLookup {
    /// The spec when known.
    pub fn spec(&self) -> Option<&GpuSpec> {
        match self {
            GpuLookup::Known(s) => Some(s),
            GpuLookup::Unknown { .. } => None,
        }
    }

    /// A message for the user when unknown: what is missing and how to supply it.
    pub fn hint(&self) -> Option<String> {
        match self {
            GpuLookup::Known(_) => None,
            GpuLookup::Unknown { reported_name } => Some(format!(
                "GPU `{reported_name}` is not in autokernel's table, so % of peak is not reported; \
                 add a [gpu] section (fp16_tflops, fp32_tflops, mem_bandwidth_gb_s, l2_mb) to \
                 autokernel.toml in the workspace"
            )),
        }
    }
}

struct Row {
    name: &'static str,
    /// Each inner list is a set of tokens that must all appear in the reported name.
    patterns: &'static [&'static [&'static str]],
    fp16: f64,
    fp32: f64,
    bw: f64,
    l2: f64,
    source: &'static str,
}

// More specific rows come first: `H100 PCIe` before `H100`, `H200 NVL` before `H200`.
// Matching is by whole tokens, so `L4` never matches `L40S`.
const TABLE: &[Row] = &[
    Row { name: "NVIDIA H100 PCIe", patterns: &[&["h100", "pcie"]], fp16: 756.0, fp32: 51.0, bw: 2000.0, l2: 50.0,
          source: "NVIDIA H100 Tensor Core GPU datasheet (2023), PCIe column" },
    Row { name: "NVIDIA H100 NVL", patterns: &[&["h100", "nvl"]], fp16: 835.0, fp32: 60.0, bw: 3900.0, l2: 50.0,
          source: "NVIDIA H100 Tensor Core GPU datasheet (2023), H100 NVL column" },
    Row { name: "NVIDIA H100 SXM", patterns: &[&["h100", "hbm3"], &["h100", "sxm5"], &["h100", "sxm"]], fp16: 989.4, fp32: 67.0, bw: 3350.0, l2: 50.0,
          source: "NVIDIA H100 Tensor Core GPU datasheet (2023), SXM column" },
    Row { name: "NVIDIA H200 NVL", patterns: &[&["h200", "nvl"]], fp16: 835.0, fp32: 60.0, bw: 4800.0, l2: 50.0,
          source: "NVIDIA H200 Tensor Core GPU datasheet (2024), H200 NVL column" },
    Row { name: "NVIDIA H200 SXM", patterns: &[&["h200"]], fp16: 989.4, fp32: 67.0, bw: 4800.0, l2: 60.0,
          source: "NVIDIA H200 Tensor Core GPU datasheet (2024), SXM column; L2 60 MiB as torch reports it on the lent H200 (shared/GPU.md, 2026-11-29)" },
    Row { name: "NVIDIA B200", patterns: &[&["b200"]], fp16: 2250.0, fp32: 75.0, bw: 8000.0, l2: 126.0,
          source: "NVIDIA HGX B200 datasheet (2024), per GPU, dense" },
    Row { name: "NVIDIA A100 SXM", patterns: &[&["a100", "sxm4"], &["a100", "sxm"]], fp16: 312.0, fp32: 19.5, bw: 2039.0, l2: 40.0,
          source: "NVIDIA A100 Tensor Core GPU datasheet (2021), 80GB SXM column" },
    Row { name: "NVIDIA A100 PCIe", patterns: &[&["a100", "pcie"]], fp16: 312.0, fp32: 19.5, bw: 1935.0, l2: 40.0,
          source: "NVIDIA A100 Tensor Core GPU datasheet (2021), 80GB PCIe column" },
    Row { name: "NVIDIA L40S", patterns: &[&["l40s"]], fp16: 362.05, fp32: 91.6, bw: 864.0, l2: 96.0,
          source: "NVIDIA L40S datasheet (2023)" },
    Row { name: "NVIDIA L40", patterns: &[&["l40"]], fp16: 181.05, fp32: 90.5, bw: 864.0, l2: 96.0,
          source: "NVIDIA L40 datasheet (2022), FP16 tensor with FP32 accumulate" },
    Row { name: "NVIDIA L4", patterns: &[&["l4"]], fp16: 121.0, fp32: 30.3, bw: 300.0, l2: 48.0,
          source: "NVIDIA L4 datasheet (2023)" },
    Row { name: "NVIDIA A10", patterns: &[&["a10"]], fp16: 125.0, fp32: 31.2, bw: 600.0, l2: 6.0,
          source: "NVIDIA A10 datasheet (2021)" },
    Row { name: "NVIDIA GeForce RTX 4090", patterns: &[&["rtx", "4090"]], fp16: 165.2, fp32: 82.6, bw: 1008.0, l2: 72.0,
          source: "NVIDIA Ada Lovelace architecture whitepaper v1.01 (2022), FP16 tensor with FP32 accumulate" },
    Row { name: "NVIDIA GeForce RTX 4080", patterns: &[&["rtx", "4080"]], fp16: 97.5, fp32: 48.7, bw: 716.8, l2: 64.0,
          source: "NVIDIA Ada Lovelace architecture whitepaper v1.01 (2022), FP16 tensor with FP32 accumulate" },
    Row { name: "NVIDIA GeForce RTX 3090", patterns: &[&["rtx", "3090"]], fp16: 71.0, fp32: 35.6, bw: 936.0, l2: 6.0,
          source: "NVIDIA Ampere GA102 whitepaper v2.0 (2021), FP16 tensor with FP32 accumulate" },
    Row { name: "NVIDIA GeForce RTX 3080", patterns: &[&["rtx", "3080"]], fp16: 59.5, fp32: 29.8, bw: 760.0, l2: 5.0,
          source: "NVIDIA Ampere GA102 whitepaper v2.0 (2021), FP16 tensor with FP32 accumulate" },
    Row { name: "AMD Instinct MI300X", patterns: &[&["mi300x"]], fp16: 1307.4, fp32: 163.4, bw: 5300.0, l2: 32.0,
          source: "AMD Instinct MI300X data sheet (2023); L2 is 4 MB per XCD x 8 (256 MB Infinity Cache beyond it)" },
    Row { name: "AMD Instinct MI325X", patterns: &[&["mi325x"]], fp16: 1307.4, fp32: 163.4, bw: 6000.0, l2: 32.0,
          source: "AMD Instinct MI325X data sheet (2024)" },
    Row { name: "AMD Instinct MI350X", patterns: &[&["mi350x"]], fp16: 2300.0, fp32: 144.2, bw: 8000.0, l2: 32.0,
          source: "AMD Instinct MI350X data sheet (2025)" },
    Row { name: "AMD Instinct MI355X", patterns: &[&["mi355x"]], fp16: 2516.6, fp32: 157.3, bw: 8000.0, l2: 32.0,
          source: "AMD Instinct MI355X data sheet (2025)" },
];

fn tokens(name: &str) -> Vec<String> {
    name.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_ascii_lowercase)
        .collect()
}

/// Looks a GPU up by the full name PyTorch reports, e.g. `NVIDIA H100 80GB HBM3` (SXM) or
/// `NVIDIA H100 PCIe`. Unknown names give [`GpuLookup::Unknown`], never a default.
pub fn lookup_gpu(reported_name: &str) -> GpuLookup {
    let toks = tokens(reported_name);
    let hit = TABLE.iter().find(|row| {
        row.patterns
            .iter()
            .any(|p| p.iter().all(|want| toks.iter().any(|t| t == want)))
    });
    match hit {
        Some(r) => GpuLookup::Known(GpuSpec {
            name: r.name.to_string(),
            fp16_tflops: r.fp16,
            fp32_tflops: r.fp32,
            mem_bandwidth_gb_s: r.bw,
            l2_mb: r.l2,
            source: r.source.to_string(),
        }),
        None => GpuLookup::Unknown {
            reported_name: reported_name.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    fn name_of(reported: &str) -> Option<String> {
        lookup_gpu(reported).spec().map(|s| s.name.clone())
    }

    #[test]
    fn h100_variants_are_told_apart_by_full_name() {
        assert_eq!(name_of("NVIDIA H100 80GB HBM3").unwrap(), "NVIDIA H100 SXM");
        assert_eq!(name_of("NVIDIA H100 PCIe").unwrap(), "NVIDIA H100 PCIe");
        assert_eq!(name_of("NVIDIA H100 NVL").unwrap(), "NVIDIA H100 NVL");
    }

    #[test]
    fn h200_and_ada_names_match_whole_tokens() {
        assert_eq!(name_of("NVIDIA H200").unwrap(), "NVIDIA H200 SXM");
        assert_eq!(name_of("NVIDIA H200 NVL").unwrap(), "NVIDIA H200 NVL");
        assert_eq!(name_of("NVIDIA L40S").unwrap(), "NVIDIA L40S");
        assert_eq!(name_of("NVIDIA L4").unwrap(), "NVIDIA L4");
        assert_eq!(name_of("NVIDIA A100-SXM4-80GB").unwrap(), "NVIDIA A100 SXM");
        assert_eq!(
            name_of("NVIDIA A100 80GB PCIe").unwrap(),
            "NVIDIA A100 PCIe"
        );
        assert_eq!(
            name_of("NVIDIA GeForce RTX 4090").unwrap(),
            "NVIDIA GeForce RTX 4090"
        );
        assert_eq!(
            name_of("AMD Instinct MI300X").unwrap(),
            "AMD Instinct MI300X"
        );
    }

    #[test]
    fn unknown_gpu_is_explicit_and_says_what_to_do() {
        let l = lookup_gpu("NVIDIA GeForce GTX 1080");
        assert!(l.spec().is_none());
        assert!(l.hint().unwrap().contains("autokernel.toml"));
        // a bare "H100" without a form factor is ambiguous: not guessed
        assert!(lookup_gpu("NVIDIA H100").spec().is_none());
    }

    #[test]
    fn measured_bandwidth_overrides_the_table() {
        let s = lookup_gpu("NVIDIA H200").spec().unwrap().clone();
        let m = s.with_measured_bandwidth(4244.0);
        assert_eq!(m.mem_bandwidth_gb_s, 4244.0);
        // 2122 GB/s is half of the measured ceiling
        assert!((m.pct_peak(2122.0, "GB/s", DType::Float16) - 50.0).abs() < 1e-9);
        // ridge point: 989.4e12 / 4244e9 = 233.13 FLOP/B
        assert!((m.ridge_point(DType::Float16) - 233.129_123).abs() < 1e-3);
    }
}

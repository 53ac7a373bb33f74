//! The trace cases of `../shared/cases/traces/` (see its README for where each came from).

use autokernel_core::KernelKind;

use crate::util::{close, import_case, op};

/// A real torch 2.11 trace from an H200: a Triton kernel launched through the driver API
/// with no External id, cuBLAS kernels under `aten::mm`, a clamp kernel under
/// `aten::relu` → `aten::clamp_min`, and a 28840 µs `gpu_user_annotation` span.
#[test]
fn h200_trace_total_is_kernel_time_only() {
    let t = import_case("triton_driver_launch.json");
    // 1.984 + 4.32 + 2.688 + 1.152; the 28840 µs annotation span is not work
    assert!(
        close(t.report.total_device_time_us, 10.144),
        "{}",
        t.report.total_device_time_us
    );
    assert_eq!(t.gpu_annotations, 1);
    assert!(close(t.report.coverage, 1.0));
    assert_eq!(t.report.device, "cuda: NVIDIA H200");
    assert_eq!(
        t.gpu.as_ref().map(|g| g.name.as_str()),
        Some("NVIDIA H200 SXM")
    );
}

#[test]
fn h200_trace_mm_has_two_matmul_kernels() {
    let t = import_case("triton_driver_launch.json");
    let mm = op(&t, "aten::mm");
    assert!(close(mm.device_time_us, 7.008), "{}", mm.device_time_us);
    assert_eq!(mm.calls, 2);
    assert_eq!(mm.kernels.len(), 2);
    assert_eq!(mm.kind, Some(KernelKind::Matmul));
    assert_eq!(mm.shapes, vec![vec![256, 256], vec![256, 256]]);
    assert_eq!(mm.rank, 1);
}

#[test]
fn h200_trace_driver_launch_joins_by_containment() {
    let t = import_case("triton_driver_launch.json");
    let region = op(&t, "my_region");
    assert!(close(region.device_time_us, 1.984));
    assert_eq!(region.kernels, vec!["scale_k".to_string()]);
    assert_eq!(region.kind, None);
}

#[test]
fn h200_trace_clamp_kernel_goes_to_the_outermost_aten_op() {
    let t = import_case("triton_driver_launch.json");
    // the launch carries External id 8 = aten::clamp_min, which runs inside aten::relu
    let relu = op(&t, "aten::relu");
    assert!(close(relu.device_time_us, 1.152));
    assert_eq!(relu.calls, 1);
    assert_eq!(t.report.ops.len(), 3);
    let fractions: f64 = t.report.ops.iter().map(|o| o.fraction).sum();
    assert!(close(fractions, 1.0));
}

/// `export_chrome_trace` writes names with raw newlines, raw quotes and lone backslashes.
#[test]
fn raw_control_chars_are_repaired_with_a_warning() {
    let t = import_case("raw_control_chars.json");
    assert!(close(t.report.total_device_time_us, 3.0));
    assert_eq!(t.report.ops.len(), 1);
    assert_eq!(t.report.ops[0].kernels, vec!["my_kernel".to_string()]);
    assert!(
        t.report
            .warnings
            .iter()
            .any(|w| w.contains("repaired 2 event")),
        "{:?}",
        t.report.warnings
    );
}

/// The same trace with a 0xFF byte in a name.
#[test]
fn invalid_utf8_is_decoded_lossily_with_a_warning() {
    let t = import_case("invalid_utf8.json");
    assert!(close(t.report.total_device_time_us, 3.0));
    assert_eq!(t.report.ops.len(), 1);
    assert!(
        t.report
            .warnings
            .iter()
            .any(|w| w.contains("repaired 2 event")),
        "{:?}",
        t.report.warnings
    );
}

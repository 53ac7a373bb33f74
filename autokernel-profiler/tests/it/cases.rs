//! The trace regression cases: the in-repo ones of `tests/cases/traces/` (always; see its
//! README), then the same checks over `../shared/cases/traces/` when that folder is there
//! (skipped with a printed line when it is not).

use autokernel_core::KernelKind;
use autokernel_profiler::ImportedTrace;

use crate::util::{cases_dir, close, import_case, import_file, op, shared_cases_dir};

/// Events the import says it repaired or skipped, summed from its warnings ("repaired N
/// event(s) …", "skipped N event(s) …"): either is a right answer for malformed text, as
/// long as every such event is counted and the import goes on.
fn malformed_events_reported(t: &ImportedTrace) -> u64 {
    t.report
        .warnings
        .iter()
        .filter_map(|w| {
            let rest = w
                .strip_prefix("repaired ")
                .or_else(|| w.strip_prefix("skipped "))?;
            rest.split(' ').next()?.parse::<u64>().ok()
        })
        .sum()
}

/// A trace with malformed names imported: `total_us` of device time in one op holding
/// `kernel` (named `op_name` when given), and `malformed` events reported.
fn check_malformed_import(
    t: &ImportedTrace,
    total_us: f64,
    op_name: Option<&str>,
    kernel: &str,
    malformed: u64,
) {
    assert!(
        close(t.report.total_device_time_us, total_us),
        "{}",
        t.report.total_device_time_us
    );
    assert_eq!(t.report.ops.len(), 1, "{:#?}", t.report.ops);
    let o = &t.report.ops[0];
    if let Some(name) = op_name {
        assert_eq!(o.op, name);
    }
    assert_eq!(o.kernels, vec![kernel.to_string()]);
    assert!(close(o.device_time_us, total_us), "{}", o.device_time_us);
    assert_eq!(
        malformed_events_reported(t),
        malformed,
        "{:?}",
        t.report.warnings
    );
}

/// A Triton-driver-style trace: kernel time only in the total; the matmul op with its
/// kernels by External id; the driver launch (no External id) in the named region.
struct DriverTrace<'a> {
    total_us: f64,
    matmul_op: &'a str,
    matmul_us: f64,
    matmul_kernels: usize,
    region: &'a str,
    region_us: f64,
    region_kernel: &'a str,
    /// The region is an annotation, so its kind comes from its kernel's name, if any.
    region_kind: Option<KernelKind>,
    ops: usize,
}

fn check_driver_trace(t: &ImportedTrace, e: &DriverTrace<'_>) {
    assert!(
        close(t.report.total_device_time_us, e.total_us),
        "{}",
        t.report.total_device_time_us
    );
    assert_eq!(
        t.gpu_annotations, 1,
        "one gpu_user_annotation span, not work"
    );
    assert!(close(t.report.coverage, 1.0), "{}", t.report.coverage);
    assert_eq!(t.report.ops.len(), e.ops, "{:#?}", t.report.ops);
    let fractions: f64 = t.report.ops.iter().map(|o| o.fraction).sum();
    assert!(close(fractions, 1.0), "{fractions}");

    let mm = op(t, e.matmul_op);
    assert!(
        close(mm.device_time_us, e.matmul_us),
        "{}",
        mm.device_time_us
    );
    assert_eq!(mm.kernels.len(), e.matmul_kernels, "{:?}", mm.kernels);
    assert_eq!(mm.kind, Some(KernelKind::Matmul));

    let region = op(t, e.region);
    assert!(
        close(region.device_time_us, e.region_us),
        "{}",
        region.device_time_us
    );
    assert_eq!(region.kernels, vec![e.region_kernel.to_string()]);
    assert_eq!(region.kind, e.region_kind);
}

// ---- in-repo cases (tests/cases/traces/) -------------------------------------------------

/// trace_with_raw_newlines_in_names.json: three names with raw newline/tab, raw quotes
/// and lone backslashes, none of them on the kernel's path. By hand: one kernel of 2.625 µs,
/// launched with External id 2 = `aten::mul`; three malformed events.
#[test]
fn raw_newlines_quotes_and_backslashes_are_repaired_and_counted() {
    let t = import_case("trace_with_raw_newlines_in_names.json");
    check_malformed_import(&t, 2.625, Some("aten::mul"), "vectorized_scale_kernel", 3);
}

/// trace_with_invalid_utf8_in_names.json: 0xFF 0xFE, Latin-1 0xE9 and 0xC3 0x28 (the last
/// beside a lone backslash) in three names. The driver launch lies inside the annotation
/// `r\xE9sum\xE9_block` and `train.py(7)`, not inside the third range, so the 5.5 µs kernel
/// is named after the annotation, each invalid byte decoded as one U+FFFD.
#[test]
fn invalid_utf8_is_decoded_lossily_and_counted() {
    let t = import_case("trace_with_invalid_utf8_in_names.json");
    check_malformed_import(
        &t,
        5.5,
        Some("r\u{FFFD}sum\u{FFFD}_block"),
        "_layer_scale_kernel",
        3,
    );
}

/// One event whose name holds both a raw newline and invalid UTF-8 is one repaired event
/// (it was counted twice: the raw control character on serde_json's fast path, then the
/// lossy decoding of the name).
#[test]
fn an_event_with_two_kinds_of_malformed_text_is_counted_once() {
    let bytes: &[u8] = b"{\"traceEvents\":[\n\
        {\"ph\":\"X\",\"cat\":\"python_function\",\"name\":\"caf\xc3\x28\n(3): run\",\"pid\":1,\"tid\":1,\"ts\":1.0,\"dur\":9.0},\n\
        {\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"k\",\"pid\":0,\"tid\":7,\"ts\":2.0,\"dur\":1.5,\"args\":{\"correlation\":3}}\n]}";
    let t = autokernel_profiler::import_trace_from(bytes, "t.json".as_ref()).unwrap();
    check_malformed_import(&t, 1.5, Some("k"), "k", 1);
}

/// driver_launch_without_external_id.json. By hand from the file: kernels 3.456 µs
/// (`_rope_fwd_kernel`, driver launch, correlation 4, no External id) + 12.672 µs (cuBLAS,
/// External id 4 = `aten::addmm` inside `aten::linear`) = 16.128 µs; the 2.25 µs memcpy
/// and the 4096 µs `gpu_user_annotation` are not kernels. The driver launch lies inside
/// `model.py(42): forward` inside the annotation `attn_block`, outside `aten::linear`.
#[test]
fn driver_launch_trace_attributes_both_kernels() {
    let t = import_case("driver_launch_without_external_id.json");
    check_driver_trace(
        &t,
        &DriverTrace {
            total_us: 16.128,
            matmul_op: "aten::linear",
            matmul_us: 12.672,
            matmul_kernels: 1,
            region: "attn_block",
            region_us: 3.456,
            region_kernel: "_rope_fwd_kernel",
            // `rope_` in the kernel's name (classify::kind_of_kernel's rule)
            region_kind: Some(KernelKind::RotaryEmbedding),
            ops: 2,
        },
    );
}

/// The same file: the driver launch's correlation id (4) equals `aten::addmm`'s External
/// id; the two id spaces must not be mixed, so `aten::linear` keeps its one kernel and the
/// shares are 12.672/16.128 = 11/14 and 3.456/16.128 = 3/14.
#[test]
fn driver_launch_trace_keeps_correlation_and_external_ids_apart() {
    let t = import_case("driver_launch_without_external_id.json");
    let linear = op(&t, "aten::linear");
    assert_eq!(linear.calls, 1);
    assert_eq!(linear.rank, 1);
    assert!(close(linear.fraction, 11.0 / 14.0), "{}", linear.fraction);
    assert!(close(op(&t, "attn_block").fraction, 3.0 / 14.0));
    // the Input Dims of aten::linear, the op that names the group
    assert_eq!(linear.shapes, vec![vec![8, 64], vec![128, 64], vec![128]]);
}

/// The same file: the copy is counted apart from kernels, and the device named from
/// `deviceProperties` (an A100-SXM4-80GB is the table's "NVIDIA A100 SXM").
#[test]
fn driver_launch_trace_reports_copies_and_the_gpu() {
    let t = import_case("driver_launch_without_external_id.json");
    assert_eq!(t.memcpy.events, 1);
    assert!(close(t.memcpy.time_us, 2.25), "{}", t.memcpy.time_us);
    assert_eq!(t.report.device, "cuda: NVIDIA A100-SXM4-80GB");
    assert_eq!(
        t.gpu.as_ref().map(|g| g.name.as_str()),
        Some("NVIDIA A100 SXM")
    );
}

/// Every file in the folder is covered above and listed in its README.
#[test]
fn every_in_repo_trace_case_is_listed_in_the_readme() {
    let dir = cases_dir("traces");
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name != "README.md" {
            assert!(readme.contains(&format!("`{name}`")), "{name} not listed");
        }
    }
}

// ---- shared cases (../shared/cases/traces/, values from its README) -----------------------

fn import_shared(name: &str, test: &str) -> Option<ImportedTrace> {
    shared_cases_dir("traces", test).map(|d| import_file(&d.join(name)))
}

/// triton_driver_launch.json, a real torch 2.11 trace from an H200: 1.984 + 4.32 + 2.688 +
/// 1.152 = 10.144 µs of kernels; `aten::mm` 7.008 µs in 2 kernels; `scale_k` under
/// `my_region`.
#[test]
fn shared_h200_trace_attributes_every_kernel() {
    let Some(t) = import_shared("triton_driver_launch.json", "shared_h200_trace") else {
        return;
    };
    check_driver_trace(
        &t,
        &DriverTrace {
            total_us: 10.144,
            matmul_op: "aten::mm",
            matmul_us: 7.008,
            matmul_kernels: 2,
            region: "my_region",
            region_us: 1.984,
            region_kernel: "scale_k",
            region_kind: None,
            ops: 3,
        },
    );
    // the launch carries External id 8 = aten::clamp_min, which runs inside aten::relu
    let relu = op(&t, "aten::relu");
    assert!(close(relu.device_time_us, 1.152));
    assert_eq!(relu.calls, 1);
    let mm = op(&t, "aten::mm");
    assert_eq!(mm.shapes, vec![vec![256, 256], vec![256, 256]]);
    assert_eq!(mm.rank, 1);
    assert_eq!(t.report.device, "cuda: NVIDIA H200");
    assert_eq!(
        t.gpu.as_ref().map(|g| g.name.as_str()),
        Some("NVIDIA H200 SXM")
    );
}

/// raw_control_chars.json: one kernel `my_kernel` of 3.0 µs (no launch record, so named
/// after itself); its two python_function events hold the malformed text.
#[test]
fn shared_raw_control_chars_are_repaired_and_counted() {
    let Some(t) = import_shared("raw_control_chars.json", "shared_raw_control_chars") else {
        return;
    };
    check_malformed_import(&t, 3.0, None, "my_kernel", 2);
}

/// invalid_utf8.json: the same with a 0xFF byte inside the second name.
#[test]
fn shared_invalid_utf8_is_decoded_lossily_and_counted() {
    let Some(t) = import_shared("invalid_utf8.json", "shared_invalid_utf8") else {
        return;
    };
    check_malformed_import(&t, 3.0, None, "my_kernel", 2);
}

//! Hand-built traces, one rule each. Times are in µs; pid 1/tid 1 is the Python thread,
//! pid 0/tid 7 a CUDA stream.

use std::io::Write;

use autokernel_core::{KernelKind, ProfileError};
use autokernel_profiler::{import_trace, import_trace_from};

use crate::util::{close, import_text, op};

fn x(cat: &str, name: &str, pid: i64, tid: i64, ts: f64, dur: f64, args: &str) -> String {
    format!(
        r#"{{"ph":"X","cat":"{cat}","name":"{name}","pid":{pid},"tid":{tid},"ts":{ts},"dur":{dur},"args":{{{args}}}}}"#
    )
}

fn cpu_op(name: &str, ts: f64, dur: f64, ext: u64, dims: &str) -> String {
    x(
        "cpu_op",
        name,
        1,
        1,
        ts,
        dur,
        &format!(r#""External id":{ext},"Input Dims":{dims}"#),
    )
}

fn kernel(name: &str, ts: f64, dur: f64, corr: u64) -> String {
    x(
        "kernel",
        name,
        0,
        7,
        ts,
        dur,
        &format!(r#""correlation":{corr}"#),
    )
}

fn launch(cat: &str, ts: f64, corr: u64, ext: Option<u64>) -> String {
    let name = if cat == "cuda_driver" {
        "cuLaunchKernel"
    } else {
        "cudaLaunchKernel"
    };
    let ext = ext
        .map(|e| format!(r#","External id":{e}"#))
        .unwrap_or_default();
    x(
        cat,
        name,
        1,
        1,
        ts,
        1.0,
        &format!(r#""correlation":{corr}{ext}"#),
    )
}

fn trace(events: &[String]) -> String {
    format!(
        r#"{{"schemaVersion":1,"traceEvents":[{}]}}"#,
        events.join(",\n")
    )
}

#[test]
fn annotations_and_memcpy_are_not_kernel_time() {
    let t = import_text(&trace(&[
        cpu_op("aten::mm", 10.0, 20.0, 1, "[[4,4],[4,4]]"),
        launch("cuda_runtime", 11.0, 100, Some(1)),
        kernel("gemm_k", 40.0, 5.0, 100),
        x("gpu_user_annotation", "region", 0, 7, 40.0, 900.0, ""),
        x(
            "gpu_memcpy",
            "Memcpy HtoD (Pageable -> Device)",
            0,
            7,
            50.0,
            7.0,
            r#""correlation":101"#,
        ),
        x(
            "gpu_memset",
            "Memset (Device)",
            0,
            7,
            60.0,
            2.0,
            r#""correlation":102"#,
        ),
    ]));
    assert!(close(t.report.total_device_time_us, 5.0));
    assert_eq!(t.report.ops.len(), 1);
    assert_eq!((t.memcpy.events, t.memset.events), (1, 1));
    assert!(close(t.memcpy.time_us, 7.0) && close(t.memset.time_us, 2.0));
    assert_eq!(t.to_json(0)["memcpy"]["events"], 1);
}

#[test]
fn kernels_join_launches_from_runtime_and_driver_alike() {
    let t = import_text(&trace(&[
        cpu_op("aten::mm", 10.0, 20.0, 1, "[[4,4],[4,4]]"),
        launch("cuda_runtime", 11.0, 100, Some(1)),
        x("user_annotation", "triton_region", 1, 1, 50.0, 20.0, ""),
        launch("cuda_driver", 55.0, 101, None),
        kernel("gemm_k", 40.0, 5.0, 100),
        kernel("triton_k", 80.0, 3.0, 101),
    ]));
    assert!(close(op(&t, "aten::mm").device_time_us, 5.0));
    assert!(close(op(&t, "triton_region").device_time_us, 3.0));
    assert!(close(t.report.coverage, 1.0));
}

#[test]
fn external_id_wins_over_time_containment() {
    // the launch lies inside aten::add's time range, but its External id names aten::mm
    let t = import_text(&trace(&[
        cpu_op("aten::mm", 0.5, 5.0, 1, "[[4,4],[4,4]]"),
        cpu_op("aten::add", 10.0, 20.0, 2, "[[4,4],[4,4]]"),
        launch("cuda_runtime", 11.0, 100, Some(1)),
        kernel("k", 40.0, 5.0, 100),
    ]));
    assert_eq!(t.report.ops.len(), 1);
    assert!(close(op(&t, "aten::mm").device_time_us, 5.0));
}

#[test]
fn correlation_ids_are_never_matched_against_external_ids() {
    // correlation 2 has a launch without External id inside aten::add; an unrelated op
    // carries External id 2 and must not receive the kernel
    let t = import_text(&trace(&[
        cpu_op("aten::mm", 0.5, 5.0, 2, "[[4,4],[4,4]]"),
        cpu_op("aten::add", 10.0, 20.0, 3, "[[8]]"),
        launch("cuda_runtime", 11.0, 2, None),
        kernel("k", 40.0, 5.0, 2),
    ]));
    assert_eq!(t.report.ops.len(), 1);
    assert!(close(op(&t, "aten::add").device_time_us, 5.0));
    assert_eq!(op(&t, "aten::add").shapes, vec![vec![8]]);
}

#[test]
fn containment_uses_the_launching_thread_only() {
    // an op on another thread (tid 2) covers the launch time; the launch is on tid 1
    let t = import_text(&trace(&[
        x("cpu_op", "aten::other_thread", 1, 2, 0.0, 100.0, ""),
        cpu_op("aten::relu", 10.0, 20.0, 1, "[[16]]"),
        x("cpu_op", "aten::clamp_min", 1, 1, 12.0, 10.0, ""),
        launch("cuda_runtime", 13.0, 100, None),
        kernel("elementwise", 40.0, 2.0, 100),
    ]));
    assert_eq!(t.report.ops.len(), 1);
    // innermost enclosing is clamp_min; the group is the outermost aten op, relu
    let relu = op(&t, "aten::relu");
    assert!(close(relu.device_time_us, 2.0));
    assert_eq!(relu.shapes, vec![vec![16]]);
}

#[test]
fn flow_events_link_a_kernel_without_correlation_and_a_missing_half_is_fine() {
    let t = import_text(&trace(&[
        cpu_op("aten::mm", 10.0, 20.0, 1, "[[4,4],[4,4]]"),
        launch("cuda_runtime", 11.0, 100, Some(1)),
        r#"{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":40.0,"dur":5.0,"args":{}}"#
            .to_string(),
        r#"{"ph":"f","id":100,"pid":0,"tid":7,"ts":40.0,"cat":"ac2g","name":"ac2g","bp":"e"}"#
            .to_string(),
        // a flow start whose end is missing
        r#"{"ph":"s","id":555,"pid":1,"tid":1,"ts":12.0,"cat":"ac2g","name":"ac2g"}"#.to_string(),
    ]));
    assert!(close(op(&t, "aten::mm").device_time_us, 5.0));
    assert!(t.report.warnings.is_empty(), "{:?}", t.report.warnings);
}

#[test]
fn zero_timestamp_and_duration_events_are_counted_not_summed() {
    let t = import_text(&trace(&[
        cpu_op("aten::mm", 10.0, 20.0, 1, "[[4,4],[4,4]]"),
        launch("cuda_runtime", 11.0, 100, Some(1)),
        launch("cuda_runtime", 12.0, 101, Some(1)),
        kernel("k", 40.0, 5.0, 100),
        kernel("k", 0.0, 0.0, 101),
    ]));
    let mm = op(&t, "aten::mm");
    assert_eq!(mm.calls, 1);
    assert!(
        t.report
            .warnings
            .iter()
            .any(|w| w.starts_with("1 event(s) with invalid timing")),
        "{:?}",
        t.report.warnings
    );
    // the launch whose kernel record is invalid has no device record
    assert!(close(t.report.coverage, 0.5));
}

#[test]
fn launches_without_device_records_lower_coverage_with_a_warning() {
    let t = import_text(&trace(&[
        cpu_op("aten::mm", 10.0, 20.0, 1, "[[4,4],[4,4]]"),
        launch("cuda_runtime", 11.0, 100, Some(1)),
        launch("cuda_runtime", 12.0, 101, Some(1)),
        launch("cuda_runtime", 13.0, 102, Some(1)),
        launch("cuda_runtime", 14.0, 103, Some(1)),
        kernel("k", 40.0, 5.0, 100),
    ]));
    assert!(close(t.report.coverage, 0.25));
    assert!(
        t.report
            .warnings
            .iter()
            .any(|w| w.contains("3 of 4 kernel launches")),
        "{:?}",
        t.report.warnings
    );
}

#[test]
fn a_trace_without_device_activity_ranks_cpu_self_time_and_says_so() {
    // linear (10 µs) contains addmm (6 µs): self times 4 and 6; a standalone relu 3 µs
    let t = import_text(&trace(&[
        cpu_op("aten::linear", 0.0, 10.0, 1, "[[2,8],[4,8],[4]]"),
        cpu_op("aten::addmm", 2.0, 6.0, 2, "[[4],[2,8],[8,4]]"),
        cpu_op("aten::relu", 20.0, 3.0, 3, "[[2,4]]"),
        launch("cuda_runtime", 3.0, 100, Some(2)),
    ]));
    assert!(t.report.device.starts_with("cpu"), "{}", t.report.device);
    assert!(close(t.report.coverage, 0.0));
    assert!(t
        .report
        .warnings
        .iter()
        .any(|w| w.contains("no device activity")));
    assert!(t
        .report
        .warnings
        .iter()
        .any(|w| w.contains("1 of 1 kernel launches")));
    assert!(close(t.report.total_device_time_us, 13.0));
    let linear = op(&t, "aten::linear");
    assert!(close(linear.device_time_us, 10.0));
    // one call of linear, with addmm's self time inside it
    assert_eq!(linear.calls, 1);
    assert_eq!(linear.kind, Some(KernelKind::Matmul));
    assert_eq!(t.report.ops[0].op, "aten::linear");
}

#[test]
fn module_ranges_group_their_ops_and_classify_by_class() {
    // an RMSNorm module made of pow/mean/rsqrt/mul, one kernel each
    let mut ev = vec![x(
        "user_annotation",
        "nn.Module: RMSNorm",
        1,
        1,
        0.0,
        100.0,
        "",
    )];
    for (i, name) in ["aten::pow", "aten::mean", "aten::rsqrt", "aten::mul"]
        .iter()
        .enumerate()
    {
        let ts = 10.0 + 20.0 * i as f64;
        ev.push(cpu_op(name, ts, 10.0, 10 + i as u64, "[[1,32,64],[]]"));
        ev.push(launch(
            "cuda_runtime",
            ts + 1.0,
            100 + i as u64,
            Some(10 + i as u64),
        ));
        ev.push(kernel("elementwise", 200.0 + ts, 1.5, 100 + i as u64));
    }
    let t = import_text(&trace(&ev));
    assert_eq!(t.report.ops.len(), 1);
    let m = op(&t, "RMSNorm");
    assert!(close(m.device_time_us, 6.0));
    // one forward of the module, whatever its four kernels
    assert_eq!(m.calls, 1);
    assert_eq!(m.kind, Some(KernelKind::Rmsnorm));
    assert_eq!(m.shapes, vec![vec![1, 32, 64], vec![]]);
    let targets = autokernel_profiler::plan(&t.report, 5, autokernel_core::DType::Float32);
    assert_eq!(targets[0].id, "01-rmsnorm");
    assert_eq!(
        targets[0].shapes,
        vec![autokernel_core::Shape(vec![32, 64])]
    );
}

#[test]
fn kernels_with_no_launch_or_op_are_named_after_themselves() {
    let t = import_text(&trace(&[kernel("orphan_softmax_kernel", 5.0, 4.0, 9)]));
    let o = op(&t, "orphan_softmax_kernel");
    assert_eq!(o.kind, Some(KernelKind::Softmax));
    assert!(t
        .report
        .warnings
        .iter()
        .any(|w| w.contains("no launch record")));
}

#[test]
fn gzip_and_bare_array_traces_import() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[{}]",
        [
            cpu_op("aten::mm", 10.0, 20.0, 1, "[[4,4],[4,4]]"),
            launch("cuda_runtime", 11.0, 100, Some(1)),
            kernel("k", 40.0, 5.0, 100)
        ]
        .join(",")
    );
    let path = dir.path().join("t.json.gz");
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&path).unwrap(),
        flate2::Compression::fast(),
    );
    gz.write_all(text.as_bytes()).unwrap();
    gz.finish().unwrap();
    let t = import_trace(&path).unwrap();
    assert!(close(op(&t, "aten::mm").device_time_us, 5.0));
}

#[test]
fn an_unknown_gpu_is_named_with_a_hint() {
    let text = trace(&[kernel("k", 5.0, 4.0, 9)]).replacen(
        r#""schemaVersion":1"#,
        r#""deviceProperties":[{"id":0,"name":"NVIDIA GeForce GTX 1080"}]"#,
        1,
    );
    let t = import_text(&text);
    assert_eq!(t.report.device, "cuda: NVIDIA GeForce GTX 1080");
    assert!(t
        .report
        .warnings
        .iter()
        .any(|w| w.contains("not in autokernel's table")));
}

#[test]
fn a_truncated_trace_keeps_what_was_read_and_warns() {
    let full = trace(&[
        cpu_op("aten::mm", 10.0, 20.0, 1, "[[4,4],[4,4]]"),
        launch("cuda_runtime", 11.0, 100, Some(1)),
        kernel("k", 40.0, 5.0, 100),
        kernel("k2", 50.0, 5.0, 101),
    ]);
    let cut = &full[..full.len() - 40];
    let t = import_text(cut);
    assert!(close(op(&t, "aten::mm").device_time_us, 5.0));
    assert!(
        t.report.warnings.iter().any(|w| w.contains("truncated")),
        "{:?}",
        t.report.warnings
    );
}

#[test]
fn a_truncated_gzip_trace_keeps_what_was_read_and_warns_like_a_truncated_json() {
    let dir = tempfile::tempdir().unwrap();
    let mut events = vec![
        cpu_op("aten::mm", 10.0, 20.0, 1, "[[4,4],[4,4]]"),
        launch("cuda_runtime", 11.0, 100, Some(1)),
        kernel("k", 40.0, 5.0, 100),
    ];
    // enough events after the first kernel that the cut lands well past it
    for i in 0..2000u32 {
        events.push(kernel(
            "later",
            100.0 + f64::from(i),
            1.0,
            10_000 + u64::from(i),
        ));
    }
    let full = trace(&events);
    let mut packed = Vec::new();
    let mut gz = flate2::write::GzEncoder::new(&mut packed, flate2::Compression::fast());
    gz.write_all(full.as_bytes()).unwrap();
    gz.finish().unwrap();
    // the writer was killed: the last third of the compressed stream is missing
    let path = dir.path().join("cut.json.gz");
    std::fs::write(&path, &packed[..packed.len() * 2 / 3]).unwrap();
    let t = import_trace(&path).expect("a cut-off gzip trace imports what was there");
    assert!(close(op(&t, "aten::mm").device_time_us, 5.0));
    assert!(
        t.report.warnings.iter().any(|w| w.contains("truncated")),
        "{:?}",
        t.report.warnings
    );
}

#[test]
fn a_file_that_is_not_a_trace_is_an_error_naming_it() {
    let e = import_trace_from("hello".as_bytes(), "notes.txt".as_ref()).unwrap_err();
    assert!(matches!(e, ProfileError::NotATrace { .. }));
    assert!(e.to_string().contains("notes.txt"), "{e}");
    let e = import_trace_from(r#"{"a":1}"#.as_bytes(), "x.json".as_ref()).unwrap_err();
    assert!(e.to_string().contains("no `traceEvents`"), "{e}");
    let e = import_trace("/no/such/trace.json".as_ref()).unwrap_err();
    assert!(matches!(e, ProfileError::Io { .. }));
}

#[test]
fn a_module_takes_the_shapes_of_its_activation_not_of_a_side_input() {
    // RotaryEmbedding: arange (no tensor input), outer(t, inv_freq) [32] [16], then
    // slices of x [1, 2, 32, 32]; an op nested in another op does not count
    let t = import_text(&trace(&[
        x(
            "user_annotation",
            "nn.Module: RotaryEmbedding",
            1,
            1,
            0.0,
            100.0,
            "",
        ),
        cpu_op("aten::arange", 1.0, 2.0, 1, "[[],[],[],[],[]]"),
        cpu_op("aten::outer", 5.0, 10.0, 2, "[[32],[16]]"),
        cpu_op("aten::mul", 6.0, 2.0, 3, "[[32,16,2,2,2],[16]]"),
        cpu_op("aten::slice", 20.0, 2.0, 4, "[[1,2,32,32],[],[],[],[]]"),
        cpu_op("aten::mul", 30.0, 10.0, 5, "[[1,2,32,16],[32,16]]"),
        launch("cuda_runtime", 31.0, 100, Some(5)),
        kernel("elementwise", 200.0, 2.0, 100),
    ]));
    let r = op(&t, "RotaryEmbedding");
    assert_eq!(
        r.shapes,
        vec![vec![1, 2, 32, 32], vec![], vec![], vec![], vec![]]
    );
    assert_eq!(r.kind, Some(KernelKind::RotaryEmbedding));
}

#[test]
fn a_range_that_only_overlaps_does_not_enclose() {
    // the module ends at 100; aten::add starts inside it but ends at 200, and the launch
    // at 150 is outside the module: the kernel belongs to aten::add alone
    let t = import_text(&trace(&[
        x("user_annotation", "nn.Module: Linear", 1, 1, 0.0, 100.0, ""),
        cpu_op("aten::add", 90.0, 110.0, 1, "[[8]]"),
        launch("cuda_runtime", 150.0, 100, None),
        kernel("k", 300.0, 2.0, 100),
    ]));
    assert_eq!(t.report.ops.len(), 1);
    assert!(close(op(&t, "aten::add").device_time_us, 2.0));
}

#[test]
fn one_odd_raw_quote_does_not_derail_the_events_after_it() {
    // a name with a single raw quote and a raw tab, then many valid events
    let mut ev = vec![x("python_function", "say \"hi\tthere", 1, 1, 0.0, 1.0, "")];
    for i in 0..2000u64 {
        let ts = 10.0 + 10.0 * i as f64;
        ev.push(cpu_op("aten::mm", ts, 5.0, i + 1, "[[4,4],[4,4]]"));
        ev.push(launch("cuda_runtime", ts + 1.0, 10_000 + i, Some(i + 1)));
        ev.push(kernel("gemm", 100_000.0 + ts, 0.5, 10_000 + i));
    }
    let t = import_text(&trace(&ev).replace("say \\\"hi", "say \"hi"));
    let mm = op(&t, "aten::mm");
    assert_eq!(mm.calls, 2000);
    assert!(close(t.report.total_device_time_us, 1000.0));
    assert!(
        t.report
            .warnings
            .iter()
            .any(|w| w.contains("repaired 1 event")),
        "{:?}",
        t.report.warnings
    );
}

#[test]
fn a_raw_newline_or_invalid_utf8_alone_is_repaired_and_counted_once() {
    let mut text = trace(&[
        x(
            "kernel",
            "line1\nline2",
            0,
            7,
            5.0,
            4.0,
            r#""correlation":9"#,
        ),
        x("kernel", "badXbyte", 0, 7, 15.0, 2.0, r#""correlation":10"#),
    ])
    .into_bytes();
    let at = text.windows(5).position(|w| w == b"Xbyte").expect("marker");
    text[at] = 0xFF;
    let t = autokernel_profiler::import_trace_from(text.as_slice(), "t.json".as_ref()).unwrap();
    assert!(close(t.report.total_device_time_us, 6.0));
    assert!(t.report.ops.iter().any(|o| o.op == "line1\nline2"));
    assert!(t.report.ops.iter().any(|o| o.op == "bad\u{fffd}byte"));
    assert!(
        t.report
            .warnings
            .iter()
            .any(|w| w.contains("repaired 2 event")),
        "{:?}",
        t.report.warnings
    );
}

/// Several MB of events go through the two-thread path; names holding `},{` put likely
/// split points inside strings, which must never be taken as event boundaries.
#[test]
fn large_traces_parse_the_same_on_two_threads() {
    let mut ev = Vec::new();
    let n = 12_000u64;
    for i in 0..n {
        let ts = 10.0 + 10.0 * i as f64;
        let name = if i % 7 == 0 {
            "aten::weird},{\\\"x\\\"},{"
        } else {
            "aten::mm"
        };
        ev.push(x(
            "cpu_op",
            name,
            1,
            1,
            ts,
            5.0,
            &format!(r#""External id":{},"Input Dims":[[4,4],[4,4]]"#, i + 1),
        ));
        ev.push(launch("cuda_runtime", ts + 1.0, 100_000 + i, Some(i + 1)));
        ev.push(kernel("gemm", 1_000_000.0 + ts, 0.25, 100_000 + i));
    }
    let text = trace(&ev);
    assert!(text.len() > 3 << 20, "{}", text.len());
    let t = import_text(&text);
    let weird = (0..n).filter(|i| i % 7 == 0).count() as u64;
    assert_eq!(op(&t, "aten::mm").calls, n - weird);
    assert_eq!(op(&t, "aten::weird},{\"x\"},{").calls, weird);
    assert!(close(t.report.total_device_time_us, 0.25 * n as f64));
    assert!(close(t.report.coverage, 1.0));
    assert!(t.report.warnings.is_empty(), "{:?}", t.report.warnings);
}

/// One call of `name` at `ts` (External id `ext`) launching kernels of the given durations,
/// each its own launch (correlation `ext * 10 + i`), placed on the stream after `ts + 1000`.
fn call(name: &str, ts: f64, ext: u64, dims: &str, kernel_us: &[f64]) -> Vec<String> {
    let mut ev = vec![cpu_op(name, ts, 10.0, ext, dims)];
    for (i, &dur) in kernel_us.iter().enumerate() {
        let corr = ext * 10 + i as u64;
        ev.push(launch("cuda_runtime", ts + 1.0 + i as f64, corr, Some(ext)));
        ev.push(kernel("k", ts + 1000.0 + 30.0 * i as f64, dur, corr));
    }
    ev
}

/// The spread of an op is over its calls, one call being the range that names it whatever
/// kernels it launched: mm's calls took 5, 5 and 20 µs (4x) and are warned about; relu's
/// 10 and 15 µs (1.5x) are not; addmm's two calls launched 1 + 9 µs each, 10 µs a call
/// (per kernel it would read 9x); add's 0.1 and 0.5 µs (5x) hold under 1% of the time.
#[test]
fn calls_of_one_op_that_spread_over_2x_are_warned_about() {
    let mm = "[[4,4],[4,4]]";
    let mut ev = Vec::new();
    ev.extend(call("aten::mm", 0.0, 1, mm, &[5.0]));
    ev.extend(call("aten::mm", 100.0, 2, mm, &[5.0]));
    ev.extend(call("aten::mm", 200.0, 3, mm, &[20.0]));
    ev.extend(call("aten::relu", 300.0, 4, "[[4,4]]", &[10.0]));
    ev.extend(call("aten::relu", 400.0, 5, "[[4,4]]", &[15.0]));
    ev.extend(call(
        "aten::addmm",
        500.0,
        6,
        "[[4],[4,4],[4,4]]",
        &[1.0, 9.0],
    ));
    ev.extend(call(
        "aten::addmm",
        600.0,
        7,
        "[[4],[4,4],[4,4]]",
        &[1.0, 9.0],
    ));
    ev.extend(call("aten::add", 700.0, 8, "[[4,4],[4,4]]", &[0.1]));
    ev.extend(call("aten::add", 800.0, 9, "[[4,4],[4,4]]", &[0.5]));
    let t = import_text(&trace(&ev));
    // 30 + 25 + 20 + 0.6: add holds 0.6 / 75.6 = 0.8% of the time
    assert!(close(t.report.total_device_time_us, 75.6));
    let range = |name: &str| {
        let i = t.report.ops.iter().position(|o| o.op == name).unwrap();
        t.ranked[i].call_us_range
    };
    assert_eq!(range("aten::mm"), Some((5.0, 20.0)));
    assert_eq!(range("aten::relu"), Some((10.0, 15.0)));
    assert_eq!(range("aten::addmm"), Some((10.0, 10.0)));
    assert_eq!(
        op(&t, "aten::addmm").calls,
        2,
        "calls counts ranges, not kernels"
    );
    let noisy: Vec<&String> = t
        .report
        .warnings
        .iter()
        .filter(|w| w.contains("timings are noisy"))
        .collect();
    assert_eq!(noisy.len(), 1, "{:?}", t.report.warnings);
    let w = noisy[0];
    assert!(
        w.contains(": aten::mm [4,4] [4,4] took 5.000 to 20.000 us a call (4.0x); the ranking"),
        "{w}"
    );
    assert!(w.contains("--iterations N"), "{w}");
    for quiet in ["aten::relu", "aten::addmm", "aten::add "] {
        assert!(!w.contains(quiet), "{quiet} named in: {w}");
    }
    assert_eq!(t.spread_warning().as_ref(), Some(w));

    // steady calls: no warning at all
    let mut ev = Vec::new();
    ev.extend(call("aten::mm", 0.0, 1, mm, &[5.0]));
    ev.extend(call("aten::mm", 100.0, 2, mm, &[9.0]));
    let t = import_text(&trace(&ev));
    assert!(t.report.warnings.is_empty(), "{:?}", t.report.warnings);
}

/// In a trace without kernels a call is the outermost op's range, its self time and its
/// children's together: linear 10 µs holding addmm 6 µs is one 10 µs call, so two such
/// calls do not spread, and a 30 µs third one (3x) does.
#[test]
fn cpu_self_times_spread_per_call_of_the_outermost_op() {
    let linear = |ts: f64, ext: u64, dur: f64| {
        vec![
            cpu_op("aten::linear", ts, dur, ext * 2, "[[2,8],[4,8],[4]]"),
            cpu_op(
                "aten::addmm",
                ts + 2.0,
                6.0,
                ext * 2 + 1,
                "[[4],[2,8],[8,4]]",
            ),
        ]
    };
    let mut ev = linear(0.0, 1, 10.0);
    ev.extend(linear(100.0, 2, 10.0));
    let t = import_text(&trace(&ev));
    assert_eq!(t.ranked[0].call_us_range, Some((10.0, 10.0)));
    assert!(t.spread_warning().is_none());
    ev.extend(linear(200.0, 3, 30.0));
    let t = import_text(&trace(&ev));
    assert_eq!(t.ranked[0].call_us_range, Some((10.0, 30.0)));
    let w = t.spread_warning().expect("a 3x spread");
    assert!(
        w.contains("aten::linear [2,8] [4,8] [4] took 10.000 to 30.000 us a call (3.0x)"),
        "{w}"
    );
}

/// The table's per-op Amdahl column has the JSON's name and a line saying what it is: two
/// ops of half the time each could at most double the model's speed.
#[test]
fn the_table_names_and_explains_the_amdahl_ceiling() {
    let mut ev = Vec::new();
    ev.extend(call("aten::mm", 0.0, 1, "[[4,4],[4,4]]", &[5.0]));
    ev.extend(call("aten::relu", 100.0, 2, "[[4,4]]", &[5.0]));
    let t = import_text(&trace(&ev));
    let table = t.table(0);
    let header = table.lines().find(|l| l.contains("rank")).unwrap();
    assert!(
        header.trim_end().ends_with("cum% amdahl_ceiling"),
        "{table}"
    );
    let mm = table.lines().find(|l| l.contains("aten::mm")).unwrap();
    assert!(mm.trim_end().ends_with(" 2.00x"), "{table}");
    assert!(
        table.contains("\namdahl_ceiling: the whole model's speedup if that op took no time"),
        "{table}"
    );
    assert_eq!(t.to_json(0)["ops"][0]["amdahl_ceiling"], 2.0);
}

//! The stage planner: which cases a bench request runs, in which order, at which shapes,
//! dtypes and input modes, and where it is timed. Pure Rust: no Python, no pyo3.
//!
//! [`plan`] turns a kind, a [`BenchJob`] and the device into a [`Plan`]; the executor
//! ([`super::execute`]) then runs it case by case through the harness and the judge. The
//! rules live here so that they can be read in one place and tested without an interpreter
//! (the tests at the bottom), for example "every stability mode also runs at the timing
//! shape" or "`--quick` keeps masked rows at the timing shape".

use autokernel_core::{DType, KindSpec, Params, Shape, ShapeSet, Stage};

use crate::protocol::BenchJob;

/// How the catalogue's input generator fills a case's inputs (`MODES` in
/// `python/catalogue.py`, which takes the names of [`InputMode::name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InputMode {
    /// Ordinary random inputs.
    Normal,
    /// Large magnitudes (overflow, lost precision in exponents).
    Large,
    /// Tiny magnitudes (underflow).
    Small,
    /// Large and small magnitudes mixed.
    Mixed,
    /// All zeros.
    Zeros,
    /// One constant value.
    Constant,
    /// Rows with -inf columns at the start, the end or both (attention masks, padded
    /// vocabularies); only for [`KindSpec::masked_rows`].
    Masked,
}

impl InputMode {
    /// The stability stage's modes, in the order they run.
    pub(crate) const STABILITY: [InputMode; 5] = [
        InputMode::Large,
        InputMode::Small,
        InputMode::Mixed,
        InputMode::Zeros,
        InputMode::Constant,
    ];

    /// The stability modes `--quick` keeps.
    pub(crate) const QUICK_STABILITY: [InputMode; 2] = [InputMode::Large, InputMode::Zeros];

    /// The name the harness and the catalogue take (`normal`, `large`, …, `masked`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            InputMode::Normal => "normal",
            InputMode::Large => "large",
            InputMode::Small => "small",
            InputMode::Mixed => "mixed",
            InputMode::Zeros => "zeros",
            InputMode::Constant => "constant",
            InputMode::Masked => "masked",
        }
    }
}

/// One case to run: fresh inputs of `shape`, `dtype` and `mode`, the candidate called
/// `repeats` times on them (more than once: outputs must be bitwise identical). The first
/// call of every case runs under the op check, the repeats do not (`harness.run_case`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Case {
    /// The kind's dims (`KindSpec::dim_names`).
    pub shape: Shape,
    /// The inputs' dtype.
    pub dtype: DType,
    /// How the inputs are filled.
    pub mode: InputMode,
    /// Calls on the same inputs (3 in the determinism stage, else 1).
    pub repeats: u32,
}

/// A stage and its cases, in the order they run; the stage fails at its first failing case.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StagePlan {
    /// Which stage (named in reports and in the worker's `stage …` log lines).
    pub stage: Stage,
    /// Its cases, in order.
    pub cases: Vec<Case>,
}

/// Everything a bench request runs after the load, in order: [`Plan::stages`], then the
/// timing at [`Plan::timing_shape`] and [`Plan::timing_dtype`], then [`Plan::integrity`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    /// The correctness stages before timing: smoke, shape sweep, stability, determinism,
    /// edge.
    pub stages: Vec<StagePlan>,
    /// The shape the candidate and the reference are timed at: the job's timing shape,
    /// else its first extra shape, else the first shape of the device's set.
    pub timing_shape: Shape,
    /// The dtype they are timed in: the job's, else the only dtype it judges, else float16
    /// on a GPU and float32 on the CPU.
    pub timing_dtype: DType,
    /// After timing: correctness judged again at the timing shape and dtype, on fresh
    /// inputs.
    pub integrity: StagePlan,
}

impl Plan {
    /// The cases of `stage` (none when the plan has no such stage).
    #[cfg(test)]
    fn cases(&self, stage: Stage) -> &[Case] {
        self.stages
            .iter()
            .chain(std::iter::once(&self.integrity))
            .find(|s| s.stage == stage)
            .map_or(&[], |s| s.cases.as_slice())
    }
}

/// The seed of a head-to-head's inputs (any: the rotation overwrites them before every
/// timed call); the parent expects its timed outputs' checks at it.
pub(crate) const COMPARE_SEED: u64 = 7;

/// The plan of a bench request for a candidate of `kind` with the target's resolved
/// `params`, on a GPU when `on_gpu` (else the CPU with Triton's interpreter). The kind's own
/// shapes are fitted to the params ([`KindSpec::fit_shape`]: a grouped-query target's heads
/// a multiple of its `kv_heads`).
///
/// # Errors
/// A message when the job asks for what cannot run: an extra shape or the timing shape of
/// the wrong rank for `kind`, or a bfloat16 timing on the CPU ([`check_request`]).
pub(crate) fn plan(
    kind: &KindSpec,
    job: &BenchJob,
    params: &Params,
    on_gpu: bool,
) -> Result<Plan, String> {
    for s in &job.extra_shapes {
        check_request(kind, s, DType::Float32, on_gpu)?;
    }
    let fitted = |set: ShapeSet| -> Vec<Shape> {
        kind.shapes(set)
            .iter()
            .map(|s| kind.fit_shape(s, params))
            .collect()
    };
    let set = &fitted(if on_gpu { ShapeSet::Gpu } else { ShapeSet::Cpu })[..];
    let (timing_shape, timing_dtype) = match &job.timing {
        Some((s, d)) => (s.clone(), *d),
        None => (
            job.extra_shapes
                .first()
                .cloned()
                .unwrap_or_else(|| set[0].clone()),
            // a request judged in one dtype is timed in it; else fp16 on a GPU, fp32 on CPU
            match job.dtypes.as_slice() {
                [only] => *only,
                _ if on_gpu => DType::Float16,
                _ => DType::Float32,
            },
        ),
    };
    check_request(kind, &timing_shape, timing_dtype, on_gpu)?;

    let small = fitted(ShapeSet::Cpu)[0].clone();
    let dtypes = judged_dtypes(kind.dtypes(on_gpu).to_vec(), &job.dtypes);
    let quick = job.quick;
    let sweep_dtypes: Vec<DType> = if quick {
        dtypes[..1].to_vec()
    } else {
        dtypes.clone()
    };
    let case = |shape: &Shape, dtype: DType, mode: InputMode, repeats: u32| Case {
        shape: shape.clone(),
        dtype,
        mode,
        repeats,
    };

    // smoke: one small call of each dtype
    let smoke: Vec<Case> = dtypes
        .iter()
        .map(|d| case(&small, *d, InputMode::Normal, 1))
        .collect();
    // shape sweep: the set's shapes (the first only when quick) plus the extra shapes
    let mut shapes: Vec<Shape> = if quick {
        set[..1].to_vec()
    } else {
        set.to_vec()
    };
    for s in &job.extra_shapes {
        if !shapes.contains(s) {
            shapes.push(s.clone());
        }
    }
    let sweep: Vec<Case> = shapes
        .iter()
        .flat_map(|s| sweep_dtypes.iter().map(move |d| (s, *d)))
        .map(|(s, d)| case(s, d, InputMode::Normal, 1))
        .collect();
    let modes: &[InputMode] = if quick {
        &InputMode::QUICK_STABILITY
    } else {
        &InputMode::STABILITY
    };
    let all_edge_shapes = &fitted(ShapeSet::Edge)[..];
    // Every mode at set[0] and at the timing shape, whose paths set[0] may never reach:
    // the softmax starter's shared-memory rows (4096×50257 on a GPU) once lost float32's
    // `large` rows to rounding in the exponent, where set[0]'s rows, held in registers,
    // were right.
    let mut stability_shapes = vec![&set[0]];
    if timing_shape != set[0] {
        stability_shapes.push(&timing_shape);
    }
    let mut stability: Vec<Case> = stability_shapes
        .iter()
        .flat_map(|s| modes.iter().map(move |m| (*s, *m)))
        .flat_map(|(s, m)| sweep_dtypes.iter().map(move |d| (s, m, *d)))
        .map(|(s, m, d)| case(s, d, m, 1))
        .collect();
    // Masked rows (-inf columns at either end) at the timing shape, whose wide rows may
    // take chunked paths that set[0] never reaches, even when quick; otherwise also at
    // set[0] and the edge shapes, where width-specific bugs show.
    if kind.masked_rows {
        let mut masked_shapes = vec![&timing_shape];
        if !quick {
            for shape in std::iter::once(&set[0]).chain(all_edge_shapes.iter()) {
                if !masked_shapes.contains(&shape) {
                    masked_shapes.push(shape);
                }
            }
        }
        for shape in masked_shapes {
            stability.extend(
                sweep_dtypes
                    .iter()
                    .map(|d| case(shape, *d, InputMode::Masked, 1)),
            );
        }
    }
    let determinism: Vec<Case> = sweep_dtypes
        .iter()
        .map(|d| case(&set[0], *d, InputMode::Normal, 3))
        .collect();
    let edge_shapes = if quick {
        &all_edge_shapes[..1]
    } else {
        all_edge_shapes
    };
    let edge: Vec<Case> = edge_shapes
        .iter()
        .flat_map(|s| sweep_dtypes.iter().map(move |d| (s, *d)))
        .map(|(s, d)| case(s, d, InputMode::Normal, 1))
        .collect();
    // integrity: correctness re-checked after timing, on fresh inputs
    let integrity = StagePlan {
        stage: Stage::Integrity,
        cases: vec![case(&timing_shape, timing_dtype, InputMode::Normal, 1)],
    };

    let stages = [
        (Stage::Smoke, smoke),
        (Stage::ShapeSweep, sweep),
        (Stage::Stability, stability),
        (Stage::Determinism, determinism),
        (Stage::Edge, edge),
    ]
    .into_iter()
    .map(|(stage, cases)| StagePlan { stage, cases })
    .collect();
    Ok(Plan {
        stages,
        timing_shape,
        timing_dtype,
        integrity,
    })
}

/// Refuses shapes of the wrong rank for `kind` and bfloat16 on the CPU.
///
/// # Errors
/// A message naming the kind's dims and the shape given, or why bfloat16 cannot run on the
/// CPU and what to use instead.
pub(crate) fn check_request(
    kind: &KindSpec,
    shape: &Shape,
    dtype: DType,
    on_gpu: bool,
) -> Result<(), String> {
    if shape.0.len() != kind.dim_names.len() {
        return Err(format!(
            "a {} shape has {} dims ({}), got `{shape}`",
            kind.name,
            kind.dim_names.len(),
            kind.dim_names.join(", ")
        ));
    }
    if !on_gpu && dtype == DType::Bfloat16 {
        return Err("bfloat16 cannot run on the CPU (Triton's interpreter uses numpy, which has no bfloat16); use float16 or float32".into());
    }
    Ok(())
}

/// The dtypes a job judges: the requested ones the device supports (no bfloat16 in the CPU
/// interpreter), else every dtype of the kind for the device.
fn judged_dtypes(supported: Vec<DType>, requested: &[DType]) -> Vec<DType> {
    let wanted: Vec<DType> = requested
        .iter()
        .copied()
        .filter(|d| supported.contains(d))
        .collect();
    if wanted.is_empty() {
        supported
    } else {
        wanted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use autokernel_core::KernelKind;

    /// A job as `autokernel bench kernel.py` sends it: no extra shapes, no timing point,
    /// every dtype, not quick.
    fn job() -> BenchJob {
        BenchJob {
            kernel_path: "kernel.py".into(),
            kind: None,
            extra_shapes: Vec::new(),
            timing: None,
            dtypes: Vec::new(),
            quick: false,
            time_compiled: false,
            gpu_bandwidth_gb_s: None,
            layout: Default::default(),
            params: Default::default(),
        }
    }

    fn shape(dims: &[u64]) -> Shape {
        Shape(dims.to_vec())
    }

    /// The (shape, dtype) pairs of `cases` in `mode`, in order.
    fn at(cases: &[Case], mode: InputMode) -> Vec<(Shape, DType)> {
        cases
            .iter()
            .filter(|c| c.mode == mode)
            .map(|c| (c.shape.clone(), c.dtype))
            .collect()
    }

    /// The distinct shapes of `cases` in `mode`, in order of first appearance.
    fn shapes_in(cases: &[Case], mode: InputMode) -> Vec<Shape> {
        let mut out: Vec<Shape> = Vec::new();
        for c in cases.iter().filter(|c| c.mode == mode) {
            if !out.contains(&c.shape) {
                out.push(c.shape.clone());
            }
        }
        out
    }

    /// A grouped-query target (kv_heads 2) is judged at the kind's shapes with their heads
    /// rounded up to a multiple of 2 (the edge shape's 3 heads: 4), every other dim as it
    /// was; without the parameter the shapes are the catalogue's.
    #[test]
    fn the_kinds_own_shapes_are_fitted_to_a_grouped_query_targets_kv_heads() {
        let kind = KernelKind::FlashAttention.spec();
        let every_shape = |p: &Plan| -> Vec<Shape> {
            p.stages
                .iter()
                .flat_map(|s| s.cases.iter().map(|c| c.shape.clone()))
                .collect()
        };
        let plain = plan(kind, &job(), &Params::new(), false).unwrap();
        assert!(every_shape(&plain).contains(&shape(&[1, 3, 37, 64])));
        let gqa: Params = [("kv_heads".to_string(), serde_json::json!(2))].into();
        let fitted = plan(kind, &job(), &gqa, false).unwrap();
        let shapes = every_shape(&fitted);
        assert!(shapes.contains(&shape(&[1, 4, 37, 64])), "{shapes:?}");
        assert!(shapes.iter().all(|s| s.0[1] % 2 == 0), "{shapes:?}");
        // the same cases, one for one, only the heads changed
        assert_eq!(every_shape(&plain).len(), shapes.len());
        for (a, b) in every_shape(&plain).iter().zip(&shapes) {
            assert_eq!((a.0[0], a.0[2], a.0[3]), (b.0[0], b.0[2], b.0[3]));
            assert_eq!(b.0[1], a.0[1].div_ceil(2) * 2);
        }
    }

    #[test]
    fn stages_run_in_order_and_integrity_rechecks_the_timing_point() {
        let p = plan(KernelKind::Layernorm.spec(), &job(), &Params::new(), false).unwrap();
        let order: Vec<Stage> = p.stages.iter().map(|s| s.stage).collect();
        assert_eq!(
            order,
            [
                Stage::Smoke,
                Stage::ShapeSweep,
                Stage::Stability,
                Stage::Determinism,
                Stage::Edge
            ]
        );
        assert_eq!(p.integrity.stage, Stage::Integrity);
        assert_eq!(
            p.integrity.cases,
            [Case {
                shape: p.timing_shape.clone(),
                dtype: p.timing_dtype,
                mode: InputMode::Normal,
                repeats: 1,
            }]
        );
        assert!(p.cases(Stage::Determinism).iter().all(|c| c.repeats == 3));
        assert!(p
            .stages
            .iter()
            .filter(|s| s.stage != Stage::Determinism)
            .all(|s| s.cases.iter().all(|c| c.repeats == 1)));
    }

    #[test]
    fn the_timing_point_is_the_jobs_else_its_first_extra_shape_else_the_sets_first() {
        let kind = KernelKind::Softmax;
        let cpu0 = kind.shapes(ShapeSet::Cpu)[0].clone();
        let gpu0 = kind.shapes(ShapeSet::Gpu)[0].clone();
        let p = plan(kind.spec(), &job(), &Params::new(), false).unwrap();
        assert_eq!((p.timing_shape, p.timing_dtype), (cpu0, DType::Float32));
        let p = plan(kind.spec(), &job(), &Params::new(), true).unwrap();
        assert_eq!((p.timing_shape, p.timing_dtype), (gpu0, DType::Float16));

        let mut j = job();
        j.extra_shapes = vec![shape(&[3, 300]), shape(&[5, 500])];
        j.dtypes = vec![DType::Bfloat16];
        let p = plan(kind.spec(), &j, &Params::new(), true).unwrap();
        assert_eq!(
            (p.timing_shape, p.timing_dtype),
            (shape(&[3, 300]), DType::Bfloat16)
        );

        j.timing = Some((shape(&[9, 900]), DType::Float32));
        let p = plan(kind.spec(), &j, &Params::new(), true).unwrap();
        assert_eq!(
            (p.timing_shape, p.timing_dtype),
            (shape(&[9, 900]), DType::Float32)
        );
    }

    #[test]
    fn shapes_of_the_wrong_rank_and_bfloat16_on_the_cpu_are_refused() {
        let mut j = job();
        j.extra_shapes = vec![shape(&[4, 4, 4])];
        let err = plan(KernelKind::Softmax.spec(), &j, &Params::new(), false).unwrap_err();
        assert!(err.contains("2 dims") && err.contains("`4x4x4`"), "{err}");

        let mut j = job();
        j.timing = Some((shape(&[8, 128]), DType::Bfloat16));
        let err = plan(KernelKind::Softmax.spec(), &j, &Params::new(), false).unwrap_err();
        assert!(err.contains("bfloat16 cannot run on the CPU"), "{err}");
        assert!(plan(KernelKind::Softmax.spec(), &j, &Params::new(), true).is_ok());
    }

    /// The rule of commit aa431c0: the timing shape's rows may take paths the set's first
    /// shape never reaches, so every stability mode runs at both, in every judged dtype.
    #[test]
    fn every_stability_mode_also_runs_at_the_timing_shape() {
        let mut j = job();
        j.timing = Some((shape(&[4096, 50257]), DType::Float16));
        let p = plan(KernelKind::Softmax.spec(), &j, &Params::new(), true).unwrap();
        let set0 = KernelKind::Softmax.shapes(ShapeSet::Gpu)[0].clone();
        let stability = p.cases(Stage::Stability);
        for mode in InputMode::STABILITY {
            assert_eq!(
                shapes_in(stability, mode),
                [set0.clone(), p.timing_shape.clone()],
                "{mode:?}"
            );
            let pairs = at(stability, mode);
            for dtype in DType::ALL {
                assert!(
                    pairs.contains(&(p.timing_shape.clone(), dtype)),
                    "{mode:?} {dtype}"
                );
                assert!(pairs.contains(&(set0.clone(), dtype)), "{mode:?} {dtype}");
            }
        }
        // the timing shape equal to set[0]: each mode once per dtype, not twice
        let p = plan(KernelKind::Softmax.spec(), &job(), &Params::new(), true).unwrap();
        for mode in InputMode::STABILITY {
            assert_eq!(at(p.cases(Stage::Stability), mode).len(), DType::ALL.len());
        }
    }

    /// The same rule for every kind, on both devices, quick or not, with the timing shape
    /// taken from an extra shape (a profiled model's) rather than given.
    #[test]
    fn the_timing_shape_rule_holds_for_every_kind_device_and_quick() {
        for kind in KernelKind::ALL {
            for on_gpu in [false, true] {
                for quick in [false, true] {
                    let mut j = job();
                    j.quick = quick;
                    // a shape of the kind's rank that is in no set
                    j.extra_shapes = vec![Shape(vec![3; kind.dim_names().len()])];
                    let p = plan(kind.spec(), &j, &Params::new(), on_gpu).unwrap();
                    assert_eq!(p.timing_shape, j.extra_shapes[0]);
                    let modes: &[InputMode] = if quick {
                        &InputMode::QUICK_STABILITY
                    } else {
                        &InputMode::STABILITY
                    };
                    let stability = p.cases(Stage::Stability);
                    for mode in modes {
                        assert!(
                            shapes_in(stability, *mode).contains(&p.timing_shape),
                            "{kind} on_gpu={on_gpu} quick={quick} {mode:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn softmax_and_cross_entropy_get_masked_rows_at_the_timed_first_and_edge_shapes() {
        for kind in [KernelKind::Softmax, KernelKind::CrossEntropy] {
            let mut j = job();
            j.timing = Some((shape(&[64, 3000]), DType::Float32));
            let p = plan(kind.spec(), &j, &Params::new(), false).unwrap();
            let mut want = vec![shape(&[64, 3000]), kind.shapes(ShapeSet::Cpu)[0].clone()];
            want.extend(kind.shapes(ShapeSet::Edge));
            let stability = p.cases(Stage::Stability);
            assert_eq!(shapes_in(stability, InputMode::Masked), want, "{kind}");
            // every judged dtype at each, once
            assert_eq!(
                at(stability, InputMode::Masked).len(),
                want.len() * kind.dtypes(false).len(),
                "{kind}"
            );
            // masked rows come after the other stability modes
            let first_masked = stability
                .iter()
                .position(|c| c.mode == InputMode::Masked)
                .unwrap();
            assert!(stability[first_masked..]
                .iter()
                .all(|c| c.mode == InputMode::Masked));
            // nowhere else
            for s in p.stages.iter().filter(|s| s.stage != Stage::Stability) {
                assert!(at(&s.cases, InputMode::Masked).is_empty(), "{kind}");
            }
        }
        // the timing shape being the set's first: masked there once, not twice
        let p = plan(KernelKind::Softmax.spec(), &job(), &Params::new(), false).unwrap();
        let mut want = vec![KernelKind::Softmax.shapes(ShapeSet::Cpu)[0].clone()];
        want.extend(KernelKind::Softmax.shapes(ShapeSet::Edge));
        assert_eq!(
            at(p.cases(Stage::Stability), InputMode::Masked).len(),
            want.len() * 2
        );
    }

    #[test]
    fn kinds_without_masked_rows_get_none() {
        for kind in KernelKind::ALL
            .into_iter()
            .filter(|k| !k.takes_masked_rows())
        {
            for quick in [false, true] {
                let mut j = job();
                j.quick = quick;
                let p = plan(kind.spec(), &j, &Params::new(), true).unwrap();
                assert!(
                    p.stages
                        .iter()
                        .all(|s| at(&s.cases, InputMode::Masked).is_empty()),
                    "{kind}"
                );
            }
        }
    }

    #[test]
    fn quick_keeps_masked_rows_at_the_timed_shape_only() {
        let mut j = job();
        j.quick = true;
        j.timing = Some((shape(&[64, 3000]), DType::Float32));
        let p = plan(KernelKind::CrossEntropy.spec(), &j, &Params::new(), false).unwrap();
        assert_eq!(
            at(p.cases(Stage::Stability), InputMode::Masked),
            [(shape(&[64, 3000]), DType::Float32)]
        );
    }

    #[test]
    fn quick_keeps_the_first_shape_dtype_and_edge_shape_and_two_modes() {
        let kind = KernelKind::Layernorm;
        let set = kind.shapes(ShapeSet::Gpu);
        let edges = kind.shapes(ShapeSet::Edge);
        let extra = shape(&[3, 300]);
        let mut j = job();
        j.quick = true;
        j.extra_shapes = vec![extra.clone()];
        let p = plan(kind.spec(), &j, &Params::new(), true).unwrap();
        let first = DType::ALL[0];
        // smoke still calls every dtype once
        assert_eq!(
            at(p.cases(Stage::Smoke), InputMode::Normal),
            DType::ALL.map(|d| (kind.shapes(ShapeSet::Cpu)[0].clone(), d))
        );
        // the sweep: the set's first shape and the extra shape, in the first dtype
        assert_eq!(
            at(p.cases(Stage::ShapeSweep), InputMode::Normal),
            [(set[0].clone(), first), (extra.clone(), first)]
        );
        // stability: large and zeros at set[0] and the timed shape
        let stability: Vec<(Shape, InputMode, DType)> = p
            .cases(Stage::Stability)
            .iter()
            .map(|c| (c.shape.clone(), c.mode, c.dtype))
            .collect();
        assert_eq!(
            stability,
            [
                (set[0].clone(), InputMode::Large, first),
                (set[0].clone(), InputMode::Zeros, first),
                (extra.clone(), InputMode::Large, first),
                (extra.clone(), InputMode::Zeros, first),
            ]
        );
        assert_eq!(
            at(p.cases(Stage::Determinism), InputMode::Normal),
            [(set[0].clone(), first)]
        );
        assert_eq!(
            at(p.cases(Stage::Edge), InputMode::Normal),
            [(edges[0].clone(), first)]
        );
    }

    #[test]
    fn without_quick_every_shape_dtype_mode_and_edge_shape_is_judged() {
        let kind = KernelKind::Matmul;
        let set = kind.shapes(ShapeSet::Cpu);
        let edges = kind.shapes(ShapeSet::Edge);
        let dtypes = kind.dtypes(false);
        let extra = shape(&[5, 7, 9]);
        let mut j = job();
        // an extra shape already in the set is not judged twice
        j.extra_shapes = vec![extra.clone(), set[1].clone()];
        let p = plan(kind.spec(), &j, &Params::new(), false).unwrap();
        let cross = |shapes: &[Shape]| -> Vec<(Shape, DType)> {
            shapes
                .iter()
                .flat_map(|s| dtypes.iter().map(move |d| (s.clone(), *d)))
                .collect()
        };
        let mut swept = set.clone();
        swept.push(extra.clone());
        assert_eq!(
            at(p.cases(Stage::ShapeSweep), InputMode::Normal),
            cross(&swept)
        );
        assert_eq!(at(p.cases(Stage::Edge), InputMode::Normal), cross(&edges));
        assert_eq!(
            at(p.cases(Stage::Determinism), InputMode::Normal),
            cross(&set[..1])
        );
        // stability: shape, then mode, then dtype
        let stability: Vec<(Shape, InputMode, DType)> = p
            .cases(Stage::Stability)
            .iter()
            .map(|c| (c.shape.clone(), c.mode, c.dtype))
            .collect();
        let want: Vec<(Shape, InputMode, DType)> = [set[0].clone(), extra.clone()]
            .into_iter()
            .flat_map(|s| {
                InputMode::STABILITY.into_iter().flat_map({
                    let dtypes = dtypes.clone();
                    move |m| {
                        let s = s.clone();
                        dtypes.clone().into_iter().map(move |d| (s.clone(), m, d))
                    }
                })
            })
            .collect();
        assert_eq!(stability, want);
    }

    #[test]
    fn a_target_dtype_narrows_the_sweep_and_unsupported_ones_fall_back() {
        let gpu = DType::ALL.to_vec();
        assert_eq!(
            judged_dtypes(gpu.clone(), &[DType::Float16]),
            vec![DType::Float16]
        );
        assert_eq!(judged_dtypes(gpu.clone(), &[]), gpu);
        let cpu = vec![DType::Float32, DType::Float16];
        assert_eq!(judged_dtypes(cpu.clone(), &[DType::Bfloat16]), cpu);
    }
}

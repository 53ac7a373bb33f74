//! The timed loop (issue 21, point 2), in Rust so that what decides a candidate's time is
//! out of reach of Python in its process: which timed calls are checked, the offsets its
//! inputs are overwritten at before each call, the clock and its samples, and the copies of
//! the checked outputs. A timed call is made from here, through the op monitor's scope
//! (`harness._TimedOps.call`) and a `functools.partial` made per call, so no frame of the
//! harness is above the candidate, and none of this state is a Python object it could find
//! through the garbage collector: on the GPU the events, the L2 flush buffer and the kept
//! copies are the CUDA driver's ([`super::cuda`]). Between timed calls only torch's own
//! callables run, captured before any candidate ([`super::torch_ops`]); the harness's
//! Python makes the inputs, the pools and the op monitor, before the loop. On the GPU a
//! measurement also runs under the device's own record of what the calls and the gaps
//! between them ran ([`super::cupti`]). The attacks this answers are `tests/cases/timing/`
//! and `tests/cases/device/` (docs/bench.md, "Threat model").

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use ndarray::{ArrayD, IxDyn};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::cuda::{self, DeviceBuffer, Event, Stream};
use super::cupti::{self, DeviceActivity, Recording};
use super::harness::Harness;
use super::lease::{self, Lease};
use super::nvml;
use crate::protocol::ReferenceTiming;
use autokernel_core::GpuConditions;

/// Timed calls of a measurement whose outputs are checked against the reference, drawn at
/// random before the loop, besides the last call (always checked).
pub(super) const CHECKED_TIMED_CALLS: usize = 3;
/// Back-to-back calls in the batch that looks for work hidden from the timing events.
const BATCH_CALLS: usize = 20;
/// The batch overrules the event timing when it is this much slower per call and the host
/// spent at least [`HIDDEN_WORK_WAITED`] of it waiting for the device (not enqueueing): the
/// device had work the events did not see.
const HIDDEN_WORK_RATIO: f64 = 1.5;
/// A third, not a half: a side-stream matmul whose host also enqueues slowly waited only a
/// little over half its batch, and a wrapper slower than its kernel leaves only its last
/// kernel to wait for at the end (docs/benchmarks.md, "Timing that a busy host cannot
/// fool").
const HIDDEN_WORK_WAITED: f64 = 1.0 / 3.0;
/// GPU-side slack before each timed call, in clock cycles (`torch.cuda._sleep`): about
/// 200 µs at the H200's 1.98 GHz working clock. The start event and the call's launches
/// are enqueued while the GPU flushes L2 and sleeps, so a host that falls behind for a
/// moment does not leave the GPU idle inside the timed window (docs/benchmarks.md,
/// "Timing that a busy host cannot fool").
const SLACK_CYCLES: u64 = 400_000;
/// L2 flush buffer, bytes: larger than the H200's 60 MiB L2, as `triton.testing.do_bench`'s
/// 256 MB.
const FLUSH_BYTES: usize = 256 * 1024 * 1024;

/// A uniform draw from `0..n` (`n` ≥ 1) from the operating system's randomness
/// (`getrandom`). A 64-bit value modulo `n` ≤ 2³²: the bias is below 2⁻³², nothing a
/// candidate can use.
fn random_below(n: u64) -> u64 {
    let mut buf = [0u8; 8];
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: writes at most the rest of `buf`.
        let r = unsafe { libc::getrandom(buf[got..].as_mut_ptr().cast(), buf.len() - got, 0) };
        if r > 0 {
            got += r as usize;
        } else if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            // no getrandom (a kernel before 3.17): the clock's low bits still change per call
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            return t % n.max(1);
        }
    }
    u64::from_le_bytes(buf) % n.max(1)
}

/// The indices of a measurement's `n` timed calls whose outputs are checked:
/// [`CHECKED_TIMED_CALLS`] distinct ones drawn uniformly from the first `n` − 1, and the
/// last; all of them when there are no more. Sorted.
pub(super) fn draw_checked(n: usize) -> Vec<usize> {
    if n <= CHECKED_TIMED_CALLS + 1 {
        return (0..n).collect();
    }
    // a partial Fisher-Yates shuffle of 0..n-1
    let mut pool: Vec<usize> = (0..n - 1).collect();
    for i in 0..CHECKED_TIMED_CALLS {
        let j = i + random_below((pool.len() - i) as u64) as usize;
        pool.swap(i, j);
    }
    let mut chosen: Vec<usize> = pool[..CHECKED_TIMED_CALLS].to_vec();
    chosen.push(n - 1);
    chosen.sort_unstable();
    chosen
}

/// Why a timing stopped: Python raised (the candidate, or a CUDA error it caused), or the
/// candidate changed what the loop relies on while it ran.
pub(super) enum TimingError {
    Python(PyErr),
    /// What was changed: the caller's verdict is `TAMPER`.
    Tampered(String),
}

impl From<PyErr> for TimingError {
    fn from(e: PyErr) -> Self {
        TimingError::Python(e)
    }
}

/// A checked timed output, copied where the candidate's Python cannot reach it, with the
/// offsets its inputs were taken at.
pub(super) struct KeptOutput {
    /// Per input tensor, the offset of its window in its rotation pool, in elements
    /// (`ReferenceJob::offsets`).
    pub offsets: BTreeMap<String, u64>,
    /// The output's shape.
    pub shape: Vec<usize>,
    /// Its dtype's name (`float16`), before it was made float32.
    pub dtype: String,
    /// Its values, as float32.
    values: Vec<f32>,
}

impl KeptOutput {
    /// The output's float32 values in its shape.
    ///
    /// # Errors
    /// A shape that does not match the values (an output that changed size after its
    /// first timed call).
    pub(super) fn into_array(self) -> PyResult<ArrayD<f32>> {
        ArrayD::from_shape_vec(IxDyn(&self.shape), self.values)
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
    }
}

/// Where a checked output waits until its measurement's end.
enum Pending {
    /// On the CPU: its values.
    Host(Vec<f32>),
    /// On the GPU: the first `bytes` of device buffer `slot`, copied asynchronously.
    Slot { slot: usize, bytes: usize },
}

/// One input tensor the rotation overwrites before each timed call, and its pool.
struct Rotated<'py> {
    name: String,
    tensor: Bound<'py, PyAny>,
    /// The tensor's `size()`, for the window's view.
    shape: Bound<'py, PyAny>,
    pool: Bound<'py, PyAny>,
    numel: u64,
}

/// Timing calls are judged calls (issue 21, point 2): before each timed call (outside the
/// timed window) every input tensor is overwritten in place with a window of its pool
/// (its own values, then another seed's: `harness.timing_pools`) at an offset drawn here, so
/// that values change everywhere and almost never repeat, and a cache keyed on an input's
/// address, version or sampled values misses. Which calls' outputs are checked is drawn
/// here before the loop ([`draw_checked`]) and kept here. After every timed call, checked or
/// not and in every repetition of a head-to-head, the same work is done: its output is
/// made float32 and, on the GPU, copied asynchronously into device memory of our own (one
/// of [`CHECKED_TIMED_CALLS`] + 1 slots for a checked call, else a scratch buffer), read
/// back once the measurement is over; so nothing the candidate can observe (a synchronize,
/// an allocation) tells it which calls were checked. Every timed call must launch a Triton
/// kernel of the candidate's own file.
pub(super) struct Rotation<'py> {
    inputs: Vec<Rotated<'py>>,
    /// The candidate file's slot in the launch counter (`harness.launch_slot`).
    slot: usize,
    /// The offsets of the current call's inputs.
    offsets: BTreeMap<String, u64>,
    /// The launch count before the current call.
    launches_before: u64,
    /// Timed calls that launched no Triton kernel of the candidate's file.
    pub launchless: u32,
    /// Whether this measurement's checked calls are kept (a head-to-head keeps them in one
    /// repetition; the work after each call is the same either way).
    pub keeping: bool,
    /// The checked calls of the current measurement, sorted.
    checked: Vec<usize>,
    /// The active torch function and dispatch modes when the measurement began.
    modes: (usize, usize),
    /// On the GPU: the checked outputs' slots, then the scratch buffer, sized by the first
    /// timed output (the rotation's life: a head-to-head's every repetition).
    buffers: Vec<DeviceBuffer>,
    /// Checked outputs copied, their values still to read back.
    pending: Vec<(KeptOutput, Pending)>,
    kept: Vec<KeptOutput>,
    /// A checked call whose output could not be kept (not a tensor, on the CPU, larger
    /// than the first): the check fails with this.
    pub unkept: Option<String>,
}

impl<'py> Rotation<'py> {
    /// The rotation of `inputs` (the harness's dict of the timing case's inputs) through
    /// `pools` (`harness.timing_pools`), for the candidate file `path`.
    ///
    /// # Errors
    /// When the dicts are not what the harness makes.
    pub(super) fn new(
        h: &Harness,
        py: Python<'py>,
        inputs: &[(String, Bound<'py, PyAny>)],
        pools: &Bound<'py, PyDict>,
        slot: usize,
    ) -> PyResult<Self> {
        let mut rotated = Vec::new();
        for (name, pool) in pools.iter() {
            let name: String = name.extract()?;
            let tensor = inputs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, t)| t.clone())
                .ok_or_else(|| {
                    pyo3::exceptions::PyKeyError::new_err(format!("no input `{name}`"))
                })?;
            rotated.push(Rotated {
                numel: h.torch.numel(py, &tensor)?,
                shape: h.torch.size(py, &tensor)?,
                name,
                tensor,
                pool,
            });
        }
        Ok(Self {
            inputs: rotated,
            slot,
            offsets: BTreeMap::new(),
            launches_before: 0,
            launchless: 0,
            keeping: true,
            checked: Vec::new(),
            modes: (0, 0),
            buffers: Vec::new(),
            pending: Vec::new(),
            kept: Vec::new(),
            unkept: None,
        })
    }

    /// Before a measurement's first call: notes the active modes.
    fn begin(&mut self, h: &Harness, py: Python<'py>) -> PyResult<()> {
        self.modes = h.torch.modes(py)?;
        Ok(())
    }

    /// Before the timed loop of `n` calls: draws which are checked.
    fn plan(&mut self, n: usize) {
        self.checked = if self.keeping {
            draw_checked(n)
        } else {
            Vec::new()
        };
    }

    /// `Tampered` when a torch function or dispatch mode was pushed since the loop began:
    /// it would intercept the torch calls made here between the candidate's calls.
    fn check_modes(&self, h: &Harness, py: Python<'py>) -> Result<(), TimingError> {
        let now = h.torch.modes(py)?;
        if now != self.modes {
            return Err(TimingError::Tampered(format!(
                "a timed call left a torch function or dispatch mode active ({} function, {} dispatch modes; {} and {} before the timing)",
                now.0, now.1, self.modes.0, self.modes.1
            )));
        }
        Ok(())
    }

    /// Overwrites the inputs with new windows of their pools.
    fn before(&mut self, h: &Harness, py: Python<'py>) -> Result<(), TimingError> {
        self.check_modes(h, py)?;
        for input in &self.inputs {
            let j = random_below(input.numel + 1);
            h.torch
                .rotate_into(py, &input.tensor, &input.shape, &input.pool, j, input.numel)?;
            self.offsets.insert(input.name.clone(), j);
        }
        self.launches_before = h.torch.launches(py, self.slot)?;
        Ok(())
    }

    /// After timed call `i` on the inputs `before` set: counts it when it launched no kernel
    /// of the candidate's file, and copies its output (a checked call's where it is kept);
    /// `gpu`: the measurement's device ordinal, `None` on the CPU.
    fn after(
        &mut self,
        h: &Harness,
        py: Python<'py>,
        out: &Bound<'py, PyAny>,
        i: usize,
        gpu: Option<i32>,
    ) -> Result<(), TimingError> {
        self.check_modes(h, py)?;
        let ops = &h.torch;
        let is_tensor = ops.is_tensor(py, out);
        let empty = is_tensor && ops.numel(py, out)? == 0;
        if ops.launches(py, self.slot)? == self.launches_before && !empty {
            self.launchless += 1;
        }
        let checked = self.keeping && self.checked.binary_search(&i).is_ok();
        let mut unkept = |why: String| {
            if checked {
                self.unkept.get_or_insert(why);
            }
        };
        if !is_tensor {
            let type_name = out.get_type().name()?.to_string();
            unkept(format!("a timed call returned a {type_name}, not a tensor"));
            return Ok(());
        }
        let (t32, shape, device) = ops.float32(py, out)?;
        let bytes = shape
            .iter()
            .try_fold(size_of::<f32>(), |b, &d| b.checked_mul(d))
            .unwrap_or(usize::MAX);
        let pending = if let Some(gpu) = gpu {
            if device < 0 {
                unkept("a timed call returned a tensor on the CPU".into());
                return Ok(());
            }
            if self.buffers.is_empty() {
                for _ in 0..=CHECKED_TIMED_CALLS + 1 {
                    self.buffers.push(DeviceBuffer::new(bytes)?);
                }
            }
            let slot = if checked {
                self.pending.len()
            } else {
                CHECKED_TIMED_CALLS + 1
            };
            if bytes > self.buffers[slot].len() {
                unkept(format!(
                    "a timed call returned shape {shape:?}, larger than its first timed call's"
                ));
                return Ok(());
            }
            // in the stream order of the caller (torch's current stream now): an output
            // not ready there is not ready for whoever uses it
            let stream = ops.current_stream(py, gpu)? as Stream;
            if bytes > 0 {
                self.buffers[slot].copy_from_async(ops.data_ptr(py, &t32)?, bytes, stream)?;
            }
            Pending::Slot { slot, bytes }
        } else {
            Pending::Host(ops.host_values(py, &t32)?)
        };
        if checked {
            let out = KeptOutput {
                offsets: self.offsets.clone(),
                shape,
                dtype: ops.dtype_name(out)?,
                values: Vec::new(),
            };
            self.pending.push((out, pending));
        }
        Ok(())
    }

    /// After a measurement's last call (and the device's synchronize): the checked
    /// outputs read back.
    fn materialize(&mut self) -> PyResult<()> {
        for (mut out, pending) in std::mem::take(&mut self.pending) {
            out.values = match pending {
                Pending::Host(v) => v,
                Pending::Slot { slot, bytes } => self.buffers[slot].read_f32(bytes)?,
            };
            self.kept.push(out);
        }
        Ok(())
    }

    /// The outputs kept so far, in the order of their calls.
    pub(super) fn take_kept(&mut self) -> Vec<KeptOutput> {
        std::mem::take(&mut self.kept)
    }
}

/// What a measurement calls.
pub(super) enum Callee<'py> {
    /// A callable taking no arguments (the reference's, in the trusted worker).
    Fixed(Bound<'py, PyAny>),
    /// A candidate's kernel_fn, called with the inputs Rust holds (taken from the harness
    /// before any of the candidate's calls) and the kind's parameters, through a
    /// `functools.partial` made anew for each call: no dict the candidate could keep and
    /// edit (say, to give later calls an input the rotation does not overwrite) holds them.
    Candidate {
        function: Bound<'py, PyAny>,
        inputs: Vec<(String, Bound<'py, PyAny>)>,
        params: Vec<(String, Bound<'py, PyAny>)>,
    },
}

impl<'py> Callee<'py> {
    /// The candidate `cand`'s kernel_fn on `inputs` with the kind's parameters `params`
    /// (JSON), as `harness.timed_call` gives them.
    fn candidate(
        h: &Harness,
        py: Python<'py>,
        cand: &Bound<'py, PyAny>,
        kind: &str,
        inputs: Vec<(String, Bound<'py, PyAny>)>,
        params: &str,
    ) -> PyResult<Self> {
        let (function, kwargs): (Bound<'py, PyAny>, Bound<'py, PyDict>) = h
            .func(py, "timed_call")
            .call1((cand, kind, params))?
            .extract()?;
        let params = kwargs
            .iter()
            .map(|(k, v)| Ok((k.extract::<String>()?, v)))
            .collect::<PyResult<_>>()?;
        Ok(Callee::Candidate {
            function,
            inputs,
            params,
        })
    }

    /// One call's callable, taking no arguments.
    fn callable(&self, h: &Harness, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self {
            Callee::Fixed(call) => Ok(call.clone()),
            Callee::Candidate {
                function,
                inputs,
                params,
            } => {
                let kwargs = PyDict::new(py);
                for (k, v) in inputs.iter().chain(params) {
                    kwargs.set_item(k, v)?;
                }
                h.torch.partial(py, function, &kwargs)
            }
        }
    }

    /// The inputs as a fresh dict by name.
    fn inputs_dict(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        if let Callee::Candidate { inputs, .. } = self {
            for (k, v) in inputs {
                d.set_item(k, v)?;
            }
        }
        Ok(d)
    }

    /// One call, through the op monitor's scope when there is one; a candidate's call as a
    /// window of the device activity recording, if one is open ([`cupti::window`]).
    fn invoke(
        &self,
        h: &Harness,
        py: Python<'py>,
        scope: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let call = self.callable(h, py)?;
        let run = || match scope {
            Some(scope) => scope.call1((&call,)),
            None => call.call0(),
        };
        match self {
            Callee::Fixed(_) => run(),
            Callee::Candidate { .. } => cupti::window(run),
        }
    }
}

/// A measurement's hold on the GPU: the lease taken (no other worker runs GPU work until it
/// is dropped: [`super::lease`]) and the GPU's state read by NVML as it began.
pub(super) struct Quiet {
    _lease: Lease,
    ordinal: Option<i32>,
    start: Option<GpuConditions>,
}

impl Quiet {
    /// Takes the lease (waiting, the GIL released, while another worker holds it) and reads
    /// the GPU's state; on the CPU, neither.
    ///
    /// # Errors
    /// torch's current device cannot be read.
    pub(super) fn begin(h: &Harness, py: Python<'_>) -> PyResult<Quiet> {
        if !h.on_gpu() {
            return Ok(Quiet {
                _lease: Lease::none(),
                ordinal: None,
                start: None,
            });
        }
        let ordinal = h.torch.current_device(py)?;
        let lease = py.detach(lease::acquire);
        let start = nvml::now(ordinal).map(|mut c| {
            c.lease_wait_ms = lease.waited_ms;
            c
        });
        Ok(Quiet {
            _lease: lease,
            ordinal: Some(ordinal),
            start,
        })
    }

    /// Releases the lease: the conditions from the start to now, or `None` on the CPU or
    /// where NVML cannot be read.
    pub(super) fn end(self) -> Option<GpuConditions> {
        let mut conditions = self.start?;
        if let Some(now) = self.ordinal.and_then(nvml::now) {
            conditions.absorb(&now);
        }
        Some(conditions)
    }
}

/// The median over interleaved repetitions of `reference_us[i] / candidate_us[i]`, the
/// speedup a head-to-head reports ([`compare_kernels`]'s sides, paired by repetition); `None`
/// unless both have the same, non-zero number of samples, every candidate's above zero.
pub(crate) fn paired_speedup(reference_us: &[f64], candidate_us: &[f64]) -> Option<f64> {
    if reference_us.is_empty()
        || reference_us.len() != candidate_us.len()
        || candidate_us.iter().any(|c| *c <= 0.0)
    {
        return None;
    }
    let ratios: Vec<f64> = reference_us
        .iter()
        .zip(candidate_us)
        .map(|(r, c)| r / c)
        .collect();
    Some(median(&ratios))
}

/// One [`ReferenceTiming`] of the repetitions of an interleaved timing, in order: eager's
/// samples and their median, the last torch.compile figure or error given, every
/// repetition's GPU conditions absorbed.
pub(crate) fn combined_references(times: &[ReferenceTiming]) -> ReferenceTiming {
    let samples_us: Vec<f64> = times.iter().map(|t| t.reference_latency_us).collect();
    let mut conditions: Option<GpuConditions> = None;
    for c in times.iter().filter_map(|t| t.conditions.as_ref()) {
        match conditions.as_mut() {
            Some(all) => all.absorb(c),
            None => conditions = Some(c.clone()),
        }
    }
    let compiled = times
        .iter()
        .rev()
        .find(|t| t.compiled_latency_us.is_some() || t.compiled_error.is_some());
    ReferenceTiming {
        reference_latency_us: median(&samples_us),
        compiled_latency_us: compiled.and_then(|t| t.compiled_latency_us),
        compiled_error: compiled.and_then(|t| t.compiled_error.clone()),
        conditions,
        samples_us,
    }
}

/// Median (mean of the middle two for an even count); 0 for an empty slice.
pub(crate) fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Latency of `call` in microseconds, timed from here. `monitor`: the op monitor
/// (`harness._TimedOps`, entered) whose scope every call runs in; `rotation`: inputs
/// overwritten before each timed call and a few outputs checked.
///
/// GPU: the median device time between CUDA events on torch's current stream, L2 flushed
/// and a slack slept before each call (the method of `triton.testing.do_bench`, plus the
/// slack): about 25 ms of warm-up (10 when `quick`) and 100 ms of calls (30 when `quick`),
/// between 10 and 1000 of them. Work a candidate enqueues on another stream is invisible
/// to those events, so a batch of back-to-back calls ended by one device-wide synchronize
/// is timed too: when it is much slower per call than the events say and the host spent
/// much of it waiting on the synchronize, its per-call time is the latency.
/// CPU: a wall clock, the median of 3 calls (2 when `quick`) after one warm-up.
///
/// # Errors
/// What a call raised, or a CUDA error (a candidate's illegal access shows up there);
/// `Tampered` for a mode left active.
pub(super) fn measure_us<'py>(
    h: &Harness,
    py: Python<'py>,
    call: &Callee<'py>,
    monitor: Option<&Bound<'py, PyAny>>,
    quick: bool,
    mut rotation: Option<&mut Rotation<'py>>,
) -> Result<f64, TimingError> {
    let scope = monitor.map(|m| m.getattr("call")).transpose()?;
    let scope = scope.as_ref();
    if let Some(r) = rotation.as_deref_mut() {
        r.begin(h, py)?;
    }
    if !h.on_gpu() {
        call.invoke(h, py, scope)?;
        let n = if quick { 2 } else { 3 };
        if let Some(r) = rotation.as_deref_mut() {
            r.plan(n);
        }
        let mut samples = Vec::with_capacity(n);
        for i in 0..n {
            if let Some(r) = rotation.as_deref_mut() {
                r.before(h, py)?;
            }
            let t0 = Instant::now();
            let out = call.invoke(h, py, scope)?;
            samples.push(t0.elapsed().as_secs_f64() * 1e6);
            if let Some(r) = rotation.as_deref_mut() {
                r.after(h, py, &out, i, None)?;
            }
        }
        if let Some(r) = rotation.as_deref_mut() {
            r.materialize()?;
        }
        return Ok(median(&samples));
    }
    let device = h.torch.current_device(py)?;
    cuda::ensure_context(device)?;
    let kernel_us = kernel_us(h, py, call, scope, quick, rotation, device)?;
    cuda::synchronize()?;
    let t0 = Instant::now();
    for _ in 0..BATCH_CALLS {
        call.invoke(h, py, scope)?;
    }
    let enqueued = Instant::now();
    cuda::synchronize()?;
    let done = Instant::now();
    let total = (done - t0).as_secs_f64();
    let batch_us = total * 1e6 / BATCH_CALLS as f64;
    let waited = (done - enqueued).as_secs_f64() / total.max(1e-12);
    Ok(
        if batch_us > HIDDEN_WORK_RATIO * kernel_us && waited > HIDDEN_WORK_WAITED {
            batch_us
        } else {
            kernel_us
        },
    )
}

/// The event timing of [`measure_us`] on the GPU, in microseconds; the checked outputs
/// read back after the loop.
fn kernel_us<'py>(
    h: &Harness,
    py: Python<'py>,
    call: &Callee<'py>,
    scope: Option<&Bound<'py, PyAny>>,
    quick: bool,
    mut rotation: Option<&mut Rotation<'py>>,
    device: i32,
) -> Result<f64, TimingError> {
    let ops = &h.torch;
    let stream = |py| -> PyResult<Stream> { Ok(ops.current_stream(py, device)? as Stream) };
    let flush = cuda::flush_buffer(FLUSH_BYTES)?;
    let (warmup_ms, rep_ms) = if quick { (10.0, 30.0) } else { (25.0, 100.0) };
    let (start, end) = (Event::new()?, Event::new()?);
    start.record(stream(py)?)?;
    for _ in 0..5 {
        call.invoke(h, py, scope)?;
    }
    end.record(stream(py)?)?;
    cuda::synchronize()?;
    let est_ms = (f64::from(start.elapsed_ms(&end)?) / 5.0).max(1e-3);
    let warmups = ((warmup_ms / est_ms) as usize).clamp(1, 2000);
    for _ in 0..warmups {
        call.invoke(h, py, scope)?;
    }
    // each call also costs the flush and the slack, ~0.3 ms of GPU time
    let n = ((rep_ms / (est_ms + 0.3)) as usize).clamp(10, 1000);
    if let Some(r) = rotation.as_deref_mut() {
        r.plan(n);
    }
    let starts: Vec<Event> = (0..n).map(|_| Event::new()).collect::<PyResult<_>>()?;
    let ends: Vec<Event> = (0..n).map(|_| Event::new()).collect::<PyResult<_>>()?;
    for i in 0..n {
        if let Some(r) = rotation.as_deref_mut() {
            r.before(h, py)?;
        }
        // both events of a call on torch's current stream as the call begins (the stream
        // `torch.cuda.Event.record()` would take): a kernel that moves the current stream
        // is timed where it then works from its next call on; work it leaves elsewhere is
        // the batch's to find
        let s = stream(py)?;
        flush.zero_async(s)?;
        cupti::flushed();
        ops.sleep(py, SLACK_CYCLES)?;
        starts[i].record(s)?;
        let out = call.invoke(h, py, scope)?;
        ends[i].record(s)?;
        if let Some(r) = rotation.as_deref_mut() {
            r.after(h, py, &out, i, Some(device))?;
        }
    }
    cuda::synchronize()?;
    if let Some(r) = rotation {
        cupti::judges_read(|| r.materialize())?;
    }
    let samples: Vec<f64> = starts
        .iter()
        .zip(&ends)
        .map(|(s, e)| s.elapsed_ms(e).map(|ms| f64::from(ms) * 1000.0))
        .collect::<PyResult<_>>()?;
    Ok(median(&samples))
}

/// Runs `f` inside a fresh op monitor (`harness._TimedOps`, entered before and left after,
/// also when `f` fails): `f`'s value and the aten ops of the monitored calls, all and the
/// calls' own, as `_TimedOps.ops` gives them.
///
/// # Errors
/// What `f` or the monitor raised; `Tampered` when the profiler's session was restarted
/// inside a call (its ops before are lost).
pub(super) fn monitored<'py, T>(
    h: &Harness,
    py: Python<'py>,
    f: impl FnOnce(&Bound<'py, PyAny>) -> Result<T, TimingError>,
) -> Result<(T, Vec<String>, Vec<String>), TimingError> {
    let monitor = h.func(py, "timed_ops").call0()?;
    monitor.call_method0("__enter__")?;
    let value = f(&monitor);
    let none = py.None();
    let left = monitor.call_method1("__exit__", (&none, &none, &none));
    let value = value?;
    left?;
    let (every, own, restarted): (Vec<String>, Vec<String>, Option<String>) =
        monitor.call_method0("ops")?.extract()?;
    if let Some(why) = restarted {
        return Err(TimingError::Tampered(format!("a timed call {why}")));
    }
    Ok((value, every, own))
}

/// What a kernel's timed calls did besides taking their time: what the judge reads to
/// decide whether the time is of the kernel's own work (`execute::not_its_own`) and
/// whether its outputs were right (`execute::check_timed_outputs`).
#[derive(Default)]
pub(super) struct TimedCalls {
    /// Timed calls that launched no Triton kernel of the candidate's file, by the harness's
    /// launch counter.
    pub launchless: u32,
    /// Aten ops dispatched in the timed calls, nested ones included, sorted.
    pub ops: Vec<String>,
    /// Those the timed calls dispatched themselves, sorted.
    pub own_ops: Vec<String>,
    /// What the device saw the timed calls do (GPU, where CUPTI can be used).
    pub device: Option<DeviceActivity>,
    /// The checked timed outputs, in call order.
    pub kept: Vec<KeptOutput>,
    /// A checked call whose output could not be kept.
    pub unkept: Option<String>,
}

/// What timing a candidate found ([`CandidateTimer`]).
pub(super) struct Timed {
    /// Microseconds per call: the median of [`Timed::samples_us`].
    pub latency_us: f64,
    /// Microseconds per call in each repetition, in order.
    pub samples_us: Vec<f64>,
    /// Peak device memory of the untimed first call, MB; `None` on the CPU.
    pub peak_vram_mb: Option<f64>,
    /// CONFIG keys the untimed first call read (`harness._config_keys_read`).
    pub config_keys_read: Option<Vec<String>>,
    /// What the timed calls did.
    pub calls: TimedCalls,
    /// What the GPU was doing meanwhile ([`Quiet`]).
    pub conditions: Option<GpuConditions>,
}

/// The timing case's inputs (`harness.timing_inputs`), by name, in the harness's order.
#[allow(clippy::too_many_arguments)]
fn timing_inputs<'py>(
    h: &Harness,
    py: Python<'py>,
    kind: &str,
    shape: &[u64],
    dtype: &str,
    seed: u64,
    layout: &str,
    params: &str,
) -> PyResult<Vec<(String, Bound<'py, PyAny>)>> {
    let inputs = h
        .func(py, "timing_inputs")
        .call1((kind, shape.to_vec(), dtype, seed, layout, params))?
        .cast_into::<PyDict>()?;
    inputs
        .iter()
        .map(|(k, v)| Ok((k.extract::<String>()?, v)))
        .collect()
}

/// The rotation pools of the timing case (`harness.timing_pools`: per input, its own values
/// and another seed's) for the inputs `call` holds; the case as [`timing_inputs`] takes it.
///
/// # Errors
/// What the harness raised.
#[allow(clippy::too_many_arguments)]
fn timing_pools<'py>(
    h: &Harness,
    py: Python<'py>,
    call: &Callee<'py>,
    kind: &str,
    shape: Vec<u64>,
    dtype: &str,
    seed: u64,
    layout: &str,
    params: &str,
) -> PyResult<Bound<'py, PyDict>> {
    h.func(py, "timing_pools")
        .call1((
            kind,
            shape,
            dtype,
            seed,
            layout,
            params,
            call.inputs_dict(py)?,
        ))?
        .cast_into::<PyDict>()
        .map_err(PyErr::from)
}

/// What [`CandidateTimer::new`] reads of the untimed first call.
#[derive(serde::Deserialize)]
struct FirstCall {
    config_keys_read: Option<Vec<String>>,
    peak_vram_mb: Option<f64>,
}

/// Interleaved repetitions of a bench's timing against the reference on a GPU (issue 36,
/// point 2), each a quick [`measure_us`] of the candidate beside one of the reference in
/// the trusted worker: an odd count, so that the median is one repetition's and one
/// disturbed repetition cannot move it. `--quick` takes [`TIMING_REPETITIONS_QUICK`].
pub(crate) const TIMING_REPETITIONS: u32 = 5;
/// [`TIMING_REPETITIONS`] of a `--quick` bench, and of every bench on the CPU, where the
/// interpreter's timings say nothing of a GPU's and each call costs whole seconds.
pub(crate) const TIMING_REPETITIONS_QUICK: u32 = 3;

/// A bench's timing of the loaded candidate at the timing case, in repetitions interleaved
/// with the reference's (the caller times the reference between them): one untimed call
/// reading its CONFIG keys and peak memory first, then per [`CandidateTimer::repetition`]
/// a quick [`measure_us`] under the op monitor and the device's record, with the inputs
/// rotated, each under its own hold of the GPU ([`Quiet`]) so that the trusted worker can
/// take the GPU for the reference's repetition in between. The same method as a
/// head-to-head's side ([`compare_kernels`]), so that the bench's latency and a
/// head-to-head's agree; the checked outputs are kept in one repetition drawn at random.
pub(super) struct CandidateTimer<'py> {
    call: Callee<'py>,
    rotation: Rotation<'py>,
    first: FirstCall,
    /// The repetition whose checked outputs are kept.
    checked: u32,
    samples_us: Vec<f64>,
    device: Option<DeviceActivity>,
    ops: BTreeSet<String>,
    own_ops: BTreeSet<String>,
    conditions: Option<GpuConditions>,
}

impl<'py> CandidateTimer<'py> {
    /// Makes the timing case's inputs (`kind`, `shape`, `dtype`, `seed`, `layout`, the
    /// kind's parameters as JSON) and the rotation, then makes the untimed first call, for
    /// `repetitions` repetitions.
    ///
    /// # Errors
    /// What the candidate or the harness raised, or a CUDA error.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        h: &Harness,
        py: Python<'py>,
        cand: &Bound<'py, PyAny>,
        kind: &str,
        shape: Vec<u64>,
        dtype: &str,
        seed: u64,
        layout: &str,
        params: &str,
        repetitions: u32,
    ) -> Result<Self, TimingError> {
        // the inputs and the rotation are taken before any call of the candidate's
        let inputs = timing_inputs(h, py, kind, &shape, dtype, seed, layout, params)?;
        let call = Callee::candidate(h, py, cand, kind, inputs.clone(), params)?;
        let slot: usize = h
            .func(py, "launch_slot")
            .call1((cand.getattr("path")?,))?
            .extract()?;
        let first: String = h
            .func(py, "untimed_first_call")
            .call1((cand, call.callable(h, py)?))?
            .extract()?;
        let first: FirstCall = serde_json::from_str(&first)
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
        // the pools after the first call, so that they never count in its peak memory
        let pools = timing_pools(h, py, &call, kind, shape, dtype, seed, layout, params)?;
        let rotation = Rotation::new(h, py, &inputs, &pools, slot)?;
        Ok(Self {
            call,
            rotation,
            first,
            checked: random_below(u64::from(repetitions.max(1))) as u32,
            samples_us: Vec::new(),
            device: None,
            ops: BTreeSet::new(),
            own_ops: BTreeSet::new(),
            conditions: None,
        })
    }

    /// One repetition: the lease taken, the GPU's clocks spun up before the first, a quick
    /// [`measure_us`]; its microseconds per call.
    ///
    /// # Errors
    /// What the candidate raised, or a CUDA error; `Tampered` for a mode left active or a
    /// profiler session restarted.
    pub(super) fn repetition(&mut self, h: &Harness, py: Python<'py>) -> Result<f64, TimingError> {
        let quiet = Quiet::begin(h, py)?;
        if self.samples_us.is_empty() {
            h.func(py, "spin_up").call0()?;
        }
        self.rotation.keeping = self.samples_us.len() as u32 == self.checked;
        let (call, rotation) = (&self.call, &mut self.rotation);
        let ((us, device), every, own) = monitored(h, py, |monitor| {
            recorded(h, || {
                measure_us(h, py, call, Some(monitor), true, Some(rotation))
            })
        })?;
        if let Some(activity) = device {
            self.device
                .get_or_insert_with(DeviceActivity::default)
                .absorb(activity);
        }
        self.ops.extend(every);
        self.own_ops.extend(own);
        match (self.conditions.as_mut(), quiet.end()) {
            (Some(all), Some(more)) => all.absorb(&more),
            (None, more) => self.conditions = more,
            (Some(_), None) => {}
        }
        self.samples_us.push(us);
        Ok(us)
    }

    /// What the repetitions found: the median as the latency, every sample, what the timed
    /// calls did.
    pub(super) fn finish(mut self) -> Timed {
        Timed {
            latency_us: median(&self.samples_us),
            samples_us: std::mem::take(&mut self.samples_us),
            peak_vram_mb: self.first.peak_vram_mb,
            config_keys_read: self.first.config_keys_read.take(),
            conditions: self.conditions,
            calls: TimedCalls {
                launchless: self.rotation.launchless,
                ops: self.ops.into_iter().collect(),
                own_ops: self.own_ops.into_iter().collect(),
                device: self.device,
                kept: self.rotation.take_kept(),
                unkept: self.rotation.unkept.take(),
            },
        }
    }
}

/// `measure`, a measurement inside the op monitor's session, under a recording of the
/// device's activity on the GPU ([`Recording`], started after the session: see its
/// `start`). Returns its value and what the device saw the candidate's calls do.
///
/// # Errors
/// `measure`'s; a Python `RuntimeError` when CUPTI's buffers cannot be flushed.
fn recorded<T>(
    h: &Harness,
    measure: impl FnOnce() -> Result<T, TimingError>,
) -> Result<(T, Option<DeviceActivity>), TimingError> {
    if h.on_gpu() {
        // what the candidate enqueued before (a CUDA graph left waiting, say) finishes
        // first: kernels launched before the recording starts are never recorded
        cuda::synchronize()?;
    }
    let recording = Recording::start(h.on_gpu(), FLUSH_BYTES).map_err(|e| {
        TimingError::Tampered(format!(
            "a timed call's measurement could not record the device's activity ({e}): a profiler left running?"
        ))
    })?;
    let value = measure()?;
    let device = recording
        .map(Recording::finish)
        .transpose()
        .map_err(pyo3::exceptions::PyRuntimeError::new_err)?;
    Ok((value, device))
}

/// One kernel's side of a head-to-head ([`compare_kernels`]).
#[derive(Default)]
pub(super) struct Side {
    /// Microseconds per call, one per repetition.
    pub us: Vec<f64>,
    /// What its timed calls did, over every repetition.
    pub calls: TimedCalls,
}

/// Times two loaded kernels (`kernels`: incumbent, candidate) interleaved `repetitions`
/// times, alternating which goes first, each a quick [`measure_us`] under the op monitor on
/// the same rotated inputs of the case (`kind` … `params` as [`CandidateTimer::new`]'s); the
/// outputs of one repetition, drawn here, are kept for the check, all under one hold of
/// the GPU ([`Quiet`]). Returns both sides and what the GPU was doing meanwhile.
///
/// # Errors
/// What a kernel or the harness raised, or a CUDA error; `Tampered` for a mode left
/// active.
#[allow(clippy::too_many_arguments)]
pub(super) fn compare_kernels<'py>(
    h: &Harness,
    py: Python<'py>,
    kernels: [&Bound<'py, PyAny>; 2],
    kind: &str,
    shape: Vec<u64>,
    dtype: &str,
    seed: u64,
    repetitions: u32,
    layout: &str,
    params: &str,
) -> Result<([Side; 2], Option<GpuConditions>), TimingError> {
    let inputs = timing_inputs(h, py, kind, &shape, dtype, seed, layout, params)?;
    let mut calls = Vec::new();
    for k in kernels {
        calls.push(Callee::candidate(h, py, k, kind, inputs.clone(), params)?);
    }
    let pools = timing_pools(h, py, &calls[0], kind, shape, dtype, seed, layout, params)?;
    let mut rotations = Vec::new();
    for k in kernels {
        let slot: usize = h
            .func(py, "launch_slot")
            .call1((k.getattr("path")?,))?
            .extract()?;
        rotations.push(Rotation::new(h, py, &inputs, &pools, slot)?);
    }
    let repetitions = repetitions.max(1);
    let checked = random_below(u64::from(repetitions)) as u32;
    let mut sides: [Side; 2] = Default::default();
    let mut ops: [(BTreeSet<String>, BTreeSet<String>); 2] = Default::default();
    let quiet = Quiet::begin(h, py)?;
    h.func(py, "spin_up").call0()?;
    for r in 0..repetitions {
        let order = if r % 2 == 1 { [1, 0] } else { [0, 1] };
        for k in order {
            let rotation = &mut rotations[k];
            rotation.keeping = r == checked;
            let ((us, device), every, own) = monitored(h, py, |monitor| {
                recorded(h, || {
                    measure_us(h, py, &calls[k], Some(monitor), true, Some(rotation))
                })
            })?;
            if let Some(activity) = device {
                sides[k]
                    .calls
                    .device
                    .get_or_insert_with(DeviceActivity::default)
                    .absorb(activity);
            }
            sides[k].us.push(us);
            ops[k].0.extend(every);
            ops[k].1.extend(own);
        }
    }
    for (k, side) in sides.iter_mut().enumerate() {
        let calls = &mut side.calls;
        calls.launchless = rotations[k].launchless;
        calls.kept = rotations[k].take_kept();
        calls.unkept = rotations[k].unkept.take();
        calls.ops = std::mem::take(&mut ops[k].0).into_iter().collect();
        calls.own_ops = std::mem::take(&mut ops[k].1).into_iter().collect();
    }
    Ok((sides, quiet.end()))
}

/// The reference's latencies at the timing case, in the trusted reference worker: eager
/// PyTorch (`harness.reference_eager`) first, then, when `compiled`, torch.compile of it
/// (`harness.reference_compiled`), each a [`measure_us`] without the op monitor or a
/// rotation, each under a hold of the GPU ([`Quiet`]). `spin_up`: the GPU's clocks brought
/// up first (`harness.spin_up`); the parent leaves it out for a repetition that follows
/// another measurement within moments, when the clocks are up already.
///
/// # Errors
/// What the harness or eager PyTorch raised, or a CUDA error.
#[allow(clippy::too_many_arguments)]
pub(super) fn time_reference<'py>(
    h: &Harness,
    py: Python<'py>,
    kind: &str,
    shape: Vec<u64>,
    dtype: &str,
    seed: u64,
    quick: bool,
    compiled: bool,
    spin_up: bool,
    layout: &str,
    params: &str,
) -> PyResult<ReferenceTimes> {
    let untampered = |e: TimingError| match e {
        TimingError::Python(e) => e,
        // no rotation, no candidate: nothing here checks modes
        TimingError::Tampered(why) => pyo3::exceptions::PyRuntimeError::new_err(why),
    };
    let eager = Callee::Fixed(h.func(py, "reference_eager").call1((
        kind,
        shape.clone(),
        dtype,
        seed,
        layout,
        params,
    ))?);
    let quiet = Quiet::begin(h, py)?;
    if spin_up {
        h.func(py, "spin_up").call0()?;
    }
    let eager_us = measure_us(h, py, &eager, None, quick, None).map_err(untampered)?;
    let mut times = ReferenceTimes {
        eager_us,
        compiled_us: None,
        compiled_error: None,
        conditions: quiet.end(),
    };
    if !compiled {
        return Ok(times);
    }
    // compiled with the lease free (seconds of host work), timed under it
    let (compiled_call, error): (Option<Bound<'py, PyAny>>, Option<String>) = h
        .func(py, "reference_compiled")
        .call1((kind, shape, dtype, seed, layout, params))?
        .extract()?;
    let Some(c) = compiled_call else {
        times.compiled_error = error;
        return Ok(times);
    };
    let quiet = Quiet::begin(h, py)?;
    // torch.compile is optional: what stops it is reported, not raised
    match measure_us(h, py, &Callee::Fixed(c), None, quick, None) {
        Ok(us) => times.compiled_us = Some(us),
        Err(e) => {
            times.compiled_error =
                Some(h.describe(py, &untampered(e)).0.chars().take(500).collect())
        }
    }
    if let (Some(all), Some(more)) = (times.conditions.as_mut(), quiet.end()) {
        all.absorb(&more);
    }
    Ok(times)
}

/// The reference's latencies ([`time_reference`]).
pub(super) struct ReferenceTimes {
    /// Eager PyTorch, microseconds.
    pub eager_us: f64,
    /// torch.compile of it, microseconds, when asked for and it compiled.
    pub compiled_us: Option<f64>,
    /// Why torch.compile gave none.
    pub compiled_error: Option<String>,
    /// What the GPU was doing meanwhile ([`Quiet`]).
    pub conditions: Option<GpuConditions>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checked_calls_are_distinct_in_range_and_end_with_the_last() {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..2000 {
            let c = draw_checked(50);
            assert_eq!(c.len(), CHECKED_TIMED_CALLS + 1);
            assert_eq!(*c.last().unwrap(), 49);
            assert!(c.windows(2).all(|w| w[0] < w[1]), "{c:?}");
            seen.extend(c[..CHECKED_TIMED_CALLS].iter().copied());
        }
        // every call but the last can be drawn: 2000 draws of 3 from 49 miss one with
        // probability about 49 · (46/49)^2000, nil
        assert_eq!(seen, (0..49).collect());
    }

    #[test]
    fn median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn a_short_measurement_checks_every_call() {
        assert_eq!(draw_checked(3), vec![0, 1, 2]);
        assert_eq!(draw_checked(4), vec![0, 1, 2, 3]);
        assert_eq!(draw_checked(0), Vec::<usize>::new());
    }

    #[test]
    fn draws_below_n_cover_the_range() {
        let mut counts = [0u32; 5];
        for _ in 0..5000 {
            counts[random_below(5) as usize] += 1;
        }
        // each value expected 1000 times; 800 is over 6 standard deviations (~28) away
        assert!(counts.iter().all(|&c| c > 800), "{counts:?}");
        assert_eq!(random_below(1), 0);
    }
}

//! What the device itself saw a candidate's timed calls do (issue 21, point 3, on the GPU):
//! every kernel they launched and every copy they made, from CUPTI's activity records,
//! read here in Rust. The op check of the harness reads torch's profiler, whose events are
//! data in the candidate's process (its switches, `_toggle_collection_dynamic` and
//! `_enable_record_function`, are removed from that process by the harness), and its
//! launch counter is a Python list the candidate can bump; the records here come from the CUDA driver through CUPTI into buffers
//! no Python object holds, whatever launched the work (torch, cuBLAS, a Triton kernel, a
//! CUDA graph).
//!
//! CUPTI is the one torch already loaded (`libcupti.so.13` for torch's CUDA 13 wheels, `.12`
//! for CUDA 12's: libtorch_cpu links it for the profiler), opened again with `dlopen`:
//! no link-time dependency, so the worker builds and runs without CUDA, where nothing here
//! is called. Signatures and record layouts: `cupti_activity.h` of CUPTI 13 (records are
//! packed, 8-byte aligned: `CUpti_ActivityAPI`, `CUpti_ActivityKernel10`,
//! `CUpti_ActivityMemcpy6`, `CUpti_ActivityMemset4`; the offsets read here were checked
//! with `offsetof` against CUPTI 13's header, which torch 2.11's CUDA 13 wheels ship).
//!
//! A call's work is told from the judge's own between calls by CUPTI's host timestamps:
//! the API calls (runtime or driver) that begin while a call of the candidate runs are
//! its, on any thread, and the kernels and copies they enqueued are found by their
//! correlation id. What begins outside every call must be the judge's own work (its copies,
//! its sleep, its read-back of the kept outputs): a candidate's thread or hook that computes
//! between two calls, before the start event, shows there. The timed loop's own L2 flushes
//! (a driver memset per timed call) are counted too: a profiler a candidate starts takes
//! CUPTI's buffers over, and the flushes missing from ours say so.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::{Mutex, OnceLock};

type CuptiResult = c_int;
/// `CUpti_ActivityKind` values (cupti_activity.h).
const KIND_MEMCPY: u32 = 1;
const KIND_MEMSET: u32 = 2;
const KIND_DRIVER: u32 = 4;
const KIND_RUNTIME: u32 = 5;
const KIND_CONCURRENT_KERNEL: u32 = 10;
/// The kinds recorded, enabled in this order and disabled in reverse.
const KINDS: [u32; 5] = [
    KIND_RUNTIME,
    KIND_DRIVER,
    KIND_CONCURRENT_KERNEL,
    KIND_MEMCPY,
    KIND_MEMSET,
];
/// `CUPTI_ACTIVITY_MEMCPY_KIND_DTOH`.
const MEMCPY_DTOH: u8 = 2;
/// `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`: deliver buffers not yet full too.
const FLUSH_FORCED: u32 = 1;
/// One activity buffer, bytes (CUPTI asks for more as they fill: a measurement of a
/// thousand calls of a few launches each fills less than one).
const BUFFER_BYTES: usize = 8 << 20;
/// CUPTI's `ACTIVITY_RECORD_ALIGNMENT`.
const BUFFER_ALIGN: usize = 8;

/// CUPTI's entry points, resolved once per process.
struct Cupti {
    register_callbacks: unsafe extern "C" fn(
        unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize),
        unsafe extern "C" fn(*mut c_void, u32, *mut u8, usize, usize),
    ) -> CuptiResult,
    enable: unsafe extern "C" fn(u32) -> CuptiResult,
    disable: unsafe extern "C" fn(u32) -> CuptiResult,
    flush_all: unsafe extern "C" fn(u32) -> CuptiResult,
    next_record: unsafe extern "C" fn(*mut u8, usize, *mut *mut u8) -> CuptiResult,
    timestamp: unsafe extern "C" fn(*mut u64) -> CuptiResult,
    result_string: unsafe extern "C" fn(CuptiResult, *mut *const c_char) -> CuptiResult,
}

static CUPTI: OnceLock<Result<Cupti, String>> = OnceLock::new();

/// One record, as much of it as the judgement reads.
#[derive(Debug, Clone)]
enum Record {
    /// A runtime or driver API call that began at `start_ns` (CUPTI's host clock).
    Api {
        start_ns: u64,
        correlation: u32,
    },
    Kernel {
        name: String,
        correlation: u32,
    },
    Memcpy {
        kind: u8,
        bytes: u64,
        correlation: u32,
    },
    Memset {
        bytes: u64,
        correlation: u32,
    },
}

/// The buffers [`buffer_requested`] handed out and not yet completed, by address: a buffer
/// another client of CUPTI (torch's profiler) allocated is never parsed or freed here.
static BUFFERS: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

/// Records delivered by CUPTI (on its own thread or on a flush), since the last
/// [`Recording::start`].
static RECORDS: Mutex<Vec<Record>> = Mutex::new(Vec::new());
/// The open recording (`None` while none is).
static OPEN: Mutex<Option<Open>> = Mutex::new(None);

/// What an open recording notes as the timed loop runs.
#[derive(Default)]
struct Open {
    /// Each candidate call's (start, end) on CUPTI's host clock, in call order.
    windows: Vec<(u64, u64)>,
    /// The judge's own read-backs of kept outputs ([`judges_read`]), no Python inside.
    reads: Vec<(u64, u64)>,
    /// The timed loop's L2 flushes made ([`flushed`]).
    flushes: usize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // a panic elsewhere never leaves these half-written: a push or a take
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

unsafe extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max: *mut usize) {
    let layout = std::alloc::Layout::from_size_align(BUFFER_BYTES, BUFFER_ALIGN)
        .expect("a valid constant layout");
    // SAFETY: a non-zero size; CUPTI writes at most `size` bytes and hands the buffer back
    // to `buffer_completed`, which frees it with the same layout.
    unsafe {
        let p = std::alloc::alloc(layout);
        if !p.is_null() {
            lock(&BUFFERS).insert(p as usize);
        }
        *buffer = p;
        *size = if p.is_null() { 0 } else { BUFFER_BYTES };
        *max = 0;
    }
}

unsafe extern "C" fn buffer_completed(
    _ctx: *mut c_void,
    _stream: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    if buffer.is_null() || !lock(&BUFFERS).remove(&(buffer as usize)) {
        return;
    }
    if let Some(Ok(c)) = CUPTI.get() {
        let mut parsed = Vec::new();
        let mut record: *mut u8 = std::ptr::null_mut();
        // SAFETY: CUPTI filled `valid` bytes of `buffer` with records; each pointer it
        // returns points at a whole record of the kind its first field names, laid out as
        // cupti_activity.h says (offsets below).
        unsafe {
            while (c.next_record)(buffer, valid, &mut record) == 0 {
                if let Some(r) = parse(record) {
                    parsed.push(r);
                }
            }
        }
        lock(&RECORDS).extend(parsed);
    }
    let layout = std::alloc::Layout::from_size_align(BUFFER_BYTES, BUFFER_ALIGN)
        .expect("a valid constant layout");
    // SAFETY: allocated by `buffer_requested` with this layout.
    unsafe { std::alloc::dealloc(buffer, layout) };
}

/// The fields read of the record at `p` (see the module's comment for the layouts).
///
/// # Safety
/// `p` points at a whole CUPTI activity record.
unsafe fn parse(p: *const u8) -> Option<Record> {
    // SAFETY: reads within the record of the kind read first; unaligned reads, as the
    // records are packed.
    unsafe {
        let at_u32 = |o: usize| p.add(o).cast::<u32>().read_unaligned();
        let at_u64 = |o: usize| p.add(o).cast::<u64>().read_unaligned();
        match at_u32(0) {
            KIND_RUNTIME | KIND_DRIVER => Some(Record::Api {
                start_ns: at_u64(8),
                correlation: at_u32(32),
            }),
            KIND_CONCURRENT_KERNEL => {
                let name = p.add(104).cast::<*const c_char>().read_unaligned();
                let name = if name.is_null() {
                    "(unnamed)".to_string()
                } else {
                    CStr::from_ptr(name).to_string_lossy().into_owned()
                };
                Some(Record::Kernel {
                    name,
                    correlation: at_u32(92),
                })
            }
            KIND_MEMCPY => Some(Record::Memcpy {
                kind: *p.add(4),
                bytes: at_u64(8),
                correlation: at_u32(44),
            }),
            KIND_MEMSET => Some(Record::Memset {
                bytes: at_u64(8),
                correlation: at_u32(44),
            }),
            _ => None,
        }
    }
}

/// The symbol `name` of `lib` as the function pointer type `F`.
///
/// # Safety
/// `F` is the symbol's true signature, a function pointer.
unsafe fn sym<F: Copy>(lib: *mut c_void, name: &CStr) -> Result<F, String> {
    // SAFETY: the caller's contract.
    unsafe { super::cuda::symbol(lib, name, "CUPTI") }
}

fn load() -> Result<Cupti, String> {
    const NAMES: [&CStr; 3] = [c"libcupti.so.13", c"libcupti.so.12", c"libcupti.so"];
    // SAFETY: dlopen with NUL-terminated names; each symbol gets cupti_activity.h's
    // signature (the field's type).
    unsafe {
        // the copy torch loaded first, so that CUPTI is one instance in the process
        let lib = NAMES
            .iter()
            .map(|n| libc::dlopen(n.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD))
            .chain(
                NAMES
                    .iter()
                    .map(|n| libc::dlopen(n.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL)),
            )
            .find(|l| !l.is_null())
            .ok_or("no CUPTI library (libcupti.so.13 or .12, which torch's CUDA wheels bring)")?;
        Ok(Cupti {
            register_callbacks: sym(lib, c"cuptiActivityRegisterCallbacks")?,
            enable: sym(lib, c"cuptiActivityEnable")?,
            disable: sym(lib, c"cuptiActivityDisable")?,
            flush_all: sym(lib, c"cuptiActivityFlushAll")?,
            next_record: sym(lib, c"cuptiActivityGetNextRecord")?,
            timestamp: sym(lib, c"cuptiGetTimestamp")?,
            result_string: sym(lib, c"cuptiGetResultString")?,
        })
    }
}

fn check(c: &Cupti, code: CuptiResult, what: &str) -> Result<(), String> {
    if code == 0 {
        return Ok(());
    }
    let mut text: *const c_char = std::ptr::null();
    // SAFETY: CUPTI writes a pointer to a static string, or leaves it null.
    let text = unsafe {
        if (c.result_string)(code, &mut text) == 0 && !text.is_null() {
            CStr::from_ptr(text).to_string_lossy().into_owned()
        } else {
            format!("code {code}")
        }
    };
    Err(format!("CUPTI error: {text} in {what}"))
}

fn cupti() -> Result<&'static Cupti, String> {
    CUPTI.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn now_ns(c: &Cupti) -> u64 {
    let mut t = 0u64;
    // SAFETY: CUPTI writes one u64.
    unsafe { (c.timestamp)(&mut t) };
    t
}

/// Runs `f`, one call of a candidate, as a window of the open recording (if any): the API
/// calls that begin inside it are the candidate's.
pub(super) fn window<T>(f: impl FnOnce() -> T) -> T {
    span(f, |o| &mut o.windows)
}

/// Runs `f`, the judge's own read-back of the kept outputs to the host (Rust and the
/// driver only: no Python runs inside), as a span whose copies to the host are the
/// judge's, if a recording is open.
pub(super) fn judges_read<T>(f: impl FnOnce() -> T) -> T {
    span(f, |o| &mut o.reads)
}

/// Runs `f` and, if a recording is open, notes its (start, end) on CUPTI's host clock in
/// the list `spans` picks.
fn span<T>(f: impl FnOnce() -> T, spans: fn(&mut Open) -> &mut Vec<(u64, u64)>) -> T {
    let open = lock(&OPEN).is_some();
    let Some(c) = open.then(cupti).and_then(Result::ok) else {
        return f();
    };
    let start = now_ns(c);
    let value = f();
    let end = now_ns(c);
    if let Some(o) = lock(&OPEN).as_mut() {
        spans(o).push((start, end));
    }
    value
}

/// Notes one L2 flush of the timed loop (a driver memset of the recording's `flush_bytes`)
/// in the open recording, if any.
pub(super) fn flushed() {
    if let Some(o) = lock(&OPEN).as_mut() {
        o.flushes += 1;
    }
}

/// An open recording of the device's activity ([`Recording::start`] … [`Recording::finish`]).
pub(super) struct Recording {
    cupti: &'static Cupti,
    flush_bytes: u64,
    /// Closed: [`Recording::finish`] ran (else `Drop` closes it, after a failed call).
    closed: bool,
}

/// What the candidate's calls of one recording did on the device, and what ran between
/// them besides the judge's own work.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct DeviceActivity {
    /// The kernels each call of the measurement launched (warm-up and batch calls
    /// included), by name, per call in order.
    pub calls: Vec<BTreeSet<String>>,
    /// Kernels launched outside every call: the judge's own (copies, its sleep), or work a
    /// hook of the candidate's (a garbage collector callback, a finalizer, a thread) ran
    /// between its calls, before the timing starts.
    pub between: BTreeSet<String>,
    /// Bytes copied from the device to the host outside every call and outside the
    /// judge's own read-backs.
    pub between_to_host_bytes: u64,
    /// Bytes copied from the device to the host by the calls (`cudaMemcpy` D2H, `.cpu()`,
    /// `.item()`, `.tolist()` of a device tensor), and how many such copies.
    pub to_host_bytes: u64,
    pub to_host_copies: usize,
    /// The most bytes one call copied to the host.
    pub to_host_most_per_call: u64,
    /// The timed loop's L2 flushes made, and those the records show: fewer shown than made
    /// means another client took CUPTI's records over during the recording.
    pub flushes_made: usize,
    pub flushes_seen: usize,
    /// Records CUPTI delivered in all (the judge's own included), for the message when the
    /// flushes are short.
    pub records: usize,
}

impl DeviceActivity {
    /// Adds `other`'s calls, copies and flushes to these (the measurements of one kernel in
    /// a head-to-head).
    pub(super) fn absorb(&mut self, other: DeviceActivity) {
        self.calls.extend(other.calls);
        self.between.extend(other.between);
        self.between_to_host_bytes += other.between_to_host_bytes;
        self.to_host_bytes += other.to_host_bytes;
        self.to_host_copies += other.to_host_copies;
        self.to_host_most_per_call = self.to_host_most_per_call.max(other.to_host_most_per_call);
        self.flushes_made += other.flushes_made;
        self.flushes_seen += other.flushes_seen;
        self.records += other.records;
    }
}

impl Recording {
    /// Starts recording, on the GPU; `None` on the CPU, or where CUPTI cannot be used (said
    /// once on stderr: the op check is then the harness's alone). `flush_bytes`: the size
    /// of the timed loop's L2 flush memset, each noted by [`flushed`].
    ///
    /// Start it after torch's profiler (the op monitor's session): torch's profiler, even
    /// for CPU activity alone, records CUDA's runtime and driver API calls through CUPTI
    /// and registers its own buffer callbacks as each session starts. Buffers already
    /// handed out are flushed to their owner, then ours are registered for what follows.
    ///
    /// # Errors
    /// CUPTI's error when it is there but cannot be started (what was enabled is disabled
    /// again): a profiler the candidate left running could be the cause, so the judge
    /// does not go on without the record.
    pub(super) fn start(on_gpu: bool, flush_bytes: usize) -> Result<Option<Recording>, String> {
        static WARNED: OnceLock<()> = OnceLock::new();
        if !on_gpu {
            return Ok(None);
        }
        let c = match cupti() {
            Ok(c) => c,
            Err(e) => {
                WARNED.get_or_init(|| {
                    super::log::log(&format!(
                        "warning: the device activity check is off ({e}); the op check is the profiler's alone"
                    ));
                });
                return Ok(None);
            }
        };
        // SAFETY: plain calls with valid arguments.
        let started = unsafe {
            check(c, (c.flush_all)(FLUSH_FORCED), "cuptiActivityFlushAll").and_then(|()| {
                check(
                    c,
                    (c.register_callbacks)(buffer_requested, buffer_completed),
                    "cuptiActivityRegisterCallbacks",
                )
            })
        };
        lock(&RECORDS).clear();
        let mut enabled = Vec::new();
        let started = started.and_then(|()| {
            KINDS.iter().try_for_each(|&k| {
                // SAFETY: a plain call with a valid kind.
                check(c, unsafe { (c.enable)(k) }, "cuptiActivityEnable")?;
                enabled.push(k);
                Ok(())
            })
        });
        if let Err(e) = started {
            for k in enabled.into_iter().rev() {
                // SAFETY: a plain call with a kind enabled above.
                unsafe { (c.disable)(k) };
            }
            return Err(e);
        }
        *lock(&OPEN) = Some(Open::default());
        Ok(Some(Recording {
            cupti: c,
            flush_bytes: flush_bytes as u64,
            closed: false,
        }))
    }

    /// Ends the recording, once the device is synchronized: what the windows' calls did.
    ///
    /// # Errors
    /// CUPTI's error when its buffers cannot be flushed.
    pub(super) fn finish(mut self) -> Result<DeviceActivity, String> {
        let (open, flushed) = self.close();
        let records = std::mem::take(&mut *lock(&RECORDS));
        flushed?;
        Ok(attribute(&records, &open, self.flush_bytes))
    }

    /// Takes the open state, flushes CUPTI's buffers and disables the kinds.
    fn close(&mut self) -> (Open, Result<(), String>) {
        self.closed = true;
        let open = lock(&OPEN).take().unwrap_or_default();
        let c = self.cupti;
        // SAFETY: plain calls with valid arguments. Disabled first: nothing is recorded
        // after the flush into a buffer no one collects.
        let flushed = unsafe {
            for k in KINDS.iter().rev() {
                (c.disable)(*k);
            }
            check(c, (c.flush_all)(FLUSH_FORCED), "cuptiActivityFlushAll")
        };
        (open, flushed)
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        if !self.closed {
            let _ = self.close();
            lock(&RECORDS).clear();
        }
    }
}

/// The records of the calls in `open`'s windows (API calls begun inside one, and what
/// they enqueued), what ran outside them (the judge's read-backs aside), and the flushes
/// made and seen (memsets of `flush_bytes` outside the calls).
fn attribute(records: &[Record], open: &Open, flush_bytes: u64) -> DeviceActivity {
    // the windows are in order, one after another on the host clock
    let inside = |windows: &[(u64, u64)], t: u64| -> Option<usize> {
        let i = windows.partition_point(|w| w.0 <= t).checked_sub(1)?;
        (t <= windows[i].1).then_some(i)
    };
    let mut calls_of: HashMap<u32, usize> = HashMap::new();
    let mut reads: BTreeSet<u32> = BTreeSet::new();
    for r in records {
        if let Record::Api {
            start_ns,
            correlation,
        } = r
        {
            if let Some(w) = inside(&open.windows, *start_ns) {
                calls_of.insert(*correlation, w);
            } else if inside(&open.reads, *start_ns).is_some() {
                reads.insert(*correlation);
            }
        }
    }
    let mut out = DeviceActivity {
        calls: vec![BTreeSet::new(); open.windows.len()],
        flushes_made: open.flushes,
        records: records.len(),
        ..DeviceActivity::default()
    };
    let mut to_host = vec![0u64; open.windows.len()];
    for r in records {
        match r {
            Record::Kernel { name, correlation } => match calls_of.get(correlation) {
                Some(&w) => {
                    out.calls[w].insert(name.clone());
                }
                None => {
                    out.between.insert(name.clone());
                }
            },
            Record::Memcpy {
                kind,
                bytes,
                correlation,
            } if *kind == MEMCPY_DTOH => match calls_of.get(correlation) {
                Some(&w) => {
                    out.to_host_bytes += bytes;
                    out.to_host_copies += 1;
                    to_host[w] += bytes;
                }
                None if !reads.contains(correlation) => out.between_to_host_bytes += bytes,
                None => {}
            },
            Record::Memset { bytes, correlation }
                if *bytes == flush_bytes && !calls_of.contains_key(correlation) =>
            {
                out.flushes_seen += 1;
            }
            _ => {}
        }
    }
    out.to_host_most_per_call = to_host.into_iter().max().unwrap_or(0);
    out
}

/// Kernels of torch's own that move data without computing any of a reference, the device
/// side of most of [`autokernel_core::ALLOWED_OPS`]: copies and casts (`*copy_kernel_cuda`),
/// fills (zeros, constant pads), `cat` and `stack`, `flip`, index ranges (`arange`). ATen's
/// mangled names (namespace `at::native`, or `RangeFactories.cu`'s) holding one of these
/// functions' or functors' names, as torch 2.11 names them. Not here, so `TAMPER` in a timed call on the GPU though on the
/// allowlist: `repeat_interleave` and reflection or replication pads, whose kernels are
/// general gathers and scans.
const ALLOWED_TORCH_KERNELS: &[&str] = &[
    "copy_kernel_cuda",
    "FillFunctor",
    "CatArrayBatchedCopy",
    "flip_kernel",
    "elementwise_kernel_with_index",
];

/// The most bytes one call may copy from the device to the host: scalars and offsets
/// (`.item()`, `.tolist()` of a small index tensor), never a timed input (megabytes).
const MAX_TO_HOST_BYTES_PER_CALL: u64 = 4096;

/// Whether `name` is one of torch's own data-moving kernels ([`ALLOWED_TORCH_KERNELS`]).
fn allowed_torch_kernel(name: &str) -> bool {
    let aten = name.starts_with("_ZN2at6native")
        // `arange`'s kernel sits in RangeFactories.cu's anonymous namespace
        || (name.starts_with("_ZN") && name.contains("_RangeFactories_cu_"));
    aten && ALLOWED_TORCH_KERNELS.iter().any(|k| name.contains(k))
}

/// Whether `name` is the judge's own sleep between timed calls (`torch.cuda._sleep`:
/// `at::cuda`'s `spin_kernel`).
fn judges_sleep(name: &str) -> bool {
    name.starts_with("_ZN2at4cuda") && name.contains("spin_kernel")
}

/// Prefixes of the kernel names libraries give their kernels, which no name a file defines
/// may take: C++'s mangling (`_Z`, torch's own), torch.compile's generated Triton kernels
/// (`triton_poi_fused_…`), cuBLAS's and cuDNN's plain names. A file defining such a name
/// could otherwise claim the library's kernel as its own.
const LIBRARY_PREFIXES: &[&str] = &[
    "_Z", "triton_", "nvjet", "cutlass", "xmma", "cublas", "cudnn", "ampere_", "volta_", "turing_",
    "hopper_", "fmha", "sm1", "sm2", "sm3", "sm5", "sm6", "sm7", "sm8", "sm9",
];

/// The names a Python file defines with `def` (Triton names a kernel after its function,
/// unless `triton.jit(repr=…)` renames it), except names with a library's prefix
/// ([`LIBRARY_PREFIXES`]). A line scan, not a parser: a `def` line inside a string counts
/// too, which is why the prefixes are refused.
pub(super) fn defined_names(source: &str) -> BTreeSet<String> {
    source
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l.strip_prefix("async ").unwrap_or(l);
            let rest = l.strip_prefix("def ").or_else(|| l.strip_prefix("def\t"))?;
            let name: String = rest
                .trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let library = LIBRARY_PREFIXES.iter().any(|p| name.starts_with(p));
            (!name.is_empty() && !library).then_some(name)
        })
        .collect()
}

/// Why the calls of `activity` did not compute their result with the kernels `file`
/// defines (`own`: [`defined_names`]), or `None`: a copy from the device to the host, a
/// kernel neither the file's nor one of torch's data-moving ones, or a recording another
/// client interrupted. `who` names the calls ("the timed calls"). Also returns the calls
/// that launched none of the file's kernels.
pub(super) fn judge(
    activity: &DeviceActivity,
    own: &BTreeSet<String>,
    who: &str,
    file: &str,
) -> (Option<String>, u32) {
    let mut why = Vec::new();
    if activity.flushes_seen < activity.flushes_made {
        why.push(format!(
            "the device's activity record was taken over during {who} ({} of the judge's {} flushes recorded, {} records in all): a profiler started inside a call?",
            activity.flushes_seen, activity.flushes_made, activity.records
        ));
    }
    let between: Vec<String> = activity
        .between
        .iter()
        .filter(|k| !allowed_torch_kernel(k) && !judges_sleep(k))
        .take(3)
        .map(|k| k.chars().take(100).collect())
        .collect();
    if !between.is_empty() {
        why.push(format!(
            "kernels ran between {who}, outside the timing, that are not the judge's: {}",
            between.join(", ")
        ));
    }
    if activity.between_to_host_bytes > 0 {
        why.push(format!(
            "{} bytes were copied from the device to the host between {who}",
            activity.between_to_host_bytes
        ));
    }
    if activity.to_host_most_per_call > MAX_TO_HOST_BYTES_PER_CALL {
        why.push(format!(
            "{who} copied {} bytes from the device to the host in {} copies; a kernel computes its result on the device",
            activity.to_host_bytes, activity.to_host_copies
        ));
    }
    let foreign: BTreeMap<&str, usize> = activity
        .calls
        .iter()
        .flatten()
        .filter(|k| !own.contains(*k) && !allowed_torch_kernel(k))
        .fold(BTreeMap::new(), |mut m, k| {
            *m.entry(k.as_str()).or_default() += 1;
            m
        });
    if !foreign.is_empty() {
        let names: Vec<String> = foreign
            .keys()
            .take(3)
            .map(|k| k.chars().take(100).collect())
            .collect();
        let prefixed = foreign
            .keys()
            .any(|k| !k.starts_with("_Z") && LIBRARY_PREFIXES.iter().any(|p| k.starts_with(p)));
        why.push(format!(
            "{who} launched device kernels not defined in {file}: {}{}{}",
            names.join(", "),
            if foreign.len() > 3 { ", …" } else { "" },
            if prefixed {
                " (a name starting like a library's, `triton_`, `sm90_`, `cutlass`…, is never counted as the file's own: rename the kernel)"
            } else {
                ""
            }
        ));
    }
    let launchless = activity
        .calls
        .iter()
        .filter(|c| !c.iter().any(|k| own.contains(k)))
        .count() as u32;
    ((!why.is_empty()).then(|| why.join("; ")), launchless)
}

/// The names [`defined_names`] finds in the file at `path`, read before any of its code
/// runs (empty when it cannot be read: the load then says why).
pub(super) fn names_defined_in(path: &std::path::Path) -> BTreeSet<String> {
    std::fs::read_to_string(path)
        .map(|s| defined_names(&s))
        .unwrap_or_default()
}

/// The kernels the calls launched, distinct, as a stage's detail shows them: `; kernels:
/// a, b` (empty for none).
pub(super) fn kernels_note(activity: &DeviceActivity) -> String {
    let all: BTreeSet<String> = activity
        .calls
        .iter()
        .flatten()
        .map(|k| k.chars().take(60).collect())
        .collect();
    if all.is_empty() {
        return String::new();
    }
    format!(
        "; kernels: {}",
        all.into_iter().collect::<Vec<_>>().join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(start_ns: u64, correlation: u32) -> Record {
        Record::Api {
            start_ns,
            correlation,
        }
    }

    fn kernel(name: &str, correlation: u32) -> Record {
        Record::Kernel {
            name: name.into(),
            correlation,
        }
    }

    fn open(windows: &[(u64, u64)], reads: &[(u64, u64)], flushes: usize) -> Open {
        Open {
            windows: windows.to_vec(),
            reads: reads.to_vec(),
            flushes,
        }
    }

    fn to_host(bytes: u64, correlation: u32) -> Record {
        Record::Memcpy {
            kind: MEMCPY_DTOH,
            bytes,
            correlation,
        }
    }

    #[test]
    fn work_is_the_calls_when_its_api_call_began_inside_one() {
        let records = vec![
            api(5, 1),
            kernel("judge_copy", 1),
            api(12, 2),
            kernel("softmax_kernel", 2),
            api(25, 3),
            kernel("hooked_kernel", 3),
            api(31, 4),
            kernel("softmax_kernel", 4),
            to_host(64, 4),
            to_host(1000, 3),
            api(52, 5),
            to_host(512, 5),
            kernel("queued_before", 99),
        ];
        let a = attribute(&records, &open(&[(10, 20), (30, 40)], &[(50, 60)], 0), 0);
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        assert_eq!(
            a.calls,
            vec![names(&["softmax_kernel"]), names(&["softmax_kernel"])]
        );
        assert_eq!(
            (a.to_host_copies, a.to_host_bytes, a.to_host_most_per_call),
            (1, 64, 64)
        );
        // outside the calls: every kernel, and the copies but the judge's read-back's
        assert_eq!(
            a.between,
            names(&["hooked_kernel", "judge_copy", "queued_before"])
        );
        assert_eq!(a.between_to_host_bytes, 1000);
    }

    #[test]
    fn flushes_are_memsets_of_the_flush_size_outside_the_calls() {
        let records = vec![
            Record::Memset {
                bytes: 256,
                correlation: 1,
            },
            Record::Memset {
                bytes: 4,
                correlation: 2,
            },
            api(15, 3),
            Record::Memset {
                bytes: 256,
                correlation: 3,
            },
        ];
        let a = attribute(&records, &open(&[(10, 20)], &[], 2), 256);
        assert_eq!((a.flushes_made, a.flushes_seen), (2, 1));
        let (why, _) = judge(&a, &BTreeSet::new(), "the timed calls", "kernel.py");
        assert!(why.unwrap().contains("1 of the judge's 2 flushes"));
    }

    #[test]
    fn between_the_calls_only_the_judges_copies_and_sleep_may_run() {
        let own: BTreeSet<String> = ["softmax_kernel".to_string()].into();
        let sleep = "_ZN2at4cuda12_GLOBAL__N_111spin_kernelEl";
        let cast =
            "_ZN2at6native29vectorized_elementwise_kernelILi8EZNS0_24float16_copy_kernel_cuda";
        let mut a = DeviceActivity {
            calls: vec![["softmax_kernel".to_string()].into()],
            between: [sleep.to_string(), cast.to_string()].into(),
            ..DeviceActivity::default()
        };
        assert_eq!(judge(&a, &own, "the timed calls", "kernel.py").0, None);
        // its own kernel, launched by a hook before the timing starts
        a.between.insert("softmax_kernel".to_string());
        a.between_to_host_bytes = 8;
        let why = judge(&a, &own, "the timed calls", "kernel.py").0.unwrap();
        assert!(
            why.contains("kernels ran between the timed calls, outside the timing, that are not the judge's: softmax_kernel")
                && why.contains("8 bytes were copied from the device to the host between the timed calls"),
            "{why}"
        );
    }

    #[test]
    fn a_call_may_launch_its_files_kernels_and_torchs_copies_only() {
        let own: BTreeSet<String> = ["softmax_kernel".to_string()].into();
        let copy =
            "_ZN2at6native29vectorized_elementwise_kernelILi4EZNS0_23direct_copy_kernel_cuda";
        let copysign =
            "_ZN2at6native29vectorized_elementwise_kernelILi4EZNS0_20copysign_kernel_cuda";
        let cat = "_ZN2at6native50_GLOBAL__N__CatArrayBatchedCopyINS1_10OpaqueTypeILj2EEEjLi2ELi64ELi64EEEvPT_";
        let arange = "_ZN50_GLOBAL__N__fa15d16e_17_RangeFactories_cu_38772b0829elementwise_kernel_with_indexIiZZZN2at6native15arange_cuda_out";
        let softmax = "_ZN2at6native43_GLOBAL__N__cunn_SoftMaxForwardILi4EfffNS1_22SoftMaxForwardEpilogueEEEvPT2_PKT0_i";
        let mut a = DeviceActivity {
            calls: vec![
                ["softmax_kernel".to_string(), copy.to_string()].into(),
                [copy.to_string(), cat.to_string(), arange.to_string()].into(),
            ],
            ..DeviceActivity::default()
        };
        let (why, launchless) = judge(&a, &own, "the timed calls", "kernel.py");
        assert_eq!((why, launchless), (None, 1));
        a.calls[1].insert(softmax.to_string());
        a.calls[1].insert("sm90_xmma_gemm_f16f16_f32".to_string());
        a.calls[1].insert(copysign.to_string());
        let (why, _) = judge(&a, &own, "the timed calls", "kernel.py");
        let why = why.unwrap();
        assert!(
            why.contains("cunn_SoftMaxForward")
                && why.contains("sm90_xmma_gemm")
                && why.contains("copysign_kernel_cuda")
                && why.contains("rename the kernel"),
            "{why}"
        );
    }

    #[test]
    fn a_copy_to_the_host_beyond_a_few_scalars_is_named_with_its_bytes() {
        let mut a = DeviceActivity {
            to_host_bytes: 2 * MAX_TO_HOST_BYTES_PER_CALL,
            to_host_copies: 2,
            to_host_most_per_call: MAX_TO_HOST_BYTES_PER_CALL,
            ..DeviceActivity::default()
        };
        let own = BTreeSet::new();
        assert_eq!(judge(&a, &own, "the timed calls", "kernel.py").0, None);
        a.to_host_most_per_call += 1;
        let (why, _) = judge(&a, &own, "the timed calls", "kernel.py");
        assert!(why.unwrap().contains(&format!(
            "copied {} bytes from the device to the host in 2 copies",
            2 * MAX_TO_HOST_BYTES_PER_CALL
        )));
    }

    #[test]
    fn defined_names_are_the_files_defs_but_not_libraries_names() {
        let src = "import triton\n@triton.jit\ndef softmax_kernel(x_ptr, n):\n    pass\n\
                   class K:\n    async def helper (self):\n        pass\n\
                   def _ZN2at6native18cunn_SoftMaxForward():\n    pass\n\
                   def triton_per_fused__softmax_0(): pass\n\
                   def sm90_xmma_gemm_f16f16_f32(): pass\n\
                   def nvjet_hsh_128x256(): pass\n\
                   define = 3\n# def commented(): not a definition\n";
        let names: Vec<String> = defined_names(src).into_iter().collect();
        assert_eq!(names, ["helper", "softmax_kernel"]);
    }
}

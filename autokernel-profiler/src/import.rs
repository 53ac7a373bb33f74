//! Streaming import of Chrome-trace JSON (`.json` or gzip-compressed `.json.gz`) into the
//! compact [`Trace`] that [`crate::link`] attributes.
//!
//! The file is read in blocks into a bounded buffer; [`crate::scan`] cuts the
//! `traceEvents` array into events, and each event is parsed on its own with
//! `serde_json::from_slice` into borrowed fields. Only what attribution needs is kept
//! (times, ids, interned names, input dims), so memory stays far below the file size.
//! Events whose text is malformed are repaired and counted; an event that still cannot be
//! parsed is skipped and counted; the import itself fails only when the file cannot be read
//! or is not a trace at all.

use std::borrow::Cow;
use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use autokernel_core::{DType, ProfileError};
use rustc_hash::FxHashMap as HashMap;
use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;

use crate::scan::{self, Ctx};

/// Prefix of the `record_function` ranges that name a module, as `profile_model.py` writes
/// them (`nn.Module: LlamaRMSNorm`); torch's own `with_modules` ranges use it too (with a
/// `_N` instance suffix, removed).
pub const MODULE_PREFIX: &str = "nn.Module: ";

/// Size of the read buffer; it grows only for a single event larger than this.
const BLOCK: usize = 4 << 20;

/// Events larger than this are cut by the tolerant scanner rather than by serde_json, so a
/// raw quote that swallows the rest of the file cannot make the buffer grow without bound.
const MAX_EVENT: usize = 1 << 20;

/// What kind of CPU-side range an event is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RangeCat {
    /// `cpu_op`: an aten (or custom) operator.
    Op,
    /// `user_annotation` (`record_function`), or a module range.
    Annotation,
    /// Anything else on a CPU thread (`python_function`, ...).
    Other,
}

/// A CPU-side duration event.
#[derive(Debug, Clone)]
pub(crate) struct CpuRange {
    pub ts: f64,
    pub end: f64,
    pub name: u32,
    pub cat: RangeCat,
    pub thread: u32,
    pub external_id: Option<u64>,
    /// Index into [`Trace::dims`] of its `Input Dims` (0: none recorded).
    pub dims: u32,
    pub dtype: Option<DType>,
}

/// A `cuda_runtime`/`cuda_driver` call carrying a correlation id.
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    pub ts: f64,
    pub thread: u32,
    pub external_id: Option<u64>,
    /// The call launches kernels (`cudaLaunchKernel`, `cuLaunchKernelEx`, graph launches),
    /// as opposed to e.g. a memcpy or a synchronisation.
    pub launches_kernel: bool,
}

/// A GPU kernel execution.
#[derive(Debug, Clone)]
pub(crate) struct Kernel {
    pub ts: f64,
    pub dur: f64,
    pub name: u32,
    pub correlation: Option<u64>,
    pub external_id: Option<u64>,
    pub pid: i64,
    pub tid: i64,
}

/// Count and total time of memory copies or sets on the device.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct TransferStats {
    /// Number of events.
    pub events: u64,
    /// Total device time, in microseconds.
    pub time_us: f64,
}

/// Everything kept from a trace.
#[derive(Debug, Default)]
pub(crate) struct Trace {
    pub names: Vec<String>,
    /// Distinct `Input Dims` lists; index 0 is the empty list.
    pub dims: Vec<Vec<Vec<i64>>>,
    pub threads: Vec<(i64, i64)>,
    pub ranges: Vec<CpuRange>,
    pub launches: HashMap<u64, Launch>,
    /// Launches without `args.correlation`, keyed later through `ac2g` flow starts:
    /// (pid, tid, ts) and the launch.
    pub uncorrelated_launches: Vec<(i64, i64, f64, Launch)>,
    pub kernels: Vec<Kernel>,
    /// `ac2g` flow ends on the device side: (pid, tid, ts bits, flow id).
    pub flow_ends: Vec<(i64, i64, u64, u64)>,
    /// `ac2g` flow starts on the host side: (pid, tid, ts bits, flow id).
    pub flow_starts: Vec<(i64, i64, u64, u64)>,
    pub memcpy: TransferStats,
    pub memset: TransferStats,
    pub gpu_annotations: u64,
    pub gpu_name: Option<String>,
    pub events: u64,
    pub repaired_events: u64,
    pub skipped_events: u64,
    pub invalid_timing: u64,
    pub truncated: bool,
}

/// Interns names into `names`, keyed by their raw bytes: UTF-8 is checked once per distinct
/// name (invalid sequences decoded lossily and reported).
#[derive(Default)]
struct Interner {
    map: HashMap<Vec<u8>, u32>,
}

impl Interner {
    /// The name's id, and whether it had to be repaired (invalid UTF-8) when first seen.
    fn get(&mut self, names: &mut Vec<String>, s: &[u8]) -> (u32, bool) {
        if let Some(&id) = self.map.get(s) {
            return (id, false);
        }
        let text = String::from_utf8_lossy(s);
        let repaired = matches!(text, Cow::Owned(_));
        let id = names.len() as u32;
        names.push(text.into_owned());
        self.map.insert(s.to_vec(), id);
        (id, repaired)
    }
}

/// A pid or tid: an integer, or a string (hashed to a negative number).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Id(i64);

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Id;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer or a string id")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Id, E> {
                Ok(Id(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Id, E> {
                Ok(Id(v as i64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Id, E> {
                Ok(Id(v as i64))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Id, E> {
                if let Ok(n) = v.trim().parse::<i64>() {
                    return Ok(Id(n));
                }
                // FNV-1a, forced negative so it never collides with a real pid
                let mut h: u64 = 0xcbf2_9ce4_8422_2325;
                for b in v.bytes() {
                    h ^= b as u64;
                    h = h.wrapping_mul(0x100_0000_01b3);
                }
                Ok(Id((h | (1 << 63)) as i64))
            }
        }
        d.deserialize_any(V)
    }
}

/// An integer id that may be written as a number or a numeric string.
#[derive(Debug, Clone, Copy)]
struct Num(u64);

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Num;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a non-negative integer id")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Num, E> {
                Ok(Num(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Num, E> {
                Ok(Num(v as u64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Num, E> {
                Ok(Num(v as u64))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Num, E> {
                v.trim()
                    .parse()
                    .map(Num)
                    .map_err(|_| E::custom(format!("id `{v}` is not an integer")))
            }
        }
        d.deserialize_any(V)
    }
}

/// `Input Dims`: one list of ints per input; anything else (scalars, tensor lists) gives an
/// empty list for that input.
#[derive(Debug, Default)]
struct Dims(Vec<Vec<i64>>);

impl<'de> Deserialize<'de> for Dims {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Outer;
        impl<'de> Visitor<'de> for Outer {
            type Value = Dims;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of dims")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Dims, A::Error> {
                let mut v = Vec::new();
                while let Some(one) = seq.next_element::<OneInput>()? {
                    v.push(one.0);
                }
                Ok(Dims(v))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Dims, E> {
                Ok(Dims::default())
            }
        }
        d.deserialize_any(Outer)
    }
}

struct OneInput(Vec<i64>);

impl<'de> Deserialize<'de> for OneInput {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OneInput;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of ints")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<OneInput, A::Error> {
                let mut dims = Vec::new();
                let mut nested = false;
                while let Some(e) = seq.next_element::<IntOrNested>()? {
                    match e.0 {
                        Some(n) => dims.push(n),
                        None => nested = true,
                    }
                }
                if nested {
                    dims.clear();
                }
                Ok(OneInput(dims))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<OneInput, E> {
                Ok(OneInput(vec![]))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<OneInput, E> {
                Ok(OneInput(vec![]))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<OneInput, E> {
                Ok(OneInput(vec![]))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<OneInput, E> {
                Ok(OneInput(vec![]))
            }
            fn visit_unit<E: de::Error>(self) -> Result<OneInput, E> {
                Ok(OneInput(vec![]))
            }
        }
        d.deserialize_any(V)
    }
}

struct IntOrNested(Option<i64>);

impl<'de> Deserialize<'de> for IntOrNested {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IntOrNested;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an int or a list")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<IntOrNested, E> {
                Ok(IntOrNested(Some(v)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<IntOrNested, E> {
                Ok(IntOrNested(Some(v as i64)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<IntOrNested, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(IntOrNested(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<IntOrNested, E> {
                Ok(IntOrNested(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<IntOrNested, E> {
                Ok(IntOrNested(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<IntOrNested, E> {
                Ok(IntOrNested(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// A string value as raw bytes: borrowed when it has no escapes. serde_json hands strings
/// to `deserialize_bytes` without UTF-8 validation; names are validated once, when interned.
struct Bytes<'a>(Cow<'a, [u8]>);

impl<'de> Deserialize<'de> for Bytes<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Bytes<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_bytes<E: de::Error>(self, v: &'de [u8]) -> Result<Bytes<'de>, E> {
                Ok(Bytes(Cow::Borrowed(v)))
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Bytes<'de>, E> {
                Ok(Bytes(Cow::Owned(v.to_vec())))
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Bytes<'de>, E> {
                Ok(Bytes(Cow::Borrowed(v.as_bytes())))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Bytes<'de>, E> {
                Ok(Bytes(Cow::Owned(v.as_bytes().to_vec())))
            }
        }
        d.deserialize_bytes(V)
    }
}

/// A field name, matched as bytes (no UTF-8 validation, no allocation).
macro_rules! byte_keys {
    ($name:ident { $($variant:ident = $key:literal),* $(,)? }) => {
        enum $name { $($variant,)* Other }
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl Visitor<'_> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                        f.write_str("a field name")
                    }
                    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<$name, E> {
                        Ok(match v { $($key => $name::$variant,)* _ => $name::Other })
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<$name, E> {
                        self.visit_bytes(v.as_bytes())
                    }
                }
                d.deserialize_bytes(V)
            }
        }
    };
}

byte_keys!(EventKey {
    Ph = b"ph",
    Cat = b"cat",
    Name = b"name",
    Pid = b"pid",
    Tid = b"tid",
    Ts = b"ts",
    Dur = b"dur",
    Id = b"id",
    Args = b"args",
});

byte_keys!(ArgKey {
    Correlation = b"correlation",
    ExternalId = b"External id",
    InputDims = b"Input Dims",
    InputType = b"Input type",
});

/// The dtype of the first floating input in `Input type`, read without allocating.
struct FirstDType(Option<DType>);

impl<'de> Deserialize<'de> for FirstDType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FirstDType;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of type names")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<FirstDType, A::Error> {
                let mut found = None;
                while let Some(t) = seq.next_element::<Option<Bytes<'de>>>()? {
                    if found.is_none() {
                        found = t.and_then(|t| dtype_of(&t.0));
                    }
                }
                Ok(FirstDType(found))
            }
        }
        d.deserialize_seq(V)
    }
}

#[derive(Default)]
struct RawArgs {
    correlation: Option<Num>,
    external_id: Option<Num>,
    input_dims: Option<Dims>,
    dtype: Option<DType>,
}

impl<'de> Deserialize<'de> for RawArgs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawArgs;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an args object")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<RawArgs, A::Error> {
                let mut a = RawArgs::default();
                while let Some(k) = map.next_key::<ArgKey>()? {
                    match k {
                        ArgKey::Correlation => a.correlation = map.next_value()?,
                        ArgKey::ExternalId => a.external_id = map.next_value()?,
                        ArgKey::InputDims => a.input_dims = map.next_value()?,
                        ArgKey::InputType => {
                            a.dtype = map.next_value::<Option<FirstDType>>()?.and_then(|t| t.0)
                        }
                        ArgKey::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(a)
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Default)]
struct RawEvent<'a> {
    ph: Option<Bytes<'a>>,
    cat: Option<Bytes<'a>>,
    name: Option<Bytes<'a>>,
    pid: Option<Id>,
    tid: Option<Id>,
    ts: Option<f64>,
    dur: Option<f64>,
    id: Option<Num>,
    args: Option<RawArgs>,
}

impl<'de> Deserialize<'de> for RawEvent<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawEvent<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a trace event object")
            }
            fn visit_map<A: de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<RawEvent<'de>, A::Error> {
                let mut e = RawEvent::default();
                while let Some(k) = map.next_key::<EventKey>()? {
                    match k {
                        EventKey::Ph => e.ph = map.next_value()?,
                        EventKey::Cat => e.cat = map.next_value()?,
                        EventKey::Name => e.name = map.next_value()?,
                        EventKey::Pid => e.pid = map.next_value()?,
                        EventKey::Tid => e.tid = map.next_value()?,
                        EventKey::Ts => e.ts = map.next_value()?,
                        EventKey::Dur => e.dur = map.next_value()?,
                        EventKey::Id => e.id = map.next_value()?,
                        EventKey::Args => e.args = map.next_value()?,
                        EventKey::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(e)
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Deserialize)]
struct DeviceProp {
    #[serde(default)]
    name: Option<String>,
}

/// The dtype of the first floating input (`Input type` as torch writes it).
fn dtype_of(t: &[u8]) -> Option<DType> {
    match t {
        b"float" | b"c10::Float" => Some(DType::Float32),
        b"c10::Half" | b"half" => Some(DType::Float16),
        b"c10::BFloat16" | b"bfloat16" => Some(DType::Bfloat16),
        _ => None,
    }
}

fn launches_kernel(name: &[u8]) -> bool {
    let has = |p: &[u8]| name.windows(p.len()).any(|w| w == p);
    has(b"LaunchKernel")
        || has(b"LaunchCooperativeKernel")
        || name.starts_with(b"cuLaunch")
        || has(b"GraphLaunch")
}

/// Builds the [`Trace`] event by event.
struct Collector {
    trace: Trace,
    interner: Interner,
    thread_ids: HashMap<(i64, i64), u32>,
    dims_ids: HashMap<Vec<Vec<i64>>, u32>,
}

impl Collector {
    fn new() -> Self {
        let mut trace = Trace::default();
        trace.dims.push(Vec::new());
        let mut dims_ids = HashMap::default();
        dims_ids.insert(Vec::new(), 0);
        Collector {
            trace,
            interner: Interner::default(),
            thread_ids: HashMap::default(),
            dims_ids,
        }
    }

    /// Adds what another collector gathered (from a later part of the same trace),
    /// remapping its name, thread and dims ids to this one's.
    fn merge(&mut self, other: Collector) {
        let o = other.trace;
        let names: Vec<u32> = o
            .names
            .iter()
            .map(|n| self.interner.get(&mut self.trace.names, n.as_bytes()).0)
            .collect();
        let threads: Vec<u32> = o.threads.iter().map(|&(p, t)| self.thread(p, t)).collect();
        let dims: Vec<u32> = o.dims.into_iter().map(|d| self.intern_dims(d)).collect();
        let t = &mut self.trace;
        t.ranges.extend(o.ranges.into_iter().map(|mut r| {
            r.name = names[r.name as usize];
            r.thread = threads[r.thread as usize];
            r.dims = dims[r.dims as usize];
            r
        }));
        t.kernels.extend(o.kernels.into_iter().map(|mut k| {
            k.name = names[k.name as usize];
            k
        }));
        for (c, mut l) in o.launches {
            l.thread = threads[l.thread as usize];
            t.launches.insert(c, l);
        }
        t.uncorrelated_launches
            .extend(
                o.uncorrelated_launches
                    .into_iter()
                    .map(|(p, tid, ts, mut l)| {
                        l.thread = threads[l.thread as usize];
                        (p, tid, ts, l)
                    }),
            );
        t.flow_starts.extend(o.flow_starts);
        t.flow_ends.extend(o.flow_ends);
        t.memcpy.events += o.memcpy.events;
        t.memcpy.time_us += o.memcpy.time_us;
        t.memset.events += o.memset.events;
        t.memset.time_us += o.memset.time_us;
        t.gpu_annotations += o.gpu_annotations;
        t.events += o.events;
        t.repaired_events += o.repaired_events;
        t.skipped_events += o.skipped_events;
        t.invalid_timing += o.invalid_timing;
    }

    fn intern_dims(&mut self, dims: Vec<Vec<i64>>) -> u32 {
        if let Some(&id) = self.dims_ids.get(&dims) {
            return id;
        }
        let id = self.trace.dims.len() as u32;
        self.trace.dims.push(dims.clone());
        self.dims_ids.insert(dims, id);
        id
    }

    /// The name's id; counts the event repaired when its name was invalid UTF-8, unless
    /// `counted` says the event was counted already (a raw control character in the same
    /// name: one event, one repair).
    fn intern(&mut self, name: &[u8], counted: bool) -> u32 {
        let (id, repaired) = self.interner.get(&mut self.trace.names, name);
        if repaired && !counted {
            self.trace.repaired_events += 1;
        }
        id
    }

    fn thread(&mut self, pid: i64, tid: i64) -> u32 {
        let threads = &mut self.trace.threads;
        *self.thread_ids.entry((pid, tid)).or_insert_with(|| {
            threads.push((pid, tid));
            (threads.len() - 1) as u32
        })
    }

    /// Takes one parsed event; `fast` when it was parsed as is (not by the repair path,
    /// which has counted its repair already).
    fn event(&mut self, e: RawEvent<'_>, fast: bool) {
        self.trace.events += 1;
        fn text<'s>(b: &'s Option<Bytes<'_>>) -> &'s str {
            b.as_ref()
                .and_then(|b| std::str::from_utf8(&b.0).ok())
                .unwrap_or("")
        }
        let ph = text(&e.ph);
        let cat = text(&e.cat);
        let pid = e.pid.map_or(0, |i| i.0);
        let tid = e.tid.map_or(0, |i| i.0);
        match ph {
            "X" => {}
            "s" | "f" if cat == "ac2g" => {
                if let (Some(id), Some(ts)) = (e.id, e.ts) {
                    let flow = (pid, tid, ts.to_bits(), id.0);
                    if ph == "s" {
                        self.trace.flow_starts.push(flow);
                    } else {
                        self.trace.flow_ends.push(flow);
                    }
                }
                return;
            }
            _ => return,
        }
        let (Some(ts), Some(dur)) = (e.ts, e.dur) else {
            self.trace.invalid_timing += 1;
            return;
        };
        if !ts.is_finite() || !dur.is_finite() || dur < 0.0 || (ts == 0.0 && dur == 0.0) {
            self.trace.invalid_timing += 1;
            return;
        }
        let name_bytes: &[u8] = e.name.as_ref().map_or(b"", |b| &b.0);
        // serde_json passes raw control characters through in byte mode: count them as
        // repaired, as the tolerant path would
        let control_chars = fast && name_bytes.iter().any(|&b| b < 0x20);
        if control_chars {
            self.trace.repaired_events += 1;
        }
        let name = name_bytes;
        let args = e.args;
        let correlation = args.as_ref().and_then(|a| a.correlation).map(|n| n.0);
        let external_id = args.as_ref().and_then(|a| a.external_id).map(|n| n.0);
        // torch writes lower-case categories; older versions capitalise some (`Kernel`)
        let lower_cat: Cow<'_, str> = if cat.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(cat.to_ascii_lowercase())
        } else {
            Cow::Borrowed(cat)
        };
        match lower_cat.as_ref() {
            "kernel" if name.starts_with(b"Memcpy") => add(&mut self.trace.memcpy, dur),
            "kernel" if name.starts_with(b"Memset") => add(&mut self.trace.memset, dur),
            "kernel" => {
                let name = self.intern(name, control_chars);
                self.trace.kernels.push(Kernel {
                    ts,
                    dur,
                    name,
                    correlation,
                    external_id,
                    pid,
                    tid,
                });
            }
            c if c.contains("memcpy") => add(&mut self.trace.memcpy, dur),
            c if c.contains("memset") => add(&mut self.trace.memset, dur),
            "gpu_user_annotation" => self.trace.gpu_annotations += 1,
            "cuda_runtime" | "cuda_driver" | "runtime" | "driver" | "hip_runtime"
            | "cuda_runtime_api" => {
                let thread = self.thread(pid, tid);
                let launch = Launch {
                    ts,
                    thread,
                    external_id,
                    launches_kernel: launches_kernel(name),
                };
                match correlation {
                    Some(c) => {
                        self.trace.launches.insert(c, launch);
                    }
                    None => self
                        .trace
                        .uncorrelated_launches
                        .push((pid, tid, ts, launch)),
                }
            }
            c if c.starts_with("gpu_") || c == "cuda_profiler_range" || c == "overhead" => {}
            c => {
                let thread = self.thread(pid, tid);
                let rcat = match c {
                    "cpu_op" | "operator" => RangeCat::Op,
                    "user_annotation" => RangeCat::Annotation,
                    _ if name.starts_with(MODULE_PREFIX.as_bytes()) => RangeCat::Annotation,
                    _ => RangeCat::Other,
                };
                let (dims, dtype) = match args {
                    Some(a) if rcat == RangeCat::Op => {
                        (a.input_dims.map_or(0, |d| self.intern_dims(d.0)), a.dtype)
                    }
                    _ => (0, None),
                };
                let name = self.intern(name, control_chars);
                self.trace.ranges.push(CpuRange {
                    ts,
                    end: ts + dur,
                    name,
                    cat: rcat,
                    thread,
                    external_id,
                    dims,
                    dtype,
                });
            }
        }
    }

    fn top_level(&mut self, key: &[u8], value: &[u8]) {
        if key == b"deviceProperties" {
            if let Ok(props) = serde_json::from_slice::<Vec<DeviceProp>>(value) {
                self.trace.gpu_name = props.into_iter().find_map(|p| p.name);
            }
        }
    }
}

fn add(t: &mut TransferStats, dur: f64) {
    t.events += 1;
    t.time_us += dur;
}

/// Reads a Chrome trace from `path` (`.json`, or gzip detected by its magic bytes).
///
/// # Errors
/// [`ProfileError::Io`] when the file cannot be read; [`ProfileError::NotATrace`] when it is
/// not a JSON object with `traceEvents` or a JSON array of events.
pub(crate) fn read_trace(path: &Path) -> Result<Trace, ProfileError> {
    let io = |source| ProfileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = File::open(path).map_err(io)?;
    let mut magic = [0u8; 2];
    let n = read_full(&mut file, &mut magic).map_err(io)?;
    let file = File::open(path).map_err(io)?;
    if n == 2 && magic == [0x1f, 0x8b] {
        let gz =
            flate2::read::MultiGzDecoder::new(std::io::BufReader::with_capacity(1 << 20, file));
        read_trace_from(EndAtTruncation(gz), path)
    } else {
        read_trace_from(file, path)
    }
}

/// A gzip stream cut off mid-file (a trace whose writer was killed) ends where its data
/// ends, as a cut-off `.json` does: the decoder's "unexpected end of file" becomes the end
/// of input, and the parser then reports the trace as truncated and keeps what it read.
struct EndAtTruncation<R>(R);

impl<R: Read> Read for EndAtTruncation<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.0.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(0),
            other => other,
        }
    }
}

/// Bytes per block handed from the reading thread to the parser.
const CHUNK: usize = 1 << 20;

/// The parser's end of the reading thread: blocks arrive over a bounded channel.
struct ChannelReader {
    rx: std::sync::mpsc::Receiver<std::io::Result<Vec<u8>>>,
    current: Vec<u8>,
    at: usize,
}

impl Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.at == self.current.len() {
            match self.rx.recv() {
                Ok(Ok(block)) => {
                    self.current = block;
                    self.at = 0;
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => return Ok(0),
            }
        }
        let n = out.len().min(self.current.len() - self.at);
        out[..n].copy_from_slice(&self.current[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Reads (and decompresses) on a second thread while `f` parses: at most four blocks of
/// [`CHUNK`] bytes in flight.
fn with_reader_thread<T>(reader: impl Read + Send, f: impl FnOnce(&mut ChannelReader) -> T) -> T {
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel(3);
        scope.spawn(move || {
            let mut reader = reader;
            loop {
                let mut block = vec![0u8; CHUNK];
                match read_full(&mut reader, &mut block) {
                    Ok(0) => break,
                    Ok(n) => {
                        block.truncate(n);
                        if tx.send(Ok(block)).is_err() {
                            break;
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        break;
                    }
                }
            }
        });
        let mut r = ChannelReader {
            rx,
            current: Vec::new(),
            at: 0,
        };
        let out = f(&mut r);
        // dropping the receiver stops the reading thread if parsing ended early
        drop(r);
        out
    })
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Start,
    TopObject,
    Events { bare: bool },
    Done,
}

/// The streaming driver: a bounded buffer refilled from `reader` (read on a second
/// thread), cut into events.
pub(crate) fn read_trace_from(
    reader: impl Read + Send,
    path: &Path,
) -> Result<Trace, ProfileError> {
    with_reader_thread(reader, |r| parse_stream(r, path))
}

fn parse_stream(mut reader: impl Read, path: &Path) -> Result<Trace, ProfileError> {
    let io = |source| ProfileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let not_a_trace = |reason: String| ProfileError::NotATrace {
        path: path.to_path_buf(),
        reason,
    };
    let mut buf = vec![0u8; BLOCK];
    let (mut pos, mut filled, mut eof) = (0usize, 0usize, false);
    let mut stack = Vec::with_capacity(16);
    let mut fixed = Vec::new();
    let mut collector = Collector::new();
    let mut state = State::Start;
    let mut saw_events = false;

    // Moves the unread tail to the front and reads more; grows the buffer when a single
    // value fills it.
    let mut refill = |buf: &mut Vec<u8>, pos: &mut usize, filled: &mut usize, eof: &mut bool| {
        if *pos > 0 {
            buf.copy_within(*pos..*filled, 0);
            *filled -= *pos;
            *pos = 0;
        }
        if *filled == buf.len() {
            let len = buf.len();
            buf.resize(len * 2, 0);
        }
        let n = read_full(&mut reader, &mut buf[*filled..])?;
        *filled += n;
        if n == 0 {
            *eof = true;
        }
        Ok::<(), std::io::Error>(())
    };

    loop {
        if state == State::Done {
            break;
        }
        let data = &buf[..filled];
        let i = scan::skip_ws(data, pos);
        let Some(&b) = data.get(i) else {
            if eof {
                if state != State::Start && state != State::Done {
                    collector.trace.truncated = true;
                }
                break;
            }
            pos = i;
            refill(&mut buf, &mut pos, &mut filled, &mut eof).map_err(io)?;
            continue;
        };
        match state {
            State::Start => match b {
                b'{' => {
                    pos = i + 1;
                    state = State::TopObject;
                }
                b'[' => {
                    pos = i + 1;
                    state = State::Events { bare: true };
                    saw_events = true;
                }
                _ => {
                    return Err(not_a_trace(format!(
                        "it starts with `{}`, not a JSON object or array",
                        (b as char).escape_default()
                    )))
                }
            },
            State::TopObject => match b {
                b',' => pos = i + 1,
                b'}' => state = State::Done,
                b'"' => {
                    // key, `:`, then the value (restarted from the key if input runs out)
                    let Some(k) =
                        scan::scan_value::<false>(data, i, eof, Ctx::Key, &mut stack, &mut fixed)
                    else {
                        pos = i;
                        refill(&mut buf, &mut pos, &mut filled, &mut eof).map_err(io)?;
                        continue;
                    };
                    let key_end = k.end;
                    let colon = scan::skip_ws(data, key_end);
                    let v = scan::skip_ws(data, colon + 1);
                    if v >= data.len() && !eof {
                        pos = i;
                        refill(&mut buf, &mut pos, &mut filled, &mut eof).map_err(io)?;
                        continue;
                    }
                    let key = &data[i + 1..key_end.saturating_sub(1).max(i + 1)];
                    if key == b"traceEvents" && data.get(v) == Some(&b'[') {
                        pos = v + 1;
                        state = State::Events { bare: false };
                        saw_events = true;
                        continue;
                    }
                    let Some(val) = scan::scan_value::<false>(
                        data,
                        v,
                        eof,
                        Ctx::ObjValue,
                        &mut stack,
                        &mut fixed,
                    ) else {
                        pos = i;
                        refill(&mut buf, &mut pos, &mut filled, &mut eof).map_err(io)?;
                        continue;
                    };
                    let key = key.to_vec();
                    collector.top_level(&key, &data[v..val.end]);
                    pos = val.end.max(v + 1);
                }
                _ => {
                    if !saw_events {
                        return Err(not_a_trace(format!(
                            "unexpected `{}` in the top-level object",
                            (b as char).escape_default()
                        )));
                    }
                    collector.trace.truncated = true;
                    state = State::Done;
                }
            },
            State::Events { bare } => match b {
                b',' => pos = i + 1,
                b']' => {
                    pos = i + 1;
                    state = if bare { State::Done } else { State::TopObject };
                }
                _ => {
                    // a large window of events: parse its two halves on two threads
                    if b == b'{' && data.len() - i >= PARALLEL_MIN {
                        if let Some(end) = parse_window_in_parallel(&mut collector, data, i) {
                            pos = end;
                            continue;
                        }
                    }
                    // fast path: parse the event in place; serde_json finds its end
                    if b == b'{' {
                        let mut stream = serde_json::Deserializer::from_slice(&data[i..])
                            .into_iter::<RawEvent<'_>>();
                        match stream.next() {
                            Some(Ok(e)) => {
                                pos = i + stream.byte_offset();
                                collector.event(e, true);
                                continue;
                            }
                            // the event continues past the buffer: read more, unless it is
                            // implausibly large (a raw quote may have swallowed the rest)
                            Some(Err(err)) if err.is_eof() && !eof && filled - i < MAX_EVENT => {
                                pos = i;
                                refill(&mut buf, &mut pos, &mut filled, &mut eof).map_err(io)?;
                                continue;
                            }
                            _ => {}
                        }
                    }
                    // malformed: the tolerant scanner finds the end and repairs
                    let Some(s) = scan::scan_value::<false>(
                        data,
                        i,
                        eof,
                        Ctx::ArrValue,
                        &mut stack,
                        &mut fixed,
                    ) else {
                        pos = i;
                        refill(&mut buf, &mut pos, &mut filled, &mut eof).map_err(io)?;
                        continue;
                    };
                    let end = s.end.max(i + 1);
                    let bytes = &data[i..end];
                    if b == b'{' {
                        handle_event(&mut collector, bytes, s.dirty, &mut stack, &mut fixed);
                    } else {
                        collector.trace.skipped_events += 1;
                    }
                    pos = end;
                }
            },
            State::Done => {}
        }
    }
    if !saw_events {
        return Err(not_a_trace("it has no `traceEvents` array".to_string()));
    }
    Ok(collector.trace)
}

/// Windows at least this large are parsed by two threads.
const PARALLEL_MIN: usize = 1 << 20;

/// Parses well-formed events from the start of `data` until the end of the events array,
/// a malformed event, or an event cut by the end of `data`. Returns where it stopped: the
/// start of the first event (or `]`) not consumed, commas and whitespace skipped.
fn parse_run(collector: &mut Collector, data: &[u8]) -> usize {
    let mut pos = 0;
    loop {
        let mut i = scan::skip_ws(data, pos);
        if data.get(i) == Some(&b',') {
            i = scan::skip_ws(data, i + 1);
        }
        if data.get(i) != Some(&b'{') {
            return i;
        }
        let mut stream =
            serde_json::Deserializer::from_slice(&data[i..]).into_iter::<RawEvent<'_>>();
        match stream.next() {
            Some(Ok(e)) => {
                pos = i + stream.byte_offset();
                collector.event(e, true);
            }
            _ => return i,
        }
    }
}

/// Speculative split of the window `data[start..]` of events: the second half starts at a
/// `{` that follows `}` and `,` (a likely event boundary) and is parsed on another thread
/// into its own collector, while this thread parses the first half from a known boundary.
/// The split is confirmed when the first half ends exactly at it; then the second half is
/// merged. Otherwise (the `{` was inside a string, or the first half met a malformed
/// event) the second half's work is dropped. Either way every event is taken once, and the
/// position where sequential parsing resumes is returned; `None` when no split point was
/// found (nothing was parsed).
fn parse_window_in_parallel(collector: &mut Collector, data: &[u8], start: usize) -> Option<usize> {
    let window = &data[start..];
    let split = likely_boundary(window, window.len() / 2)?;
    let (a_stop, second) = std::thread::scope(|scope| {
        let second = scope.spawn(|| {
            let mut c = Collector::new();
            let stop = parse_run(&mut c, &window[split..]);
            (c, stop)
        });
        let a_stop = parse_run(collector, &window[..split]);
        (a_stop, second.join())
    });
    match second {
        Ok((c, b_stop)) if a_stop == split => {
            collector.merge(c);
            Some(start + split + b_stop)
        }
        _ => Some(start + a_stop),
    }
}

/// The first `{` at or after `from` preceded by `,` and then `}` (whitespace aside).
fn likely_boundary(window: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i < window.len() {
        let off = window[i..].iter().position(|&b| b == b'{')?;
        i += off;
        let mut j = i;
        let back = |j: &mut usize| {
            while *j > 0 && matches!(window[*j - 1], b' ' | b'\t' | b'\n' | b'\r') {
                *j -= 1;
            }
            if *j == 0 {
                None
            } else {
                *j -= 1;
                Some(window[*j])
            }
        };
        if back(&mut j) == Some(b',') && back(&mut j) == Some(b'}') {
            return Some(i);
        }
        i += 1;
    }
    None
}

fn handle_event(
    collector: &mut Collector,
    bytes: &[u8],
    dirty: bool,
    stack: &mut Vec<u8>,
    fixed: &mut Vec<u8>,
) {
    if !dirty {
        if let Ok(e) = serde_json::from_slice::<RawEvent<'_>>(bytes) {
            collector.event(e, true);
            return;
        }
    }
    scan::repair_value(bytes, Ctx::ArrValue, stack, fixed);
    match serde_json::from_slice::<RawEvent<'_>>(fixed) {
        Ok(e) => {
            collector.trace.repaired_events += 1;
            collector.event(e, false);
        }
        Err(err) => {
            tracing::debug!(error = %err, "skipping an event that cannot be parsed");
            collector.trace.skipped_events += 1;
        }
    }
}

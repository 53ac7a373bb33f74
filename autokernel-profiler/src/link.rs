//! Linking device work to the CPU op a user recognises, and grouping it.
//!
//! - A kernel joins its launch (`cuda_runtime` or `cuda_driver` event) by
//!   `args.correlation`; a kernel or launch without one may be joined through an `ac2g`
//!   flow event at the same place and time.
//! - The launch joins its CPU op by `External id` when it has one, else by the innermost
//!   CPU range enclosing it on the launching thread (same pid and tid, time containment).
//!   Correlation ids and External ids are separate id spaces and never compared.
//! - The chain of ranges enclosing that op is walked to name the group: the innermost
//!   module range (`nn.Module: Class`), else the outermost aten op, else the innermost user
//!   annotation, else the kernel's own name. Shapes are the `Input Dims` of the op that
//!   names the group (for a module: of the op directly inside it with the highest-rank
//!   first input, its activation).

use std::collections::BTreeSet;

use rustc_hash::FxHashMap as HashMap;

use autokernel_core::DType;

use crate::import::{RangeCat, Trace, MODULE_PREFIX};

/// Tolerance of time containment, in µs: kineto rounds to nanoseconds, and at trace
/// timestamps of ~5e12 µs an f64 resolves about 0.001 µs.
const EPS_US: f64 = 0.01;

/// Device (or CPU self) time gathered under one op and input shapes.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    pub op: String,
    pub shapes: Vec<Vec<i64>>,
    pub dtype: Option<DType>,
    pub time_us: f64,
    /// Its calls as `torch.profiler`'s `key_averages` counts them: the ranges that name it
    /// (a module's forward, an outermost aten op), however many kernels or child ops each
    /// ran, plus each kernel no range names. Equals `call_us.len()`.
    pub calls: u64,
    /// The time of each call of the op (one range that names the group: a module's
    /// forward, an outermost aten op, an annotation), in µs, in the order first seen; a
    /// kernel with no such range is a call of its own. Sums to `time_us`.
    pub call_us: Vec<f64>,
    pub kernels: Vec<String>,
    /// Names of the ops and modules seen on the chains of its kernels.
    pub chain_ops: BTreeSet<String>,
}

/// The result of linking a trace.
#[derive(Debug, Default)]
pub(crate) struct Linked {
    pub groups: Vec<Group>,
    /// True when the trace had kernels; false means CPU self times were grouped.
    pub device: bool,
    pub total_us: f64,
    pub kernel_launches: u64,
    pub launches_with_kernel: u64,
    pub kernels_without_launch: u64,
    pub kernels_unattributed: u64,
}

/// Ranges of one thread sorted by start (outer first on ties), with parent links.
struct ThreadRanges {
    /// Indices into `Trace::ranges`, sorted.
    order: Vec<usize>,
    starts: Vec<f64>,
    /// Parent position (in `order`) of each position, if any.
    parent: Vec<Option<usize>>,
}

struct Index<'t> {
    trace: &'t Trace,
    threads: Vec<ThreadRanges>,
    /// Range index → (thread, position in that thread's order).
    where_is: Vec<(u32, usize)>,
    by_external_id: HashMap<u64, usize>,
}

impl<'t> Index<'t> {
    fn new(trace: &'t Trace) -> Self {
        let mut per_thread: Vec<Vec<usize>> = vec![Vec::new(); trace.threads.len()];
        for (i, r) in trace.ranges.iter().enumerate() {
            per_thread[r.thread as usize].push(i);
        }
        let mut where_is = vec![(0u32, 0usize); trace.ranges.len()];
        let threads = per_thread
            .into_iter()
            .enumerate()
            .map(|(t, mut order)| {
                order.sort_by(|&a, &b| {
                    let (ra, rb) = (&trace.ranges[a], &trace.ranges[b]);
                    ra.ts.total_cmp(&rb.ts).then(rb.end.total_cmp(&ra.end))
                });
                let mut parent = Vec::with_capacity(order.len());
                let mut stack: Vec<usize> = Vec::new();
                for (pos, &ri) in order.iter().enumerate() {
                    let r = &trace.ranges[ri];
                    // a parent contains the child entirely (within rounding); a range that
                    // only overlaps is a sibling, so chains stay as deep as the nesting
                    while let Some(&top) = stack.last() {
                        if trace.ranges[order[top]].end + EPS_US >= r.end {
                            break;
                        }
                        stack.pop();
                    }
                    parent.push(stack.last().copied());
                    stack.push(pos);
                    where_is[ri] = (t as u32, pos);
                }
                let starts = order.iter().map(|&i| trace.ranges[i].ts).collect();
                ThreadRanges {
                    order,
                    starts,
                    parent,
                }
            })
            .collect();
        let mut by_external_id = HashMap::default();
        for (i, r) in trace.ranges.iter().enumerate() {
            if let Some(id) = r.external_id {
                // an op wins over an annotation that shares its id
                let keep_old = by_external_id
                    .get(&id)
                    .is_some_and(|&o: &usize| trace.ranges[o].cat == RangeCat::Op);
                if !keep_old {
                    by_external_id.insert(id, i);
                }
            }
        }
        Index {
            trace,
            threads,
            where_is,
            by_external_id,
        }
    }

    /// The innermost range on `thread` that contains time `ts`.
    fn innermost_at(&self, thread: u32, ts: f64) -> Option<usize> {
        let t = self.threads.get(thread as usize)?;
        let n = t.starts.partition_point(|&s| s <= ts);
        let mut pos = n.checked_sub(1)?;
        loop {
            let r = &self.trace.ranges[t.order[pos]];
            if r.ts <= ts && ts <= r.end + EPS_US {
                return Some(t.order[pos]);
            }
            pos = t.parent[pos]?;
        }
    }

    /// `range` and its enclosing ranges, innermost first, into `out` (cleared first).
    fn chain_into(&self, range: usize, out: &mut Vec<usize>) {
        out.clear();
        let (thread, mut pos) = self.where_is[range];
        let t = &self.threads[thread as usize];
        out.push(range);
        while let Some(p) = t.parent[pos] {
            out.push(t.order[p]);
            pos = p;
        }
    }

    /// `range` and its enclosing ranges, innermost first.
    fn chain(&self, range: usize) -> Vec<usize> {
        let mut out = Vec::new();
        self.chain_into(range, &mut out);
        out
    }

    /// The op whose inputs stand for a module's: among the ops directly inside `range`
    /// (no other op between them and it), the first whose first input has the highest
    /// rank. A leaf module's first op is often shape-less (`arange`) or a side input
    /// (`outer(t, inv_freq)`); the highest-rank first input is the module's activation.
    fn module_input_op(&self, range: usize) -> Option<usize> {
        let r = &self.trace.ranges[range];
        let (thread, pos) = self.where_is[range];
        let t = &self.threads[thread as usize];
        let mut best: Option<(usize, usize)> = None;
        for p in pos + 1..t.order.len() {
            let i = t.order[p];
            let c = &self.trace.ranges[i];
            if c.ts > r.end {
                break;
            }
            if c.cat != RangeCat::Op || c.end > r.end {
                continue;
            }
            // directly inside: no op between it and the module
            let mut q = t.parent[p];
            let mut direct = false;
            while let Some(pp) = q {
                if pp == pos {
                    direct = true;
                    break;
                }
                if self.trace.ranges[t.order[pp]].cat == RangeCat::Op {
                    break;
                }
                q = t.parent[pp];
            }
            if !direct {
                continue;
            }
            let rank = self.trace.dims[c.dims as usize].first().map_or(0, Vec::len);
            if best.is_none_or(|(_, b)| rank > b) {
                best = Some((i, rank));
            }
        }
        best.map(|(i, _)| i)
    }
}

fn module_class(name: &str) -> Option<&str> {
    let rest = name.strip_prefix(MODULE_PREFIX)?.trim();
    // torch's `with_modules` appends an instance number: `Linear_0`
    let base = match rest.rsplit_once('_') {
        Some((b, n)) if !b.is_empty() && n.chars().all(|c| c.is_ascii_digit()) => b,
        _ => rest,
    };
    Some(base)
}

/// Wrapper ranges that enclose everything and name nothing a user would optimise.
fn is_wrapper(name: &str) -> bool {
    name.starts_with("ProfilerStep")
        || name.starts_with("autograd::")
        || name.starts_with("profiler::")
        || name.starts_with("Optimizer.")
        || name.starts_with("enumerate(DataLoader)")
        || name.starts_with("## ")
}

/// What names a group while linking: a module range (its class is derived at the end), or
/// another name (op, annotation, kernel), by name id; with the dims id and dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct GroupKey {
    module: bool,
    name: u32,
    dims: u32,
}

/// The group an attribution chain names, with its dtype and the range that names it (one
/// call of the op).
fn name_group(index: &Index<'_>, chain: &[usize]) -> Option<(GroupKey, Option<DType>, usize)> {
    let trace = index.trace;
    let ranges = &trace.ranges;
    let name = |i: usize| trace.names[ranges[i].name as usize].as_str();
    // innermost module range
    if let Some(&m) = chain.iter().find(|&&i| module_class(name(i)).is_some()) {
        let (dims, dtype) = index
            .module_input_op(m)
            .map_or((0, None), |o| (ranges[o].dims, ranges[o].dtype));
        let key = GroupKey {
            module: true,
            name: ranges[m].name,
            dims,
        };
        return Some((key, dtype, m));
    }
    // outermost aten (or custom) op
    if let Some(&o) = chain
        .iter()
        .rev()
        .find(|&&i| ranges[i].cat == RangeCat::Op && !is_wrapper(name(i)))
    {
        let key = GroupKey {
            module: false,
            name: ranges[o].name,
            dims: ranges[o].dims,
        };
        return Some((key, ranges[o].dtype, o));
    }
    // innermost user annotation
    if let Some(&a) = chain
        .iter()
        .find(|&&i| ranges[i].cat == RangeCat::Annotation && !is_wrapper(name(i)))
    {
        let key = GroupKey {
            module: false,
            name: ranges[a].name,
            dims: 0,
        };
        return Some((key, None, a));
    }
    None
}

/// A group while linking, by ids.
struct RawGroup {
    key: GroupKey,
    dtype: Option<DType>,
    time_us: f64,
    /// The ranges that named it (its calls), in the order first seen.
    call_ranges: Vec<u32>,
    /// Times of the kernels that no range named, one call each.
    loose_call_us: Vec<f64>,
    kernels: Vec<u32>,
    chain_ids: rustc_hash::FxHashSet<u32>,
}

struct Groups {
    index: HashMap<GroupKey, usize>,
    list: Vec<RawGroup>,
    /// Time gathered under each range of the trace as the range naming a group (one call),
    /// NaN until it names one: a flat vector costs 8 bytes a range, where a map per group
    /// would cost several times that on traces of millions of events.
    range_us: Vec<f64>,
}

impl Groups {
    /// Groups for a trace of `ranges` ranges.
    fn new(ranges: usize) -> Self {
        Groups {
            index: HashMap::default(),
            list: Vec::new(),
            range_us: vec![f64::NAN; ranges],
        }
    }

    /// Adds `time_us` to the group `key`, as part of the call named by range `call` (or as
    /// a call of its own when no range names it).
    fn add(
        &mut self,
        key: GroupKey,
        dtype: Option<DType>,
        time_us: f64,
        call: Option<usize>,
        kernel: Option<u32>,
        chain_names: impl Iterator<Item = u32>,
    ) {
        let list = &mut self.list;
        let i = *self.index.entry(key).or_insert_with(|| {
            list.push(RawGroup {
                key,
                dtype,
                time_us: 0.0,
                call_ranges: Vec::new(),
                loose_call_us: Vec::new(),
                kernels: Vec::new(),
                chain_ids: Default::default(),
            });
            list.len() - 1
        });
        let g = &mut self.list[i];
        g.time_us += time_us;
        match call {
            Some(r) if self.range_us[r].is_nan() => {
                self.range_us[r] = time_us;
                g.call_ranges.push(r as u32);
            }
            Some(r) => self.range_us[r] += time_us,
            None => g.loose_call_us.push(time_us),
        }
        if g.dtype.is_none() {
            g.dtype = dtype;
        }
        if let Some(k) = kernel {
            if !g.kernels.contains(&k) {
                g.kernels.push(k);
            }
        }
        g.chain_ids.extend(chain_names);
    }

    /// Named groups; groups that name the same op and shapes (module instances
    /// `Linear_0`, `Linear_1`) are merged.
    fn finish(self, trace: &Trace) -> Vec<Group> {
        let names = &trace.names;
        let mut out: Vec<Group> = Vec::new();
        let mut by_label: std::collections::HashMap<(String, u32), usize> = Default::default();
        for g in self.list {
            let raw = names[g.key.name as usize].as_str();
            let op = if g.key.module {
                module_class(raw).unwrap_or(raw).to_string()
            } else {
                raw.to_string()
            };
            let i = *by_label.entry((op.clone(), g.key.dims)).or_insert_with(|| {
                out.push(Group {
                    op,
                    shapes: trace.dims[g.key.dims as usize].clone(),
                    dtype: None,
                    time_us: 0.0,
                    calls: 0,
                    call_us: Vec::new(),
                    kernels: Vec::new(),
                    chain_ops: BTreeSet::new(),
                });
                out.len() - 1
            });
            let o = &mut out[i];
            o.time_us += g.time_us;
            // one call per naming range (a range names one group only), not per kernel
            // or child op under it
            o.call_us
                .extend(g.call_ranges.iter().map(|&r| self.range_us[r as usize]));
            o.call_us.extend(g.loose_call_us);
            o.calls = o.call_us.len() as u64;
            o.dtype = o.dtype.or(g.dtype);
            for k in g.kernels {
                let k = &names[k as usize];
                if !o.kernels.contains(k) {
                    o.kernels.push(k.clone());
                }
            }
            o.chain_ops
                .extend(g.chain_ids.into_iter().map(|id| names[id as usize].clone()));
        }
        out
    }
}

/// Name ids of the ops, modules and annotations on a chain.
fn chain_names<'c>(trace: &'c Trace, chain: &'c [usize]) -> impl Iterator<Item = u32> + 'c {
    chain
        .iter()
        .filter(|&&i| trace.ranges[i].cat != RangeCat::Other)
        .map(|&i| trace.ranges[i].name)
}

/// Attributes every kernel (or, in a trace without kernels, every CPU op's self time).
pub(crate) fn link(trace: &Trace) -> Linked {
    let index = Index::new(trace);
    let mut linked = Linked::default();
    let mut groups = Groups::new(trace.ranges.len());
    let mut chain: Vec<usize> = Vec::new();

    // launches by correlation, including those found only through flow events
    let mut launches: HashMap<u64, &crate::import::Launch> =
        trace.launches.iter().map(|(&c, l)| (c, l)).collect();
    if !trace.uncorrelated_launches.is_empty() {
        let starts: HashMap<(i64, i64, u64), u64> = trace
            .flow_starts
            .iter()
            .map(|&(p, t, ts, id)| ((p, t, ts), id))
            .collect();
        for (pid, tid, ts, l) in &trace.uncorrelated_launches {
            if let Some(&id) = starts.get(&(*pid, *tid, ts.to_bits())) {
                launches.entry(id).or_insert(l);
            }
        }
    }
    let flow_ends: HashMap<(i64, i64, u64), u64> =
        if trace.kernels.iter().any(|k| k.correlation.is_none()) {
            trace
                .flow_ends
                .iter()
                .map(|&(p, t, ts, id)| ((p, t, ts), id))
                .collect()
        } else {
            HashMap::default()
        };

    if trace.kernels.is_empty() {
        link_cpu_self_time(trace, &index, &mut groups, &mut linked);
    } else {
        linked.device = true;
        let mut launched: rustc_hash::FxHashSet<u64> = rustc_hash::FxHashSet::default();
        for k in &trace.kernels {
            linked.total_us += k.dur;
            let correlation = k
                .correlation
                .or_else(|| flow_ends.get(&(k.pid, k.tid, k.ts.to_bits())).copied());
            let launch = correlation.and_then(|c| launches.get(&c).map(|l| (c, *l)));
            let op_range = match launch {
                Some((c, l)) => {
                    launched.insert(c);
                    match l.external_id.and_then(|e| index.by_external_id.get(&e)) {
                        Some(&r) => Some(r),
                        None => index.innermost_at(l.thread, l.ts),
                    }
                }
                None => {
                    linked.kernels_without_launch += 1;
                    k.external_id
                        .and_then(|e| index.by_external_id.get(&e))
                        .copied()
                }
            };
            match op_range {
                Some(r) => index.chain_into(r, &mut chain),
                None => chain.clear(),
            }
            let (key, dtype, call) = match name_group(&index, &chain) {
                Some((key, dtype, range)) => (key, dtype, Some(range)),
                None => {
                    linked.kernels_unattributed += 1;
                    let key = GroupKey {
                        module: false,
                        name: k.name,
                        dims: 0,
                    };
                    (key, None, None)
                }
            };
            groups.add(
                key,
                dtype,
                k.dur,
                call,
                Some(k.name),
                chain_names(trace, &chain),
            );
        }
        linked.launches_with_kernel = launches
            .iter()
            .filter(|(c, l)| l.launches_kernel && launched.contains(c))
            .count() as u64;
    }
    linked.kernel_launches = launches.values().filter(|l| l.launches_kernel).count() as u64;
    linked.groups = groups.finish(trace);
    linked
}

/// A trace without device activity: each op's self time (its duration minus that of the
/// ops directly under it) goes to the group its chain names.
fn link_cpu_self_time(trace: &Trace, index: &Index<'_>, groups: &mut Groups, linked: &mut Linked) {
    let ranges = &trace.ranges;
    let mut self_us: Vec<f64> = ranges
        .iter()
        .map(|r| {
            if r.cat == RangeCat::Op {
                r.end - r.ts
            } else {
                0.0
            }
        })
        .collect();
    for (i, r) in ranges.iter().enumerate() {
        if r.cat != RangeCat::Op {
            continue;
        }
        // the nearest enclosing op loses this op's time from its self time
        if let Some(&p) = index.chain(i)[1..]
            .iter()
            .find(|&&p| ranges[p].cat == RangeCat::Op)
        {
            self_us[p] -= r.end - r.ts;
        }
    }
    for (i, r) in ranges.iter().enumerate() {
        if r.cat != RangeCat::Op {
            continue;
        }
        let t = self_us[i].max(0.0);
        let chain = index.chain(i);
        let Some((key, dtype, call)) = name_group(index, &chain) else {
            continue;
        };
        linked.total_us += t;
        groups.add(key, dtype, t, Some(call), None, chain_names(trace, &chain));
    }
}

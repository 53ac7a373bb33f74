//! [`TunerAgent`]: coordinate descent over a kernel's `TUNABLES`, editing only `CONFIG`.

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use autokernel_core::{
    Agent, AgentError, Decision, ExperimentRecord, Proposal, ProposalContext, Verdict,
};

use crate::pyliteral::{PyValue, TunableSource};

/// The prefix of every description the tuner writes, for people reading the log; the
/// tuner itself never reads descriptions back (it reads [`ExperimentRecord::config`]).
pub const TUNE_PREFIX: &str = "tune:";

/// The agent that needs no network: it searches the launch parameters a kernel declares.
///
/// The current best `kernel.py` declares `CONFIG = {...}` on one line (the values in use)
/// and `TUNABLES = {...}` (each key's candidate values, in order, possibly over several
/// lines). Each proposal changes one key of the best `CONFIG` to another value of its
/// `TUNABLES` list: coordinate descent. Values are tried nearest first (one step up,
/// one step down, then two steps, …), keys in turn at each distance, so a kept improvement
/// moves the centre and the next proposal searches around the new best. When no single
/// move is left, pairs of keys move together, each to one of its two nearest values. The
/// keys that the best's `kernel_fn` read in its timed call move first, when the bench says
/// which ([`autokernel_core::Metrics::config_keys_read`]), singles then pairs; then every
/// key, as without that list. A configuration
/// is never proposed twice for the same kernel structure (the file without its `CONFIG`
/// literal): the tuner remembers what it proposed, and after a restart reads the
/// configurations measured on this structure from the history's structured records
/// ([`ExperimentRecord::config`]: the `CONFIG` each benchmarked kernel declared and the
/// digest of the rest of its file), whoever proposed them; descriptions are never parsed.
/// When every single and paired move around the best has been measured it answers
/// [`Proposal::Exhausted`].
///
/// Only the `CONFIG` literal is rewritten; every other byte of the file, the rest of that
/// line included, is unchanged. A file without `CONFIG`/`TUNABLES`, or with literals
/// outside the subset [`crate::pyliteral`] reads, has nothing to tune: `Exhausted`, with a
/// warning in the log saying why.
#[derive(Debug, Default)]
pub struct TunerAgent {
    /// Per target id, per structure digest: canonical forms of the configurations tried.
    tried: HashMap<String, HashMap<String, HashSet<String>>>,
}

impl TunerAgent {
    /// A tuner with nothing tried yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The next configuration to try for `context`, as a full candidate, or `None` when
    /// the neighbourhood of the best is exhausted (or there is nothing to tune).
    fn next(&mut self, context: &ProposalContext<'_>) -> Option<(String, String)> {
        let source = context.best_source;
        let parsed = match TunableSource::parse(source) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(target_id = %context.target.id, error = %e, "nothing to tune");
                return None;
            }
        };
        let structure = parsed.structure_digest(source);
        let measured = measured_on(context.history, &structure);
        let tried = self
            .tried
            .entry(context.target.id.clone())
            .or_default()
            .entry(structure)
            .or_default();
        tried.insert(canonical(&parsed.config));
        for config in measured {
            tried.insert(canonical(config));
        }
        // single-key moves first (coordinate descent), then pairs of keys: launch
        // parameters interact (more rows per program wants more warps), and a pair can
        // improve where every single move from the best does not
        // the keys the best read at this shape first, then every key: a read the recorder
        // cannot see (at import, cached from an earlier call, on a path another key selects)
        // still gets its moves, after the ones that surely count
        let read = keys_the_best_reads(&parsed.tunables, context);
        let moves = neighbourhood(&parsed.config, &read)
            .into_iter()
            .map(|m| vec![m])
            .chain(pair_neighbourhood(&parsed.config, &read))
            .chain(
                neighbourhood(&parsed.config, &parsed.tunables)
                    .into_iter()
                    .map(|m| vec![m]),
            )
            .chain(pair_neighbourhood(&parsed.config, &parsed.tunables));
        for changes in moves {
            let mut config = parsed.config.clone();
            let mut what = Vec::new();
            for (key, value) in &changes {
                let old = config
                    .iter_mut()
                    .find(|(k, _)| k == key)
                    .map(|slot| std::mem::replace(&mut slot.1, value.clone()))
                    .expect("neighbourhoods only change keys of CONFIG");
                what.push(format!("{key} {} -> {}", compact(&old), compact(value)));
            }
            if tried.insert(canonical(&config)) {
                let description = format!("{} ({})", describe(&config), what.join(", "));
                tracing::debug!(target_id = %context.target.id, %description, "tuner proposes");
                return Some((description, parsed.with_config(source, &config)));
            }
        }
        tracing::debug!(
            target_id = %context.target.id,
            tried = tried.len(),
            "tuner: every single and paired move around the best was measured"
        );
        None
    }
}

/// The tunables that the current best read in its timed call
/// ([`autokernel_core::Metrics::config_keys_read`]), searched first: a key that `kernel_fn`
/// does not read at the target's shape cannot change its time (the softmax starter's wide
/// rows read 2 of its 9 keys at 4096×50257 on the GPU). Every tunable when the best was not
/// timed in this run (a resume), when its reads are unknown, or when it read none of them.
fn keys_the_best_reads(
    tunables: &[(String, Vec<PyValue>)],
    context: &ProposalContext<'_>,
) -> Vec<(String, Vec<PyValue>)> {
    let read = context
        .best_result
        .and_then(|r| r.metrics.as_ref())
        .and_then(|m| m.config_keys_read.as_ref());
    let Some(read) = read else {
        return tunables.to_vec();
    };
    let used: Vec<_> = tunables
        .iter()
        .filter(|(key, _)| read.contains(key))
        .cloned()
        .collect();
    if used.is_empty() {
        return tunables.to_vec();
    }
    if used.len() < tunables.len() {
        tracing::debug!(
            target_id = %context.target.id,
            keys = ?used.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            "tuner: the keys the best reads at this shape move first"
        );
    }
    used
}

#[async_trait]
impl Agent for TunerAgent {
    fn name(&self) -> String {
        "tune".to_string()
    }

    async fn propose(&mut self, context: &ProposalContext<'_>) -> Result<Proposal, AgentError> {
        Ok(match self.next(context) {
            Some((description, source)) => Proposal::Candidate {
                description,
                source,
                usage: None,
            },
            None => Proposal::Exhausted,
        })
    }
}

/// `tune: KEY=VALUE KEY=VALUE …`, the full configuration in source order.
pub(crate) fn describe(config: &[(String, PyValue)]) -> String {
    let parts: Vec<String> = config
        .iter()
        .map(|(k, v)| format!("{k}={}", compact(v)))
        .collect();
    format!("{TUNE_PREFIX} {}", parts.join(" "))
}

/// A value as Python source without spaces between items, so that a description splits
/// on whitespace into `KEY=VALUE` words.
fn compact(value: &PyValue) -> String {
    match value {
        PyValue::List(items) => {
            let parts: Vec<String> = items.iter().map(compact).collect();
            format!("[{}]", parts.join(","))
        }
        PyValue::Dict(entries) => {
            let parts: Vec<String> = entries
                .iter()
                .map(|(k, v)| format!("{}:{}", PyValue::Str(k.clone()), compact(v)))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        other => other.to_string(),
    }
}

/// An order-independent form of a configuration, for the set of those tried.
fn canonical(config: &[(String, PyValue)]) -> String {
    let mut entries = config.to_vec();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    PyValue::Dict(entries).to_string()
}

/// Configurations measured on the kernel structure `structure` (the digest of the file
/// without its `CONFIG` literal, [`autokernel_core::pyliteral::KernelConfig::structure`]):
/// every benchmarked row whose recorded configuration is of that structure, the baseline's
/// and other agents' included, since an equal digest means the same kernel. Invalid rows
/// were never measured; rows without a recorded configuration say nothing.
fn measured_on<'h>(
    history: &'h [ExperimentRecord],
    structure: &str,
) -> Vec<&'h [(String, PyValue)]> {
    let mut measured = Vec::new();
    let mut interrupted: HashMap<String, u32> = HashMap::new();
    for r in history.iter().filter(|r| r.decision != Decision::Invalid) {
        let Some(config) = r.config.as_ref().filter(|c| c.structure == structure) else {
            continue;
        };
        // an experiment cut short (a kill, a second Ctrl-C) measured nothing: its
        // configuration may be tried once more, not again and again (a configuration that
        // itself brings the process down would otherwise be retried on every resume)
        if r.correctness == Verdict::Interrupted {
            let times = interrupted.entry(canonical(&config.values)).or_default();
            *times += 1;
            if *times < MAX_INTERRUPTED_TRIES {
                continue;
            }
        }
        measured.push(config.values.as_slice());
    }
    measured
}

/// How many times a configuration may be cut short before the tuner counts it as tried.
const MAX_INTERRUPTED_TRIES: u32 = 2;

/// How many of each key's nearest alternatives the paired moves combine.
const PAIR_RANKS: usize = 2;

/// Two-key changes of `config`, nearest first: for each pair of tunable keys (in
/// `TUNABLES` order) and each of their `PAIR_RANKS` nearest alternatives (as
/// `neighbourhood` ranks them), ordered by the sum of the two ranks. Three keys with two
/// alternatives each give 3 pairs × 4 = 12 moves.
fn pair_neighbourhood(
    config: &[(String, PyValue)],
    tunables: &[(String, Vec<PyValue>)],
) -> Vec<Vec<(String, PyValue)>> {
    let axes: Vec<(String, Vec<PyValue>)> = tunables
        .iter()
        .filter_map(|(key, values)| {
            let current = &config.iter().find(|(k, _)| k == key)?.1;
            let mut near = ranked_alternatives(current, values);
            near.truncate(PAIR_RANKS);
            Some((key.clone(), near))
        })
        .collect();
    let mut out = Vec::new();
    for rank_sum in 0..(2 * PAIR_RANKS).saturating_sub(1) {
        for (i, (k1, v1)) in axes.iter().enumerate() {
            for (k2, v2) in &axes[i + 1..] {
                for r1 in 0..=rank_sum {
                    let r2 = rank_sum - r1;
                    if let (Some(a), Some(b)) = (v1.get(r1), v2.get(r2)) {
                        out.push(vec![(k1.clone(), a.clone()), (k2.clone(), b.clone())]);
                    }
                }
            }
        }
    }
    out
}

/// The single-key changes of `config`, in rounds: round k offers, for each tunable key in
/// `TUNABLES` order, that key's k-th nearest value ([`ranked_alternatives`]: one step up
/// its list, one down, two up, two down, …, steps past an end skipped, so a key at the top
/// of its list offers its step down in round 0). A current value that is not in the list is
/// placed by numeric distance, ties in list order (lists of non-numbers keep their order).
fn neighbourhood(
    config: &[(String, PyValue)],
    tunables: &[(String, Vec<PyValue>)],
) -> Vec<(String, PyValue)> {
    let axes: Vec<(String, Vec<PyValue>)> = tunables
        .iter()
        .filter_map(|(key, values)| {
            let current = &config.iter().find(|(k, _)| k == key)?.1;
            Some((key.clone(), ranked_alternatives(current, values)))
        })
        .collect();
    let longest = axes.iter().map(|(_, v)| v.len()).max().unwrap_or(0);
    let mut out = Vec::new();
    for rank in 0..longest {
        for (key, alternatives) in &axes {
            if let Some(v) = alternatives.get(rank) {
                out.push((key.clone(), v.clone()));
            }
        }
    }
    out
}

/// The values of `list` other than `current`, nearest first (up before down).
fn ranked_alternatives(current: &PyValue, list: &[PyValue]) -> Vec<PyValue> {
    let mut out: Vec<PyValue> = Vec::new();
    let mut push = |v: &PyValue| {
        if v != current && !out.contains(v) {
            out.push(v.clone());
        }
    };
    if let Some(i) = list.iter().position(|v| v == current) {
        for step in 1..list.len() {
            if let Some(v) = list.get(i + step) {
                push(v);
            }
            if let Some(v) = i.checked_sub(step).and_then(|j| list.get(j)) {
                push(v);
            }
        }
    } else if let Some(c) = current.as_f64() {
        let mut by_distance: Vec<&PyValue> = list.iter().collect();
        by_distance.sort_by(|a, b| {
            let da = a.as_f64().map_or(f64::INFINITY, |x| (x - c).abs());
            let db = b.as_f64().map_or(f64::INFINITY, |x| (x - c).abs());
            da.total_cmp(&db)
        });
        by_distance.into_iter().for_each(&mut push);
    } else {
        list.iter().for_each(&mut push);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(v: &[i64]) -> Vec<PyValue> {
        v.iter().map(|&x| PyValue::Int(x)).collect()
    }

    #[test]
    fn alternatives_go_outwards_from_the_current_value_up_first() {
        let list = ints(&[1, 2, 4, 8, 16]);
        assert_eq!(
            ranked_alternatives(&PyValue::Int(4), &list),
            ints(&[8, 2, 16, 1])
        );
        assert_eq!(
            ranked_alternatives(&PyValue::Int(1), &list),
            ints(&[2, 4, 8, 16])
        );
        // not in the list: by numeric distance (|5-4| = 1, |5-2| = |5-8| = 3, ties in
        // list order, |5-1| = 4, |5-16| = 11)
        assert_eq!(
            ranked_alternatives(&PyValue::Int(5), &list),
            ints(&[4, 2, 8, 1, 16])
        );
    }

    #[test]
    fn descriptions_name_the_full_configuration_without_spaces_in_values() {
        let config = vec![
            ("BLOCK_SIZE".to_string(), PyValue::Int(1024)),
            ("order".to_string(), PyValue::List(ints(&[1, 0]))),
            ("mode".to_string(), PyValue::Str("fast".into())),
        ];
        assert_eq!(
            describe(&config),
            "tune: BLOCK_SIZE=1024 order=[1,0] mode=\"fast\""
        );
    }
}

//! Triton launcher signatures, carried from one candidate's worker to the next workers'
//! start (issue 21, point 1: Triton's cache, built on the trusted side).
//!
//! Each candidate's worker has an empty private Triton cache, so each builds, with the host
//! compiler, a C launcher per kernel signature it launches (0.3–0.5 s each on the H200,
//! docs/benchmarks.md). A worker reports the signatures its launchers were built for; the
//! parent keeps them here and hands them to the workers it launches next, which build those
//! launchers before any candidate is loaded: while they wait as spares. A signature is data
//! only (argument type names such as `*fp16`, `i32`, `constexpr`): Triton generates the C
//! source from it in the new worker, so what a candidate reports can at worst cost a spare
//! a useless build; names outside a narrow alphabet are dropped here, so no reported text
//! reaches C source.

/// Distinct signatures kept, the most recently reported: a run tunes one target at a time,
/// whose kernels have a few signatures, and moves on to the next target's; the cap bounds a
/// spare's start however many a candidate reports.
pub(crate) const MAX_SIGNATURES: usize = 16;
/// Arguments of one kernel signature at most.
const MAX_ARGUMENTS: usize = 64;
/// Characters of one argument type name at most (`*fp8e4b15`, `constexpr`, `nvTmaDesc`).
const MAX_TYPE_CHARS: usize = 24;

/// The launcher signatures seen so far by one [`super::client::Worker`].
#[derive(Debug, Default)]
pub(crate) struct LauncherSignatures {
    seen: Vec<Vec<String>>,
}

impl LauncherSignatures {
    /// Adds what a worker reported, keeping only well-formed signatures ([`is_signature`]):
    /// each once, the latest last, the oldest dropped beyond [`MAX_SIGNATURES`].
    pub(crate) fn add(&mut self, reported: Vec<Vec<String>>) {
        let fresh: Vec<Vec<String>> = reported.into_iter().filter(|s| is_signature(s)).collect();
        // only the last MAX_SIGNATURES of a report can stay: the work per reply is bounded
        // however many a candidate reports
        let skip = fresh.len().saturating_sub(MAX_SIGNATURES);
        for sig in fresh.into_iter().skip(skip) {
            self.seen.retain(|s| *s != sig);
            self.seen.push(sig);
        }
        let over = self.seen.len().saturating_sub(MAX_SIGNATURES);
        self.seen.drain(..over);
    }

    /// The signatures as a JSON array of arrays of type names, for a new worker's
    /// environment (`protocol::env::TRITON_LAUNCHERS`).
    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string(&self.seen).unwrap_or_else(|_| "[]".into())
    }

    /// How many are kept.
    pub(crate) fn len(&self) -> usize {
        self.seen.len()
    }
}

/// Whether `sig` is a plausible Triton kernel signature: 1 to [`MAX_ARGUMENTS`] type names,
/// each an optional `*` (a pointer) then 1 to [`MAX_TYPE_CHARS`] ASCII letters, digits or
/// underscores.
fn is_signature(sig: &[String]) -> bool {
    (1..=MAX_ARGUMENTS).contains(&sig.len())
        && sig.iter().all(|ty| {
            let name = ty.strip_prefix('*').unwrap_or(ty);
            (1..=MAX_TYPE_CHARS).contains(&name.len())
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(types: &[&str]) -> Vec<String> {
        types.iter().map(|t| t.to_string()).collect()
    }

    #[test]
    fn well_formed_signatures_are_kept_once_the_latest_last() {
        let mut s = LauncherSignatures::default();
        let rmsnorm = sig(&["*fp16", "*fp16", "*fp16", "i32", "i32", "fp32", "constexpr"]);
        let copy = sig(&["*fp32", "*fp32", "i32", "constexpr"]);
        s.add(vec![rmsnorm.clone(), copy.clone()]);
        s.add(vec![rmsnorm.clone()]);
        assert_eq!(s.len(), 2);
        let back: Vec<Vec<String>> = serde_json::from_str(&s.to_json()).unwrap();
        assert_eq!(back, [copy, rmsnorm]);
    }

    #[test]
    fn text_that_could_reach_c_source_is_dropped() {
        let mut s = LauncherSignatures::default();
        s.add(vec![
            sig(&["*fp16", "i32); system(\"touch /tmp/x\"); //"]),
            sig(&["**fp16"]),
            sig(&["*"]),
            sig(&[""]),
            sig(&["i32 "]),
            sig(&["fp32\n"]),
            sig(&[&"i".repeat(MAX_TYPE_CHARS + 1)]),
            vec![],
            vec!["i32".to_string(); MAX_ARGUMENTS + 1],
        ]);
        assert_eq!(s.len(), 0, "{}", s.to_json());
        s.add(vec![vec!["i32".to_string(); MAX_ARGUMENTS]]);
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn of_a_huge_report_the_last_well_formed_ones_are_kept() {
        let mut s = LauncherSignatures::default();
        let n = 200_000;
        let mut report: Vec<Vec<String>> = (0..n).map(|i| vec![format!("a{i}")]).collect();
        report.push(sig(&["bad type"]));
        s.add(report);
        let back: Vec<Vec<String>> = serde_json::from_str(&s.to_json()).unwrap();
        let want: Vec<Vec<String>> = (n - MAX_SIGNATURES..n)
            .map(|i| vec![format!("a{i}")])
            .collect();
        assert_eq!(back, want);
    }

    #[test]
    fn no_more_than_the_cap_are_kept() {
        let mut s = LauncherSignatures::default();
        let many: Vec<Vec<String>> = (1..=MAX_SIGNATURES + 5)
            .map(|n| vec!["i32".to_string(); n])
            .collect();
        s.add(many);
        assert_eq!(s.len(), MAX_SIGNATURES);
        let back: Vec<Vec<String>> = serde_json::from_str(&s.to_json()).unwrap();
        assert_eq!(back[0].len(), 6, "the latest reported are the ones kept");
        assert_eq!(back[MAX_SIGNATURES - 1].len(), MAX_SIGNATURES + 5);
    }
}

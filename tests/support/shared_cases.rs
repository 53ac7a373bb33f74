//! The extra suite of shared regression cases, one copy for every crate's tests: each
//! crate's test support includes this file with `#[path]` (a test-only helper crate would
//! be a package of its own for one function). `CARGO_MANIFEST_DIR` is the including
//! crate's, and every crate sits one level below the repository's root.

use std::path::{Path, PathBuf};

/// The shared cases folder of `area`, an extra suite that CI keeps beside the clone:
/// `$AUTOKERNEL_SHARED_CASES/<area>` when that variable is set (an empty value or a missing
/// path disables the suite), else `<workspace>/../shared/cases/<area>`. `None`, after
/// printing why `test` was skipped, when the folder is absent: a plain clone has no
/// `../shared`, and the in-repo cases cover the same behaviour.
// the skip line is the test's own output (libtest shows it with --nocapture or on failure)
#[allow(clippy::print_stdout)]
pub fn shared_cases_dir(area: &str, test: &str) -> Option<PathBuf> {
    let root = match std::env::var_os("AUTOKERNEL_SHARED_CASES") {
        Some(v) if v.is_empty() => {
            println!(
                "skipped {test}: AUTOKERNEL_SHARED_CASES is set empty (shared cases disabled)"
            );
            return None;
        }
        Some(v) => PathBuf::from(v),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/cases"),
    };
    let dir = root.join(area);
    if dir.is_dir() {
        Some(dir)
    } else {
        println!(
            "skipped {test}: no shared cases folder at `{}` (set AUTOKERNEL_SHARED_CASES to use \
             another); the in-repo cases in tests/cases/{area}/ still run",
            dir.display()
        );
        None
    }
}

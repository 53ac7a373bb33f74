//! Helpers shared by the test modules: where the regression cases live, importing them,
//! looking ops up.

use std::path::{Path, PathBuf};

use autokernel_profiler::{import_trace, import_trace_from, ImportedTrace};

/// The in-repo regression cases of `area` (`tests/cases/<area>/`, see its README); they
/// ship with the repository, so a missing folder is a broken checkout and fails loudly.
pub fn cases_dir(area: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/cases")
        .join(area);
    assert!(
        dir.is_dir(),
        "in-repo cases folder not found at `{}`",
        dir.display()
    );
    dir
}

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

/// Imports the trace at `path`, panicking with the error when the import fails.
pub fn import_file(path: &Path) -> ImportedTrace {
    import_trace(path).unwrap_or_else(|e| panic!("import of {} failed: {e}", path.display()))
}

/// Imports the in-repo trace case `name`.
pub fn import_case(name: &str) -> ImportedTrace {
    import_file(&cases_dir("traces").join(name))
}

/// Imports a trace given as a JSON text.
pub fn import_text(text: &str) -> ImportedTrace {
    import_trace_from(text.as_bytes(), "test.json".as_ref()).expect("import")
}

/// The op of that name, panicking with the whole report when absent.
pub fn op<'a>(t: &'a ImportedTrace, name: &str) -> &'a autokernel_core::OpProfile {
    t.report
        .ops
        .iter()
        .find(|o| o.op == name)
        .unwrap_or_else(|| panic!("no op `{name}` in {:#?}", t.report))
}

pub fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

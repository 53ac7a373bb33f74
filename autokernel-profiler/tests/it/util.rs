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

/// The shared cases folder of an area, when present (one source: `tests/support/`).
#[path = "../../../tests/support/shared_cases.rs"]
mod shared_cases;
pub use shared_cases::shared_cases_dir;

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

//! Helpers shared by the test modules.

use std::path::PathBuf;

use autokernel_profiler::{import_trace, import_trace_from, ImportedTrace};

/// `../shared/cases/<area>` (the workspace sits at /work/main, the cases at /work/shared);
/// fails loudly with the path it tried.
pub fn cases_dir(area: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/cases")
        .join(area);
    assert!(
        root.is_dir(),
        "cases folder not found at {}",
        root.display()
    );
    root
}

pub fn import_case(name: &str) -> ImportedTrace {
    let p = cases_dir("traces").join(name);
    import_trace(&p).unwrap_or_else(|e| panic!("import of {} failed: {e}", p.display()))
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

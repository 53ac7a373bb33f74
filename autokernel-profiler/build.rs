//! Links the test-only worker bin against the libpython it was built with (NOTES.md:
//! without the rpath it exits 127 at start, unable to find `libpython3.X.so`).
/// Without the `model-profiler` feature there is no worker bin and no libpython to link.
fn main() {
    #[cfg(feature = "model-profiler")]
    pyo3_build_config::add_libpython_rpath_link_args();
}

//! Build script of autokernel-bench:
//! - links the binary against the libpython it was built with (NOTES.md: without the rpath
//!   a binary exits 127 at start, unable to find `libpython3.X.so`);
//! - records the linked Python's `major.minor` in `AUTOKERNEL_LINKED_PYTHON`, so the parent
//!   can refuse an interpreter of another minor version before it spawns a worker.
fn main() {
    pyo3_build_config::add_libpython_rpath_link_args();
    let config = pyo3_build_config::get();
    println!(
        "cargo:rustc-env=AUTOKERNEL_LINKED_PYTHON={}.{}",
        config.version().major,
        config.version().minor
    );
    println!("cargo:rerun-if-changed=build.rs");
}

//! Build script of autokernel-bench:
//! - links the binary against the libpython it was built with (NOTES.md: without the rpath
//!   a binary exits 127 at start, unable to find `libpython3.X.so`);
//! - records the linked Python's `major.minor` in `AUTOKERNEL_LINKED_PYTHON`, so the parent
//!   can refuse an interpreter of another minor version before it spawns a worker;
//! - generates `python_files.rs`: the embedded Python sources (harness, catalogue, starters).
use std::fmt::Write as _;
use std::path::Path;

const KINDS: [&str; 9] = [
    "matmul",
    "softmax",
    "layernorm",
    "rmsnorm",
    "flash_attention",
    "fused_mlp",
    "cross_entropy",
    "rotary_embedding",
    "reduce",
];

fn main() {
    pyo3_build_config::add_libpython_rpath_link_args();
    let config = pyo3_build_config::get();
    println!(
        "cargo:rustc-env=AUTOKERNEL_LINKED_PYTHON={}.{}",
        config.version().major,
        config.version().minor
    );

    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let root = Path::new(&manifest);
    println!("cargo:rerun-if-changed=python");
    println!("cargo:rerun-if-changed=python/starters");
    let mut code = String::new();
    let embed = |rel: &str| format!("include_str!(concat!(env!(\"CARGO_MANIFEST_DIR\"), \"/{rel}\"))");
    // The catalogue is written by another part of the project; until it exists a minimal
    // softmax-only catalogue from the tests keeps the crate building (the worker then knows
    // only softmax).
    let catalogue = if root.join("python/catalogue.py").exists() {
        "python/catalogue.py"
    } else {
        println!("cargo:warning=python/catalogue.py missing: embedding the softmax-only test catalogue");
        "tests/fixtures/catalogue_softmax.py"
    };
    writeln!(code, "/// The catalogue's Python source.\npub(crate) const CATALOGUE_PY: &str = {};", embed(catalogue)).expect("write to String");
    writeln!(code, "/// Starter sources by kind name; `None` where the starter is missing from the build.\npub(crate) fn starter_by_name(name: &str) -> Option<&'static str> {{\n    match name {{").expect("write to String");
    for kind in KINDS {
        let rel = format!("python/starters/{kind}.py");
        if root.join(&rel).exists() {
            writeln!(code, "        \"{kind}\" => Some({}),", embed(&rel)).expect("write to String");
        } else if kind == "softmax" {
            writeln!(code, "        \"{kind}\" => Some({}),", embed("tests/fixtures/softmax_starter.py")).expect("write to String");
        }
    }
    writeln!(code, "        _ => None,\n    }}\n}}").expect("write to String");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    std::fs::write(Path::new(&out).join("python_files.rs"), code).expect("write python_files.rs");
}

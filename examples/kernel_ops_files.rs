//! Writes the kernels-as-operators module with the catalogue it reads (`kernel_ops.py`,
//! `catalogue.py`, `catalogue.json`) into a folder, for Python run without the
//! `autokernel` command: the host-time benchmark on the GPU machine, which has no Rust
//! toolchain (build here, carry the folder there, as `docs/gpu.md` says).
//!
//! ```sh
//! cargo run --example kernel_ops_files -- gpu-bin/ops
//! python3 benches/gpu/host_time.py gpu-bin/ops
//! ```
#![allow(clippy::print_stdout)] // an example prints what it wrote

fn main() -> anyhow::Result<()> {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).unwrap_or("kernel-ops".into()));
    std::fs::create_dir_all(&dir)?;
    autokernel::services::write_kernel_ops(&dir)?;
    println!("{}", dir.display());
    Ok(())
}

//! The `autokernel` command.
fn main() {}

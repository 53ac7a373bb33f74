//! Integration tests of the `autokernel` command (one test binary, a module per topic).
//! They run the real binary, with the real bench worker on the CPU (Triton's interpreter),
//! and read the workspace back with the `git` command as an independent reader.

mod cli;
mod embed;
mod export;
mod hf_attention;
mod hf_chains;
mod hf_matmul;
mod hf_mlp;
mod hf_models;
mod hf_norms;
mod hf_rotary;
mod inputs;
mod kernel_ops;
mod llm;
mod module_graph;
mod plugs;
mod problems;
mod run;
mod tune;
mod util;
mod verify;

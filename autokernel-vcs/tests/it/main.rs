//! Integration tests of `GixStore` against real repositories in temp dirs, read back with the
//! `git` command as an independent reader.

mod basics;
mod locks;
mod loop_run;
mod many;
mod notes;
mod reconcile;
mod refuse;
mod revert;
mod support;

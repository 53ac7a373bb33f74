//! The child's own log lines on stderr, which the parent shows inside its error messages.
//! A file of its own: both the process ([`super::bootstrap`]) and the case execution
//! ([`super::execute`]) write them, and neither depends on the other.

use std::io::Write;

/// One line on stderr, prefixed so it reads well inside a parent's error message.
pub(crate) fn log(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "autokernel-worker: {line}");
}

//! The only module that names pyo3: interpreter start-up ([`init`]).
pub(crate) mod init;

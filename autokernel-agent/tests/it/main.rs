//! Integration tests of autokernel-agent, one module per topic.

/// The hybrid agent's turn-taking.
mod hybrid;
/// The LLM agent against an in-test HTTP server: the LLM cases (in-repo, and shared when
/// present), retries, timeouts, malformed bodies, streaming.
mod llm_cases;
/// The LLM agent against a real llama.cpp server (feature `llm-server-tests`).
#[cfg(feature = "llm-server-tests")]
mod llm_server;
/// The llama.cpp build those tests use has no AVX-512 or AMX instruction (feature
/// `llm-server-tests`).
#[cfg(feature = "llm-server-tests")]
mod llm_server_portable;
/// The user message the LLM agent sends.
mod prompt;
/// Fixtures: the regression cases (in-repo and shared), targets, contexts, rows.
mod support;
/// The tuner on a starter-like file and on the real starters.
mod tuner;

//! Integration tests of autokernel-agent, one module per topic.

/// The hybrid agent's turn-taking.
mod hybrid;
/// The LLM agent against an in-test HTTP server: the LLM cases (in-repo, and shared when
/// present), retries, timeouts, malformed bodies, streaming.
mod llm_cases;
/// The LLM agent against a real llama.cpp server (ignored unless asked for: `--ignored`, as
/// `make test` runs it, after `make setup-test` installed the server).
mod llm_server;
/// The llama.cpp build those tests use has no AVX-512 or AMX instruction (ignored as
/// [`llm_server`] is).
mod llm_server_portable;
/// The user message the LLM agent sends.
mod prompt;
/// Fixtures: the regression cases (in-repo and shared), targets, contexts, rows.
mod support;
/// The tuner on a starter-like file and on the real starters.
mod tuner;

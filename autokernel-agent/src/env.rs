//! Names of the environment variables the agents read, in one place.
//!
//! [`crate::OpenAiConfig::from_env`] reads them; flags of the `autokernel` command take
//! precedence over them.

/// API root of the chat-completions server, e.g. `http://127.0.0.1:11434/v1` for Ollama
/// (default `https://api.openai.com/v1`).
pub const OPENAI_BASE_URL: &str = "OPENAI_BASE_URL";
/// Bearer token; optional for local servers. Never logged or written anywhere.
pub const OPENAI_API_KEY: &str = "OPENAI_API_KEY";
/// Model name (required for the LLM agent).
pub const AUTOKERNEL_LLM_MODEL: &str = "AUTOKERNEL_LLM_MODEL";
/// Sampling temperature (a number; unset leaves the server's default).
pub const AUTOKERNEL_LLM_TEMPERATURE: &str = "AUTOKERNEL_LLM_TEMPERATURE";
/// Output-token budget of one request (default 8192).
pub const AUTOKERNEL_LLM_MAX_TOKENS: &str = "AUTOKERNEL_LLM_MAX_TOKENS";
/// Time limit of one request, in seconds (default 300).
pub const AUTOKERNEL_LLM_TIMEOUT_S: &str = "AUTOKERNEL_LLM_TIMEOUT_S";
/// The server's context window in tokens (default 32768).
pub const AUTOKERNEL_LLM_CONTEXT_TOKENS: &str = "AUTOKERNEL_LLM_CONTEXT_TOKENS";
/// `1`/`true` to ask for streamed replies (default off).
pub const AUTOKERNEL_LLM_STREAM: &str = "AUTOKERNEL_LLM_STREAM";
/// Path of the instruction book sent as the system prompt (default `program.md`; the
/// command sets it to the workspace's copy).
pub const AUTOKERNEL_PROGRAM_MD: &str = "AUTOKERNEL_PROGRAM_MD";

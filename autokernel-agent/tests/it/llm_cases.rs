//! The LLM agent against an in-test HTTP server: the LLM regression cases (in-repo, and
//! the shared ones when present), retries, timeouts, malformed bodies, streaming, and the
//! streaks that make the agent give up.

use std::time::{Duration, Instant};

use autokernel_agent::{OpenAiAgent, OpenAiConfig, DEFAULT_PROGRAM_MD};
use autokernel_core::{Agent, AgentError, Decision, Proposal, TokenUsage};
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::{case, cases_dir, row, shared_case, Fixture, KERNEL};

const ENDPOINT: &str = "/v1/chat/completions";

/// A short instruction book: prompts of about 500 estimated tokens, so that the usage the
/// shared cases report (1800 prompt tokens) is plausible.
const SHORT_PROGRAM: &str =
    "Make the kernel faster. Reply with one line, then the file in a python block.\n";

/// An agent pointed at `server`, with a short program.md in a temp dir (`edit` may point
/// it elsewhere), short waits between retries and a short request timeout.
struct Setup {
    agent: OpenAiAgent,
    _dir: tempfile::TempDir,
}

fn setup(server: &MockServer, edit: impl FnOnce(&mut OpenAiConfig)) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("program.md");
    std::fs::write(&program, SHORT_PROGRAM).unwrap();
    std::fs::write(dir.path().join("shipped.md"), DEFAULT_PROGRAM_MD).unwrap();
    let mut config = OpenAiConfig::new("test-model");
    config.base_url = format!("{}/v1", server.uri());
    config.program_md = program;
    config.max_output_tokens = 1000;
    config.request_timeout = Duration::from_secs(5);
    config.initial_backoff = Duration::from_millis(10);
    edit(&mut config);
    Setup {
        agent: OpenAiAgent::new(config).unwrap(),
        _dir: dir,
    }
}

fn completion(content: &str, finish: &str, usage: Option<(u64, u64)>) -> Value {
    let mut v = json!({
        "id": "c1", "object": "chat.completion", "created": 1700000000, "model": "test-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": finish}],
    });
    if let Some((p, c)) = usage {
        v["usage"] = json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c});
    }
    v
}

const GOOD: &str = "Two rows per program.\n```python\nKERNEL_KIND = \"softmax\"\ndef kernel_fn(x):\n    return x\n```\n";

async fn mount(server: &MockServer, response: ResponseTemplate) {
    Mock::given(method("POST"))
        .and(path(ENDPOINT))
        .respond_with(response)
        .mount(server)
        .await;
}

async fn mount_once(server: &MockServer, response: ResponseTemplate) {
    Mock::given(method("POST"))
        .and(path(ENDPOINT))
        .respond_with(response)
        .up_to_n_times(1)
        .with_priority(1)
        .mount(server)
        .await;
}

async fn bodies(server: &MockServer) -> Vec<Value> {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect()
}

fn invalid(p: Proposal) -> (String, Option<TokenUsage>) {
    match p {
        ref invalid @ Proposal::Invalid { usage, .. } => {
            (invalid.invalid_reason().unwrap_or_default(), usage)
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
}

fn candidate(p: Proposal) -> (String, String, Option<TokenUsage>) {
    match p {
        Proposal::Candidate {
            description,
            source,
            usage,
        } => (description, source, usage),
        other => panic!("expected a Candidate, got {other:?}"),
    }
}

// ---- the LLM regression cases -------------------------------------------------------------
// Each check runs over an in-repo case of tests/cases/llm/ (always) and over the matching
// case of ../shared/cases/llm/ (when that folder is present), with expected values worked
// out from each file.

/// A reply with empty content, reasoning only and `finish_reason: "length"`: truncated, one
/// retry with twice the budget, then a reason naming the limit and the reasoning's
/// `reasoning_chars` characters (never searched for code); both attempts' `usage` (the
/// file's `prompt`/`completion` tokens each time) counted.
async fn check_reasoning_only_reply_is_truncated(
    body: String,
    reasoning_chars: usize,
    prompt: u64,
    completion: u64,
) {
    let server = MockServer::start().await;
    mount(
        &server,
        ResponseTemplate::new(200).set_body_raw(body, "application/json"),
    )
    .await;
    let mut s = setup(&server, |_| {});
    let fx = Fixture::new(KERNEL);
    let (reason, usage) = invalid(s.agent.propose(&fx.ctx()).await.unwrap());
    assert!(
        reason
            .starts_with("truncated: finish_reason length at 1000 output tokens and again at 2000"),
        "{reason}"
    );
    assert!(reason.contains("AUTOKERNEL_LLM_MAX_TOKENS"), "{reason}");
    assert!(
        reason.contains(&format!("{reasoning_chars} characters of reasoning")),
        "{reason}"
    );
    assert_eq!(
        usage,
        Some(TokenUsage {
            prompt_tokens: 2 * prompt,
            completion_tokens: 2 * completion
        })
    );
    let sent = bodies(&server).await;
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0]["max_tokens"], 1000);
    assert_eq!(sent[1]["max_tokens"], 2000);
}

/// The same reply behind a prompt of over 5000 estimated tokens (a kernel with a long
/// comment), more than twice what the reply's usage counts: still `truncated`, not blamed
/// on the server's context window.
async fn check_truncated_even_when_the_server_counted_a_short_prompt(body: String) {
    let server = MockServer::start().await;
    mount(
        &server,
        ResponseTemplate::new(200).set_body_raw(body, "application/json"),
    )
    .await;
    let mut s = setup(&server, |c| c.program_md.set_file_name("shipped.md"));
    let long = format!("{KERNEL}\n# {}\n", "notes on tiling ".repeat(1500));
    let (reason, _) = invalid(s.agent.propose(&Fixture::new(&long).ctx()).await.unwrap());
    assert!(reason.starts_with("truncated:"), "{reason}");
    assert_eq!(
        bodies(&server).await.len(),
        2,
        "retried once with twice the budget"
    );
}

/// Content cut inside a code fence with `finish_reason: "length"`: truncated (retried
/// once), and the partial block is never offered as a candidate.
async fn check_cut_mid_fence_is_truncated(body: String, prompt: u64, completion: u64) {
    let server = MockServer::start().await;
    mount(
        &server,
        ResponseTemplate::new(200).set_body_raw(body, "application/json"),
    )
    .await;
    let mut s = setup(&server, |_| {});
    let (reason, usage) = invalid(s.agent.propose(&Fixture::new(KERNEL).ctx()).await.unwrap());
    assert!(reason.starts_with("truncated:"), "{reason}");
    assert!(reason.contains("the reply was cut off"), "{reason}");
    assert_eq!(
        usage,
        Some(TokenUsage {
            prompt_tokens: 2 * prompt,
            completion_tokens: 2 * completion
        })
    );
    assert_eq!(bodies(&server).await.len(), 2);
}

/// A reply with a draft block before the final one: the candidate is `source`, the last
/// complete python block that defines `kernel_fn`; the description is its first line.
async fn check_last_block_is_taken(reply: String, source: &str, description: &str) {
    let server = MockServer::start().await;
    mount(
        &server,
        ResponseTemplate::new(200).set_body_json(completion(&reply, "stop", Some((900, 60)))),
    )
    .await;
    let mut s = setup(&server, |_| {});
    let (got_description, got_source, usage) =
        candidate(s.agent.propose(&Fixture::new(KERNEL).ctx()).await.unwrap());
    assert_eq!(got_source, source);
    assert_eq!(got_description, description);
    assert_eq!(
        usage,
        Some(TokenUsage {
            prompt_tokens: 900,
            completion_tokens: 60
        })
    );
}

/// A reply whose final fence (opened on reply line `line`) is never closed although
/// `finish_reason` is `stop`: refused as an unterminated code block, not retried.
async fn check_unterminated_fence_is_refused(reply: String, line: usize) {
    let server = MockServer::start().await;
    mount(
        &server,
        ResponseTemplate::new(200).set_body_json(completion(&reply, "stop", Some((900, 30)))),
    )
    .await;
    let mut s = setup(&server, |_| {});
    let (reason, usage) = invalid(s.agent.propose(&Fixture::new(KERNEL).ctx()).await.unwrap());
    assert!(reason.starts_with("unterminated_fence:"), "{reason}");
    assert!(reason.contains("unterminated code block"), "{reason}");
    assert!(reason.contains(&format!("reply line {line} ")), "{reason}");
    assert!(usage.is_some());
    assert_eq!(bodies(&server).await.len(), 1, "not retried");
}

/// length_cut_with_reasoning_only.json: usage 2100 + 1000 tokens a reply; its reasoning
/// (with a complete fenced `kernel_fn` in it, which must not be taken) is 257 characters,
/// counted on the decoded JSON string (all ASCII).
#[tokio::test]
async fn reasoning_only_reply_is_retried_once_with_double_budget_then_named() {
    let body = case("llm", "length_cut_with_reasoning_only.json");
    check_reasoning_only_reply_is_truncated(body, 257, 2100, 1000).await;
}

/// length_cut_with_reasoning_only.json counts 2100 prompt tokens, under half the long
/// prompt's estimate.
#[tokio::test]
async fn reasoning_only_reply_is_truncated_even_when_the_server_counted_a_short_prompt() {
    let body = case("llm", "length_cut_with_reasoning_only.json");
    check_truncated_even_when_the_server_counted_a_short_prompt(body).await;
}

/// length_cut_inside_code_block.json: its open block already holds a whole `kernel_fn`
/// (the cut falls in a CONFIG line after it); usage 1900 + 1000 tokens a reply.
#[tokio::test]
async fn reply_cut_inside_a_code_block_is_truncated_not_a_candidate() {
    let body = case("llm", "length_cut_inside_code_block.json");
    check_cut_mid_fence_is_truncated(body, 1900, 1000).await;
}

/// last_complete_python_block_wins.md: a ```python draft, the final ~~~py block, then a
/// ```bash block whose `kernel_fn=softmax` line would count as defining `kernel_fn` but is
/// not python. The final block's body, copied from the file:
#[tokio::test]
async fn draft_then_final_reply_takes_the_last_python_block() {
    let reply = case("llm", "last_complete_python_block_wins.md");
    check_last_block_is_taken(
        reply,
        "import torch\n\ndef kernel_fn(x):\n    xf = x.float()\n    e = (xf - xf.amax(dim=-1, keepdim=True)).exp()\n    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)\n",
        "Accumulate the row sum in float32 before the division.",
    )
    .await;
}

/// final_fence_never_closed.md: a complete draft block (lines 3–8), then a block opened on
/// line 12 and never closed; the draft must not be taken instead.
#[tokio::test]
async fn reply_with_its_final_fence_never_closed_is_refused() {
    let reply = case("llm", "final_fence_never_closed.md");
    check_unterminated_fence_is_refused(reply, 12).await;
}

/// Every file in tests/cases/llm/ is listed in its README.
#[test]
fn every_in_repo_llm_case_is_listed_in_the_readme() {
    let dir = cases_dir("llm");
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name != "README.md" {
            assert!(readme.contains(&format!("`{name}`")), "{name} not listed");
        }
    }
}

/// Shared truncated_reply.json: usage 1800 + 8192 tokens a reply; its reasoning "Tile K
/// by 64, then unroll the inner loop and ..." is 48 characters (all ASCII).
#[tokio::test]
async fn shared_truncated_reply_is_retried_once_with_double_budget_then_named() {
    let Some(body) = shared_case("llm", "truncated_reply.json", "shared_truncated_reply") else {
        return;
    };
    check_reasoning_only_reply_is_truncated(body, 48, 1800, 8192).await;
}

/// Shared truncated_reply.json counts 1800 prompt tokens.
#[tokio::test]
async fn shared_truncated_reply_is_truncated_even_when_the_server_counted_a_short_prompt() {
    let Some(body) = shared_case(
        "llm",
        "truncated_reply.json",
        "shared_truncated_reply_short_prompt",
    ) else {
        return;
    };
    check_truncated_even_when_the_server_counted_a_short_prompt(body).await;
}

/// Shared cut_mid_fence.json: usage 1800 + 4096 tokens a reply.
#[tokio::test]
async fn shared_cut_mid_fence_is_truncated_not_a_candidate() {
    let Some(body) = shared_case("llm", "cut_mid_fence.json", "shared_cut_mid_fence") else {
        return;
    };
    check_cut_mid_fence_is_truncated(body, 1800, 4096).await;
}

/// Shared draft_then_final.md: the ```py block with `return x * 2.0` wins.
#[tokio::test]
async fn shared_draft_then_final_takes_the_last_block() {
    let Some(reply) = shared_case("llm", "draft_then_final.md", "shared_draft_then_final") else {
        return;
    };
    check_last_block_is_taken(
        reply,
        "import torch\ndef kernel_fn(x):\n    return x * 2.0\n",
        "Here is a first attempt",
    )
    .await;
}

/// Shared unterminated_fence.md: the block opens on line 2 and is never closed.
#[tokio::test]
async fn shared_unterminated_fence_is_refused() {
    let Some(reply) = shared_case("llm", "unterminated_fence.md", "shared_unterminated_fence")
    else {
        return;
    };
    check_unterminated_fence_is_refused(reply, 2).await;
}

/// A reply cut once and complete on the retry is used.
#[tokio::test]
async fn a_reply_complete_on_the_larger_budget_is_a_candidate() {
    let server = MockServer::start().await;
    mount_once(
        &server,
        ResponseTemplate::new(200).set_body_json(completion(
            "```python\ndef kernel_fn(x):",
            "length",
            Some((900, 1000)),
        )),
    )
    .await;
    mount(
        &server,
        ResponseTemplate::new(200).set_body_json(completion(GOOD, "stop", Some((900, 40)))),
    )
    .await;
    let mut s = setup(&server, |_| {});
    let (description, _, usage) =
        candidate(s.agent.propose(&Fixture::new(KERNEL).ctx()).await.unwrap());
    assert_eq!(description, "Two rows per program.");
    assert_eq!(
        usage,
        Some(TokenUsage {
            prompt_tokens: 1800,
            completion_tokens: 1040
        })
    );
}

#[tokio::test]
async fn prose_only_and_nameless_code_are_classified() {
    let server = MockServer::start().await;
    mount_once(
        &server,
        ResponseTemplate::new(200).set_body_json(completion(
            "You could unroll the loop.",
            "stop",
            None,
        )),
    )
    .await;
    mount(
        &server,
        ResponseTemplate::new(200).set_body_json(completion(
            "x\n```python\ndef kernel(x):\n    return x\n```",
            "stop",
            None,
        )),
    )
    .await;
    let mut s = setup(&server, |_| {});
    let fx = Fixture::new(KERNEL);
    let (reason, usage) = invalid(s.agent.propose(&fx.ctx()).await.unwrap());
    assert!(reason.starts_with("no_code:"), "{reason}");
    // the server reported no usage: estimated at 4 characters per token
    let usage = usage.unwrap();
    assert_eq!(usage.completion_tokens, 7, "26 characters");
    assert!(
        usage.prompt_tokens > 300 && usage.prompt_tokens < 1000,
        "{usage:?}"
    );
    let (reason, _) = invalid(s.agent.propose(&fx.ctx()).await.unwrap());
    assert!(reason.starts_with("missing_kernel_fn:"), "{reason}");
}

#[tokio::test]
async fn a_429_with_retry_after_is_waited_out_then_answered() {
    let server = MockServer::start().await;
    mount_once(
        &server,
        ResponseTemplate::new(429)
            .insert_header("Retry-After", "1")
            .set_body_json(json!({"error": {"message": "Rate limit reached"}})),
    )
    .await;
    mount(
        &server,
        ResponseTemplate::new(200).set_body_json(completion(GOOD, "stop", Some((900, 40)))),
    )
    .await;
    let mut s = setup(&server, |_| {});
    let t0 = Instant::now();
    candidate(s.agent.propose(&Fixture::new(KERNEL).ctx()).await.unwrap());
    let waited = t0.elapsed();
    // the backoff alone would have been 10 ms: the 1 s came from Retry-After
    assert!(waited >= Duration::from_millis(1000), "{waited:?}");
    assert!(waited < Duration::from_secs(4), "{waited:?}");
    assert_eq!(bodies(&server).await.len(), 2);
}

#[tokio::test]
async fn a_500_is_retried_and_a_persistent_one_becomes_http_500_after_the_last_attempt() {
    let server = MockServer::start().await;
    mount_once(
        &server,
        ResponseTemplate::new(500).set_body_string("upstream exploded"),
    )
    .await;
    mount(
        &server,
        ResponseTemplate::new(200).set_body_json(completion(GOOD, "stop", Some((900, 40)))),
    )
    .await;
    let mut s = setup(&server, |_| {});
    candidate(s.agent.propose(&Fixture::new(KERNEL).ctx()).await.unwrap());
    assert_eq!(bodies(&server).await.len(), 2);

    let server = MockServer::start().await;
    mount(
        &server,
        ResponseTemplate::new(503).set_body_json(json!({"error": {"message": "overloaded"}})),
    )
    .await;
    let mut s = setup(&server, |c| c.max_attempts = 3);
    let (reason, usage) = invalid(s.agent.propose(&Fixture::new(KERNEL).ctx()).await.unwrap());
    assert_eq!(reason, "http_503: overloaded (after 3 attempts)");
    assert_eq!(usage, None);
    assert_eq!(bodies(&server).await.len(), 3);
}

#[tokio::test]
async fn a_400_is_not_retried_and_401_stops_the_run_without_showing_the_key() {
    let server = MockServer::start().await;
    mount(
        &server,
        ResponseTemplate::new(400).set_body_json(json!({"error": {"message": "bad temperature"}})),
    )
    .await;
    let mut s = setup(&server, |_| {});
    let (reason, _) = invalid(s.agent.propose(&Fixture::new(KERNEL).ctx()).await.unwrap());
    assert_eq!(reason, "http_400: bad temperature");
    assert_eq!(bodies(&server).await.len(), 1);

    let server = MockServer::start().await;
    mount(
        &server,
        ResponseTemplate::new(401)
            .set_body_json(json!({"error": {"message": "Incorrect API key provided"}})),
    )
    .await;
    let mut s = setup(&server, |c| c.api_key = Some("sk-test-secret".into()));
    let err = s
        .agent
        .propose(&Fixture::new(KERNEL).ctx())
        .await
        .unwrap_err();
    assert!(matches!(err, AgentError::Fatal(_)), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("HTTP 401") && text.contains("OPENAI_API_KEY"),
        "{text}"
    );
    assert!(!text.contains("sk-test-secret"), "{text}");
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].headers.get("authorization").unwrap(),
        "Bearer sk-test-secret"
    );
}

#[tokio::test]
async fn a_stalled_server_is_a_timeout_within_the_limit() {
    let server = MockServer::start().await;
    mount(
        &server,
        ResponseTemplate::new(200)
            .set_body_json(completion(GOOD, "stop", None))
            .set_delay(Duration::from_secs(10)),
    )
    .await;
    let mut s = setup(&server, |c| c.request_timeout = Duration::from_millis(300));
    let t0 = Instant::now();
    let (reason, _) = invalid(s.agent.propose(&Fixture::new(KERNEL).ctx()).await.unwrap());
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    assert!(reason.starts_with("timeout: no complete reply"), "{reason}");
    assert!(reason.contains("within 0.3 s"), "{reason}");
}

#[tokio::test]
async fn malformed_json_and_empty_choices_are_classified() {
    let server = MockServer::start().await;
    mount_once(
        &server,
        ResponseTemplate::new(200).set_body_raw("{\"choices\": [", "application/json"),
    )
    .await;
    mount(
        &server,
        ResponseTemplate::new(200).set_body_json(
            json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 0}}),
        ),
    )
    .await;
    let mut s = setup(&server, |_| {});
    let fx = Fixture::new(KERNEL);
    let (reason, _) = invalid(s.agent.propose(&fx.ctx()).await.unwrap());
    assert!(
        reason.starts_with("malformed_response: not a chat completion"),
        "{reason}"
    );
    let (reason, _) = invalid(s.agent.propose(&fx.ctx()).await.unwrap());
    assert!(
        reason.starts_with("malformed_response: no choices"),
        "{reason}"
    );
}

fn sse(chunks: &[Value]) -> String {
    let mut body = String::new();
    for c in chunks {
        body.push_str(&format!("data: {c}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    body
}

#[tokio::test]
async fn a_streamed_reply_with_a_usage_only_final_chunk_is_read() {
    let server = MockServer::start().await;
    let pieces = [
        "Two rows",
        " per program.\n```py",
        "thon\ndef kernel_fn(x):\n",
        "    return x\n```\n",
    ];
    let mut chunks: Vec<Value> = pieces
        .iter()
        .map(|p| json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": null}]}))
        .collect();
    chunks.push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}));
    chunks.push(json!({"choices": [], "usage": {"prompt_tokens": 1500, "completion_tokens": 25}}));
    mount(
        &server,
        ResponseTemplate::new(200).set_body_raw(sse(&chunks), "text/event-stream"),
    )
    .await;
    let mut s = setup(&server, |c| c.stream = true);
    let (description, source, usage) =
        candidate(s.agent.propose(&Fixture::new(KERNEL).ctx()).await.unwrap());
    assert_eq!(description, "Two rows per program.");
    assert_eq!(source, "def kernel_fn(x):\n    return x\n");
    assert_eq!(
        usage,
        Some(TokenUsage {
            prompt_tokens: 1500,
            completion_tokens: 25
        })
    );
    let sent = bodies(&server).await;
    assert_eq!(sent[0]["stream"], true);
    assert_eq!(sent[0]["stream_options"]["include_usage"], true);
}

#[tokio::test]
async fn a_stream_cut_with_length_and_a_broken_stream_are_classified() {
    let server = MockServer::start().await;
    let cut = sse(&[
        json!({"choices": [{"delta": {"content": "```python\nimport tri"}, "finish_reason": null}]}),
        json!({"choices": [{"delta": {}, "finish_reason": "length"}], "usage": null}),
    ]);
    mount_once(
        &server,
        ResponseTemplate::new(200).set_body_raw(cut.clone(), "text/event-stream"),
    )
    .await;
    mount_once(
        &server,
        ResponseTemplate::new(200).set_body_raw(cut, "text/event-stream"),
    )
    .await;
    // no finish_reason and no [DONE]: the connection dropped mid-reply
    let broken = "data: {\"choices\":[{\"delta\":{\"content\":\"Fuse\"}}]}\n\n";
    mount(
        &server,
        ResponseTemplate::new(200).set_body_raw(broken, "text/event-stream"),
    )
    .await;
    let mut s = setup(&server, |c| c.stream = true);
    let fx = Fixture::new(KERNEL);
    let (reason, _) = invalid(s.agent.propose(&fx.ctx()).await.unwrap());
    assert!(reason.starts_with("truncated:"), "{reason}");
    let (reason, _) = invalid(s.agent.propose(&fx.ctx()).await.unwrap());
    assert!(reason.starts_with("incomplete_stream:"), "{reason}");
}

#[tokio::test]
async fn a_prompt_the_server_counted_at_under_half_is_server_truncated() {
    let server = MockServer::start().await;
    mount(
        &server,
        ResponseTemplate::new(200).set_body_json(completion(GOOD, "stop", Some((512, 40)))),
    )
    .await;
    let mut s = setup(&server, |c| c.program_md.set_file_name("shipped.md"));
    let (reason, usage) = invalid(s.agent.propose(&Fixture::new(KERNEL).ctx()).await.unwrap());
    assert!(
        reason.starts_with("server_truncated_prompt: the server counted 512 prompt tokens"),
        "{reason}"
    );
    assert_eq!(
        usage,
        Some(TokenUsage {
            prompt_tokens: 512,
            completion_tokens: 40
        })
    );
}

#[tokio::test]
async fn the_user_message_carries_target_gpu_kernel_and_failures_and_drops_the_oldest_history() {
    let server = MockServer::start().await;
    mount(
        &server,
        ResponseTemplate::new(200).set_body_json(completion(GOOD, "stop", Some((3000, 40)))),
    )
    .await;
    let mut fx = Fixture::new(KERNEL);
    for n in 2..=200 {
        fx.history.push(row(
            n,
            Decision::Revert,
            &format!(
                "idea number {n} with a long explanation of what changed and why it should help"
            ),
        ));
    }
    fx.failures.push((
        200,
        "FAIL shape_sweep: float16 33x77: max abs error 0.5 at [3, 17]".into(),
    ));
    // program.md (~2.6k tokens) + the message must fit 12000 − 1000 tokens
    let mut s = setup(&server, |c| {
        c.context_tokens = 12000;
        c.program_md.set_file_name("shipped.md");
    });
    candidate(s.agent.propose(&fx.ctx()).await.unwrap());
    let sent = &bodies(&server).await[0];
    assert_eq!(sent["model"], "test-model");
    assert_eq!(sent["messages"][0]["role"], "system");
    assert_eq!(sent["messages"][0]["content"], DEFAULT_PROGRAM_MD);
    let user = sent["messages"][1]["content"].as_str().unwrap();
    for needle in [
        "kind: softmax; `kernel_fn(x)`",
        "4096x4096",
        "dtype: float16",
        "25.0%",
        "NVIDIA H200",
        "4800 GB/s",
        "memory-bound",
        "CONFIG = {\"BLOCK_SIZE\": 1024",
        "#200 revert",
        "failure: FAIL shape_sweep: float16 33x77",
        "left out to fit the context budget",
    ] {
        assert!(user.contains(needle), "missing `{needle}` in:\n{user}");
    }
    // the newest rows are there, the oldest were dropped (at most 30 rows are listed)
    assert!(user.contains("#171 revert"), "{user}");
    assert!(!user.contains("#170 revert"), "{user}");
    let estimate = (DEFAULT_PROGRAM_MD.chars().count() + user.chars().count()) / 4;
    assert!(estimate <= 11000, "{estimate}");

    // a tighter budget drops more, oldest first, and keeps the kernel
    let server2 = MockServer::start().await;
    mount(
        &server2,
        ResponseTemplate::new(200).set_body_json(completion(GOOD, "stop", Some((3000, 40)))),
    )
    .await;
    let mut s = setup(&server2, |c| {
        c.context_tokens = 5000;
        c.program_md.set_file_name("shipped.md");
    });
    candidate(s.agent.propose(&fx.ctx()).await.unwrap());
    let sent = &bodies(&server2).await[0];
    let user = sent["messages"][1]["content"].as_str().unwrap();
    assert!(user.contains("def kernel_fn(x):"), "{user}");
    let listed: Vec<u64> = user
        .lines()
        .filter_map(|l| l.strip_prefix("- #"))
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!(!listed.is_empty() && listed.len() < 30, "{listed:?}");
    let newest_first: Vec<u64> = (0..listed.len() as u64).map(|i| 200 - i).rev().collect();
    assert_eq!(listed, newest_first, "a contiguous run of the newest rows");
    let estimate = (DEFAULT_PROGRAM_MD.chars().count() + user.chars().count()) / 4;
    assert!(estimate <= 4000, "{estimate}");

    // a budget smaller than program.md and the kernel: nothing is sent
    let server3 = MockServer::start().await;
    let mut s = setup(&server3, |c| {
        c.context_tokens = 2000;
        c.program_md.set_file_name("shipped.md");
    });
    let (reason, usage) = invalid(s.agent.propose(&fx.ctx()).await.unwrap());
    assert!(reason.starts_with("context_budget:"), "{reason}");
    assert_eq!(usage, None);
    assert!(bodies(&server3).await.is_empty());
}

#[tokio::test]
async fn a_connection_refused_is_retried_then_classified() {
    // a port nobody listens on: bind, note the port, close
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("program.md"), "Be brief.").unwrap();
    let mut config = OpenAiConfig::new("m");
    config.base_url = format!("http://127.0.0.1:{port}/v1");
    config.program_md = dir.path().join("program.md");
    config.initial_backoff = Duration::from_millis(5);
    config.max_attempts = 2;
    let mut agent = OpenAiAgent::new(config).unwrap();
    assert_eq!(agent.name(), "openai:m");
    let (reason, _) = invalid(agent.propose(&Fixture::new(KERNEL).ctx()).await.unwrap());
    assert!(reason.starts_with("connection: cannot reach"), "{reason}");
    assert!(reason.ends_with("(after 2 attempts)"), "{reason}");
    // a server that stays unreachable stops the agent instead of filling results.tsv
    let ctx = Fixture::new(KERNEL);
    assert!(
        agent.propose(&ctx.ctx()).await.is_ok(),
        "the second failure is still a row"
    );
    match agent.propose(&ctx.ctx()).await {
        Err(autokernel_core::AgentError::Fatal(m)) => {
            assert!(
                m.contains("3 proposals in a row") && m.contains("is the server running"),
                "{m}"
            )
        }
        other => panic!("the third unreachable proposal was not fatal: {other:?}"),
    }
}

/// What a web server that is not an LLM API answers, with HTTP 200.
const HTML: &str = "<!DOCTYPE html>\n<html><head><title>Welcome to nginx!</title></head>\n<body><h1>Welcome to nginx!</h1></body></html>\n";

/// Proposes until the agent gives up (at most `limit` times); returns the reasons of the
/// proposals before that and the give-up message.
async fn propose_until_fatal(agent: &mut OpenAiAgent, limit: usize) -> (Vec<String>, String) {
    let fx = Fixture::new(KERNEL);
    let mut reasons = Vec::new();
    for _ in 0..limit {
        match agent.propose(&fx.ctx()).await {
            Ok(p) => reasons.push(invalid(p).0),
            Err(AgentError::Fatal(m)) => return (reasons, m),
            Err(e) => panic!("not Fatal: {e:?}"),
        }
    }
    panic!("the agent did not give up in {limit} proposals: {reasons:#?}");
}

/// The tester's finding: a server answering every request with an HTML page and HTTP 200
/// ran a whole plan of `malformed_response` rows and ended "all targets done". Three
/// proposals in a row without a chat completion stop the agent, as an unreachable one does.
#[tokio::test]
async fn a_server_answering_html_makes_the_agent_give_up_after_three_proposals() {
    let server = MockServer::start().await;
    mount(
        &server,
        ResponseTemplate::new(200).set_body_raw(HTML, "text/html"),
    )
    .await;
    let mut s = setup(&server, |_| {});
    let (reasons, fatal) = propose_until_fatal(&mut s.agent, 10).await;
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(
        reasons
            .iter()
            .all(|r| r.starts_with("malformed_response: not a chat completion")),
        "{reasons:?}"
    );
    assert!(
        fatal.starts_with("malformed_response: not a chat completion"),
        "{fatal}"
    );
    assert!(fatal.contains("Welcome to nginx!"), "{fatal}");
    assert!(
        fatal.contains("(3 proposals in a row without a chat completion)"),
        "{fatal}"
    );
    for hint in [
        server.uri().as_str(),
        "/v1",
        "--llm-base-url",
        "model `test-model`",
        "--llm-model",
    ] {
        assert!(fatal.contains(hint), "`{hint}` missing: {fatal}");
    }
    assert_eq!(bodies(&server).await.len(), 3, "a 200 is not retried");
}

/// The tester's finding: HTTP 500 on every request retried until the run's budget ran out.
/// Each proposal still retries (max_attempts), and the third such proposal gives up.
#[tokio::test]
async fn a_server_failing_with_500_every_time_makes_the_agent_give_up_after_three_proposals() {
    let server = MockServer::start().await;
    mount(
        &server,
        ResponseTemplate::new(500).set_body_string("Internal Server Error"),
    )
    .await;
    let mut s = setup(&server, |c| c.max_attempts = 2);
    let (reasons, fatal) = propose_until_fatal(&mut s.agent, 10).await;
    assert_eq!(
        reasons,
        vec!["http_500: Internal Server Error (after 2 attempts)"; 2]
    );
    assert!(
        fatal.starts_with("http_500: Internal Server Error (after 2 attempts) (3 proposals in a row without a chat completion); check that the server"),
        "{fatal}"
    );
    assert_eq!(bodies(&server).await.len(), 6, "2 attempts × 3 proposals");
}

/// Server failures of different kinds in a row make one streak (bad JSON, a 503, an
/// error-carrying stream, a 200 without choices), and a chat completion, even one
/// without code, ends it: the server answered.
#[tokio::test]
async fn server_failures_of_any_kind_count_together_and_a_chat_completion_resets_them() {
    let server = MockServer::start().await;
    let replies = [
        ResponseTemplate::new(200).set_body_raw("{\"choices\": [", "application/json"),
        ResponseTemplate::new(503).set_body_string("overloaded"),
        ResponseTemplate::new(200).set_body_json(completion("No code today.", "stop", None)),
        ResponseTemplate::new(200).set_body_raw(
            "data: {\"error\": {\"message\": \"model crashed\"}}\n\n",
            "text/event-stream",
        ),
        ResponseTemplate::new(200).set_body_json(json!({"choices": []})),
    ];
    for r in replies {
        mount_once(&server, r).await;
    }
    mount(
        &server,
        ResponseTemplate::new(200).set_body_raw("not json at all", "application/json"),
    )
    .await;
    let mut s = setup(&server, |c| c.max_attempts = 1);
    let (reasons, fatal) = propose_until_fatal(&mut s.agent, 10).await;
    let classes: Vec<&str> = reasons
        .iter()
        .map(|r| r.split(':').next().unwrap())
        .collect();
    assert_eq!(
        classes,
        [
            "malformed_response",
            "http_503",
            "no_code", // a chat completion: the server streak starts again
            "server_error",
            "malformed_response",
        ]
    );
    assert!(
        fatal.starts_with("malformed_response: not a chat completion"),
        "{fatal}"
    );
    assert!(fatal.contains("3 proposals in a row"), "{fatal}");
}

/// Real chat completions without usable code may be the model's fault, not the server's:
/// a candidate ends the streak, seven in a row are still rows, the eighth
/// (MAX_NO_CANDIDATE_IN_A_ROW) stops the agent with an error that counts the classes and
/// says what to check.
#[tokio::test]
async fn replies_without_code_make_the_agent_give_up_after_eight_proposals_in_a_row() {
    assert_eq!(autokernel_agent::MAX_NO_CANDIDATE_IN_A_ROW, 8);
    let server = MockServer::start().await;
    // seven replies without a candidate, one with, then none with
    for _ in 0..6 {
        mount_once(
            &server,
            ResponseTemplate::new(200).set_body_json(completion(
                "I would unroll the loop.",
                "stop",
                Some((900, 6)),
            )),
        )
        .await;
    }
    mount_once(
        &server,
        ResponseTemplate::new(200).set_body_json(completion(
            "x\n```python\ndef kernel(x):\n    return x\n```",
            "stop",
            Some((900, 10)),
        )),
    )
    .await;
    mount_once(
        &server,
        ResponseTemplate::new(200).set_body_json(completion(GOOD, "stop", Some((900, 40)))),
    )
    .await;
    // a reply cut twice is one unusable proposal (its retry with twice the budget is kept)
    for _ in 0..2 {
        mount_once(
            &server,
            ResponseTemplate::new(200).set_body_raw(
                case("llm", "length_cut_with_reasoning_only.json"),
                "application/json",
            ),
        )
        .await;
    }
    mount(
        &server,
        ResponseTemplate::new(200).set_body_json(completion(
            "Here is my analysis of the kernel.",
            "stop",
            Some((900, 8)),
        )),
    )
    .await;
    let mut s = setup(&server, |_| {});
    let fx = Fixture::new(KERNEL);
    for n in 1..=7 {
        let (reason, _) = invalid(s.agent.propose(&fx.ctx()).await.unwrap());
        let class = if n == 7 {
            "missing_kernel_fn:"
        } else {
            "no_code:"
        };
        assert!(reason.starts_with(class), "proposal {n}: {reason}");
    }
    candidate(s.agent.propose(&fx.ctx()).await.unwrap());
    let (reasons, fatal) = propose_until_fatal(&mut s.agent, 20).await;
    assert_eq!(reasons.len(), 7, "{reasons:#?}");
    assert!(reasons[0].starts_with("truncated:"), "{}", reasons[0]);
    assert!(fatal.starts_with("no_code:"), "{fatal}");
    assert!(
        fatal.contains(
            "(8 proposals in a row without a usable kernel.py: no_code ×7, truncated ×1)"
        ),
        "{fatal}"
    );
    for hint in [
        "model `test-model`",
        "--llm-model",
        "--llm-base-url",
        "program.md",
    ] {
        assert!(fatal.contains(hint), "`{hint}` missing: {fatal}");
    }
    // 7 + 1 + the truncated proposal's two requests + 7 more
    assert_eq!(bodies(&server).await.len(), 17);
}

#[test]
fn misconfiguration_is_refused_up_front() {
    let mut c = OpenAiConfig::new("m");
    c.program_md = "/nonexistent/program.md".into();
    let err = OpenAiAgent::new(c).unwrap_err();
    assert!(
        err.to_string().contains("`/nonexistent/program.md`"),
        "{err}"
    );
    let mut c = OpenAiConfig::new("m");
    c.base_url = "localhost:8080/v1".into();
    assert!(OpenAiAgent::new(c)
        .unwrap_err()
        .to_string()
        .contains("http://"));
    assert!(OpenAiAgent::new(OpenAiConfig::new(" ")).is_err());
}

#[tokio::test]
async fn a_501_stops_at_once_and_a_context_overflow_names_the_settings() {
    // `python3 -m http.server` answers a POST with 501: not a chat-completions endpoint
    let server = MockServer::start().await;
    mount(
        &server,
        ResponseTemplate::new(501).set_body_string("<html>Unsupported method ('POST')</html>"),
    )
    .await;
    let mut s = setup(&server, |_| {});
    let err = s
        .agent
        .propose(&Fixture::new(KERNEL).ctx())
        .await
        .unwrap_err();
    assert!(matches!(err, AgentError::Fatal(_)), "{err:?}");
    assert!(
        err.to_string().contains("HTTP 501") && err.to_string().contains("OPENAI_BASE_URL"),
        "{err}"
    );
    assert_eq!(bodies(&server).await.len(), 1, "not retried");

    // llama.cpp / vLLM / OpenAI wording of a window too small for prompt + output budget
    let server = MockServer::start().await;
    mount(
        &server,
        ResponseTemplate::new(400).set_body_json(json!({"error": {"message":
            "This model's maximum context length is 2048 tokens. However, you requested 13012 tokens"}})),
    )
    .await;
    let mut s = setup(&server, |_| {});
    let (reason, _) = invalid(s.agent.propose(&Fixture::new(KERNEL).ctx()).await.unwrap());
    assert!(
        reason.starts_with("http_400: This model's maximum context length"),
        "{reason}"
    );
    assert!(
        reason.contains("AUTOKERNEL_LLM_CONTEXT_TOKENS")
            && reason.contains("AUTOKERNEL_LLM_MAX_TOKENS"),
        "{reason}"
    );
    assert_eq!(bodies(&server).await.len(), 1);
}

#[test]
fn an_api_key_a_header_cannot_carry_is_refused_before_any_request() {
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("program.md");
    std::fs::write(&program, SHORT_PROGRAM).unwrap();
    let mut config = OpenAiConfig::new("test-model");
    config.program_md = program;
    config.api_key = Some("sk-abc\nxyz".into());
    let err = match OpenAiAgent::new(config) {
        Err(e) => e,
        Ok(_) => panic!("a key with a newline was accepted"),
    };
    assert!(matches!(err, AgentError::Config(_)), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("OPENAI_API_KEY") && text.contains("newline"),
        "{text}"
    );
    assert!(!text.contains("sk-abc"), "{text}");
}

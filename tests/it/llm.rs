//! `autokernel run --agent openai` against a local HTTP server (wiremock on 127.0.0.1) that
//! never gives a usable reply: the agent gives up, the run stops with exit 2, and every
//! attempted proposal is a row of `results.tsv`.

use std::path::Path;
use std::process::Output;

use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::util::{assert_consistent, autokernel, tempdir};

/// A server answering every chat-completions request with `response`; it runs on a thread
/// of its own, so the blocking command below does not starve it.
fn serve(response: ResponseTemplate) -> (tokio::runtime::Runtime, MockServer) {
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let server = rt.block_on(async {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/v1/chat/completions"))
            .respond_with(response)
            .mount(&server)
            .await;
        server
    });
    (rt, server)
}

/// `run` of the tiny example on the CPU with the openai agent, one target.
fn run_openai(server: &MockServer, ws: &Path) -> Output {
    autokernel()
        .args([
            "run",
            "--example",
            "tiny",
            "--agent",
            "openai",
            "--top",
            "1",
        ])
        .args(["--llm-base-url", &format!("{}/v1", server.uri())])
        .args(["--llm-model", "m", "--device", "cpu", "--no-verify"])
        .arg("--workspace")
        .arg(ws)
        .env_remove("AUTOKERNEL_PROGRAM_MD")
        .env_remove("OPENAI_API_KEY")
        .output()
        .expect("runs")
}

/// The tester's finding: a server answering HTTP 200 with an HTML page ran every target to
/// a plateau of `malformed_response` rows and exited 0 (`all_targets_done`). Now the third
/// proposal in a row without a chat completion stops the run with exit 2, and that
/// proposal has its row too (it had none).
#[test]
fn a_server_answering_html_stops_the_run_with_exit_2_after_three_proposals() {
    let (_dir, ws) = tempdir();
    let (_rt, server) = serve(
        ResponseTemplate::new(200)
            .set_body_raw("<html><body><h1>It works!</h1></body></html>", "text/html"),
    );
    let out = run_openai(&server, &ws);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("error: agent gave up: malformed_response: not a chat completion"),
        "{stderr}"
    );
    assert!(
        stderr.contains("(3 proposals in a row without a chat completion)"),
        "{stderr}"
    );
    assert!(stderr.contains("--llm-base-url"), "{stderr}");
    assert!(!stdout.contains("stop_reason"), "{stdout}");
    let rows = assert_consistent(&ws);
    let decisions: Vec<&str> = rows.iter().map(|r| r["decision"].as_str()).collect();
    assert_eq!(
        decisions,
        ["baseline", "invalid", "invalid", "invalid"],
        "{rows:#?}"
    );
    for r in &rows[1..3] {
        assert!(
            r["description"].starts_with("malformed_response: not a chat completion"),
            "{r:?}"
        );
    }
    assert!(
        rows[3]["description"].starts_with("agent gave up: malformed_response"),
        "{:?}",
        rows[3]
    );
    assert_eq!(rows[3]["agent"], "openai:m");
}

/// Real chat completions whose content never holds a code block (a model that chats
/// instead of coding) exited 0 after a plateau per target. On a one-target run the
/// eighth such proposal in a row stops the run with exit 2 before the plateau (8) could
/// end it as `all_targets_done`.
#[test]
fn replies_without_code_stop_a_one_target_run_with_exit_2() {
    let (_dir, ws) = tempdir();
    let (_rt, server) = serve(ResponseTemplate::new(200).set_body_json(json!({
        "id": "c1", "object": "chat.completion", "created": 1700000000, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant",
                     "content": "Sure! I'd be happy to help you optimise this kernel."},
                     "finish_reason": "stop"}],
    })));
    let out = run_openai(&server, &ws);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "error: agent gave up: no_code: the reply has no fenced code block (8 proposals in a row without a usable kernel.py: no_code ×8); check that model `m` (--llm-model"
        ),
        "{stderr}"
    );
    let rows = assert_consistent(&ws);
    assert_eq!(rows.len(), 1 + 8, "baseline + 8 proposals: {rows:#?}");
    assert!(rows[1..].iter().all(|r| r["decision"] == "invalid"));
    assert!(rows[8]["description"].starts_with("agent gave up: no_code"));
}

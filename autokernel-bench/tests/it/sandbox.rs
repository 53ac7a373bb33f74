//! The sandbox of a candidate's worker (issue 21, point 5): no network, no write outside
//! its scratch folder, no process outliving the evaluation. Each case is a softmax kernel
//! that computes the right answer and tries one thing at import
//! (`tests/cases/sandbox/`, see its README); before the sandbox each got through.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::OpenOptionsExt;

use autokernel_bench::{PyWorkerBenchmarker, SandboxOptions, Worker};
use autokernel_core::Correctness;

use super::*;

/// `tests/cases/<area>/<name>` written into `dir` with each `(placeholder, value)` put in.
pub fn case_with(dir: &Path, area: &str, name: &str, values: &[(&str, &str)]) -> PathBuf {
    let mut text = std::fs::read_to_string(cases_dir(area).join(name)).expect("read a case file");
    for (placeholder, value) in values {
        text = text.replace(placeholder, value);
    }
    write(dir, name, &text)
}

/// A benchmarker whose candidates' workers use `options`, on the CPU.
fn sandboxed(options: SandboxOptions) -> PyWorkerBenchmarker {
    sandboxed_on(Device::Cpu, options)
}

/// A benchmarker whose candidates' workers use `options`, asked for `device`.
fn sandboxed_on(device: Device, options: SandboxOptions) -> PyWorkerBenchmarker {
    let worker = Worker::new(WorkerOptions {
        device,
        ..super::options()
    })
    .with_memory_limit_mb(12 * 1024)
    .with_sandbox(options);
    PyWorkerBenchmarker::with_worker(std::sync::Arc::new(worker))
}

/// Benches `connects_to_localhost.py` against a listener of the test's own and returns
/// what reached it (nothing, when the sandbox holds).
async fn what_reached_the_listener(options: SandboxOptions) -> Option<String> {
    what_reached_the_listener_on(Device::Cpu, options).await
}

/// [`what_reached_the_listener`] with the workers asked for `device`.
async fn what_reached_the_listener_on(device: Device, options: SandboxOptions) -> Option<String> {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a local listener");
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let dir = tempfile::tempdir().unwrap();
    let path = case_with(
        dir.path(),
        "sandbox",
        "connects_to_localhost.py",
        &[("@PORT@", &port)],
    );
    let r = bench(&sandboxed_on(device, options), &path, true, 120).await;
    // the kernel is right: whether it reached out changes nothing in its verdict
    assert!(r.correctness.is_pass(), "{:?}", r.correctness);
    // a connection made at import waits in the backlog (accepted or not by then)
    what_arrived(listener.accept().map(|(s, _)| s), |s| {
        s.set_nonblocking(false).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    })
}

/// What the connection a nonblocking listener `accepted` sent, read once `make_blocking`
/// has prepared it; `None` when nothing connected.
fn what_arrived<S: Read>(
    accepted: std::io::Result<S>,
    make_blocking: impl FnOnce(&S),
) -> Option<String> {
    match accepted {
        Ok(mut stream) => {
            make_blocking(&stream);
            let mut got = String::new();
            let _ = stream.read_to_string(&mut got);
            Some(format!("a connection: {got:?}"))
        }
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
        Err(e) => panic!("accept failed: {e}"),
    }
}

#[tokio::test]
async fn a_candidate_cannot_connect_to_a_local_port() {
    let reached = what_reached_the_listener(SandboxOptions::default()).await;
    assert_eq!(reached, None, "the candidate reached the test's listener");
}

/// The fallback without namespaces (seccomp refuses inet sockets), forced.
#[tokio::test]
async fn a_candidate_cannot_connect_to_a_local_port_without_namespaces_either() {
    let options = SandboxOptions {
        namespaces: false,
        ..SandboxOptions::default()
    };
    let reached = what_reached_the_listener(options).await;
    assert_eq!(reached, None, "the candidate reached the test's listener");
}

/// Benches `connects_to_a_unix_socket.py` against a socket by path of the test's own and
/// returns what reached it (nothing, when the sandbox holds).
async fn what_reached_the_unix_socket(options: SandboxOptions) -> Option<String> {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("agent.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).expect("a socket by path");
    listener.set_nonblocking(true).unwrap();
    let path = case_with(
        dir.path(),
        "sandbox",
        "connects_to_a_unix_socket.py",
        &[("@SOCKET@", socket.to_str().unwrap())],
    );
    let r = bench(&sandboxed(options), &path, true, 120).await;
    assert!(r.correctness.is_pass(), "{:?}", r.correctness);
    what_arrived(listener.accept().map(|(s, _)| s), |s| {
        s.set_nonblocking(false).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    })
}

#[tokio::test]
async fn a_candidate_cannot_connect_to_a_socket_by_path() {
    let reached = what_reached_the_unix_socket(SandboxOptions::default()).await;
    assert_eq!(reached, None, "the candidate reached the test's socket");
}

#[tokio::test]
async fn a_candidate_cannot_connect_to_a_socket_by_path_without_namespaces_either() {
    let options = SandboxOptions {
        namespaces: false,
        ..SandboxOptions::default()
    };
    let reached = what_reached_the_unix_socket(options).await;
    assert_eq!(reached, None, "the candidate reached the test's socket");
}

/// A pseudo-terminal of the test's own: the controller side, the terminal side (kept open,
/// so that what is typed into it waits in its input queue) and the terminal's path. `None`
/// on a machine without pseudo-terminals (no `/dev/ptmx`), where there is no terminal to
/// type into either.
fn pseudo_terminal() -> Option<(std::fs::File, std::fs::File, PathBuf)> {
    use std::os::fd::FromRawFd;
    // SAFETY: posix_openpt, grantpt, unlockpt and ptsname_r on the fd just opened, with a
    // buffer of the length passed; the fd is owned by the File from here on.
    unsafe {
        let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        if fd < 0 {
            let why = std::io::Error::last_os_error();
            // shown with --nocapture: the test passes without testing anything here
            let _ = writeln!(
                std::io::stderr(),
                "no pseudo-terminal on this machine ({why}): nothing to type into, nothing tested"
            );
            return None;
        }
        let controller = std::fs::File::from_raw_fd(fd);
        assert_eq!(libc::grantpt(fd), 0);
        assert_eq!(libc::unlockpt(fd), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(fd, name.as_mut_ptr(), name.len()), 0);
        let path = PathBuf::from(
            std::ffi::CStr::from_ptr(name.as_ptr())
                .to_str()
                .unwrap()
                .to_owned(),
        );
        let terminal = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY)
            .open(&path)
            .expect("open the terminal side");
        Some((controller, terminal, path))
    }
}

/// How many bytes wait in the input queue of the terminal open as `terminal` (`FIONREAD`).
fn input_waiting(terminal: &std::fs::File) -> i32 {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer.
    let rc = unsafe { libc::ioctl(terminal.as_raw_fd(), libc::FIONREAD, &mut n) };
    assert_eq!(rc, 0, "FIONREAD: {}", std::io::Error::last_os_error());
    n
}

/// Judges `types_into_a_terminal.py` with the test's pseudo-terminal and returns its
/// correctness and how many bytes then wait in that terminal's input; `None` without
/// pseudo-terminals.
async fn typed_into_a_terminal(options: SandboxOptions) -> Option<(Correctness, i32)> {
    let (_controller, terminal, tty) = pseudo_terminal()?;
    assert_eq!(input_waiting(&terminal), 0);
    let dir = tempfile::tempdir().unwrap();
    let path = case_with(
        dir.path(),
        "sandbox",
        "types_into_a_terminal.py",
        &[("@TTY@", tty.to_str().unwrap())],
    );
    let r = bench(&sandboxed(options), &path, true, 120).await;
    Some((r.correctness, input_waiting(&terminal)))
}

/// With namespaces the worker's capabilities are its user namespace's, which `TIOCSTI` on
/// another terminal does not accept; the seccomp filter refuses it first all the same.
#[tokio::test]
async fn a_candidate_cannot_type_into_a_terminal() {
    let Some((correctness, waiting)) = typed_into_a_terminal(SandboxOptions::default()).await
    else {
        return;
    };
    assert_eq!(waiting, 0, "the candidate typed into the test's terminal");
    assert!(correctness.is_pass(), "{correctness:?}");
}

/// Without namespaces a root worker holds `CAP_SYS_ADMIN`, which lets `TIOCSTI` type into
/// any terminal it can open: only the seccomp filter refuses it.
#[tokio::test]
async fn a_candidate_cannot_type_into_a_terminal_without_namespaces_either() {
    let options = SandboxOptions {
        namespaces: false,
        ..SandboxOptions::default()
    };
    let Some((correctness, waiting)) = typed_into_a_terminal(options).await else {
        return;
    };
    assert_eq!(waiting, 0, "the candidate typed into the test's terminal");
    assert!(correctness.is_pass(), "{correctness:?}");
}

/// A file the test owns (standing for the workspace's `results.tsv`) is neither appended to
/// nor joined by a new file beside it.
#[tokio::test]
async fn a_candidate_cannot_write_outside_its_scratch_folder() {
    let dir = tempfile::tempdir().unwrap();
    let owned = dir.path().join("results.tsv");
    let before = "experiment\ttimestamp\n1\t2026-12-01T00:00:00Z\n";
    std::fs::write(&owned, before).unwrap();
    let path = case_with(
        dir.path(),
        "sandbox",
        "writes_outside_scratch.py",
        &[("@TARGET@", owned.to_str().unwrap())],
    );
    let r = bench(&sandboxed(SandboxOptions::default()), &path, true, 120).await;
    assert!(r.correctness.is_pass(), "{:?}", r.correctness);
    assert_eq!(std::fs::read_to_string(&owned).unwrap(), before);
    assert!(
        !dir.path().join("results.tsv.planted").exists(),
        "the candidate created a file outside its scratch folder"
    );
}

/// The processes whose command line holds `marker`, killed (so a failing run leaves none).
fn kill_processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(marker) {
            // SAFETY: kill with a pid read from /proc; at worst it is gone already.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            found.push(format!("{pid}: {cmdline}"));
        }
    }
    found
}

/// Benches `leaves_a_daemon.py` and returns the daemons alive once `bench` returned.
async fn daemons_left(options: SandboxOptions) -> Vec<String> {
    daemons_left_on(Device::Cpu, options).await
}

/// [`daemons_left`] with the workers asked for `device`.
async fn daemons_left_on(device: Device, options: SandboxOptions) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    // a number of seconds no other process uses: `sleep 1000.<pid><nanos>`
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let marker = format!("1000.{}{nanos}", std::process::id());
    let path = case_with(
        dir.path(),
        "sandbox",
        "leaves_a_daemon.py",
        &[("@MARKER@", &marker)],
    );
    let b = sandboxed_on(device, options);
    let r = bench(&b, &path, true, 120).await;
    assert!(r.correctness.is_pass(), "{:?}", r.correctness);
    // the benchmarker (and its spare worker) still alive: only the evaluation is over
    let left = kill_processes_with(&marker);
    drop(b);
    left
}

#[tokio::test]
async fn a_setsid_grandchild_does_not_outlive_the_evaluation() {
    let left = daemons_left(SandboxOptions::default()).await;
    assert!(left.is_empty(), "still running: {left:?}");
}

/// The fallback without namespaces (a subreaper kills what the worker left), forced.
#[tokio::test]
async fn a_setsid_grandchild_does_not_outlive_the_evaluation_without_namespaces_either() {
    let options = SandboxOptions {
        namespaces: false,
        ..SandboxOptions::default()
    };
    let left = daemons_left(options).await;
    assert!(left.is_empty(), "still running: {left:?}");
}

/// A worker that may use the GPU (its device left open) has no pid namespace, in which
/// CUDA does not start: the subreaper kills what it left, in user and network namespaces.
#[tokio::test]
async fn a_setsid_grandchild_does_not_outlive_the_evaluation_of_a_worker_that_may_use_the_gpu() {
    let left = daemons_left_on(Device::Auto, SandboxOptions::default()).await;
    assert!(left.is_empty(), "still running: {left:?}");
}

/// The same worker has no network either (its own network namespace).
#[tokio::test]
async fn a_candidate_of_a_worker_that_may_use_the_gpu_cannot_connect_to_a_local_port() {
    let reached = what_reached_the_listener_on(Device::Auto, SandboxOptions::default()).await;
    assert_eq!(reached, None, "the candidate reached the test's listener");
}

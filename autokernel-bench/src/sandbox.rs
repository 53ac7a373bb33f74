//! The sandbox of a worker that judges candidates (issue 21, point 5): no network, writes
//! only into a private scratch folder, limits on file size (and, on the CPU, address space),
//! and no process of the candidate's outliving the evaluation.
//!
//! It is entered by the worker process itself, first thing, before Python starts and before
//! any thread exists (a user namespace can only be entered by a single-threaded process):
//!
//! ```text
//! launcher (the process the parent spawned; waits, cleans up, exits as the worker did)
//!   └─ init (pid 1 of a new pid namespace; its exit kills everything left in it)
//!        └─ worker (Python, the harness, the candidate)
//! ```
//!
//! - **Namespaces** (preferred): `unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWPID)`,
//!   the user's own uid and gid mapped. The new network namespace has only a loopback
//!   interface, down: no connection anywhere, 127.0.0.1 included. When the pid
//!   namespace's init exits, the kernel kills every process left in it, `setsid` daemons
//!   included. The pid namespace is the CPU's only: CUDA's driver does not start in one
//!   whose `/proc` is the host's, so a worker that may use the GPU is supervised by the
//!   fallback's subreaper instead (`Spec::pid_namespace`).
//! - **Fallback** (no user namespaces, e.g. a container's seccomp profile, or
//!   [`SandboxOptions::namespaces`] off): a seccomp filter refuses `socket(AF_INET)`,
//!   `socket(AF_INET6)` and io_uring; the launcher is a child subreaper
//!   (`PR_SET_CHILD_SUBREAPER`) that kills every descendant left once the worker ends. Weaker:
//!   a candidate that kills the launcher first leaves its own daemons to init (Landlock's
//!   signal scope, where the kernel has it, forbids that kill).
//! - **Seccomp, always**: `ioctl(TIOCSTI | TIOCLINUX)` refused (typing into a terminal the
//!   worker can open); io_uring, which could make a socket past the socket rules; and, once
//!   the harness has started CUDA (which needs one) and before any candidate loads,
//!   `socket(AF_UNIX)` on every thread (a socket by path, an agent's or a multiplexer's,
//!   is reachable from any network namespace and under every Landlock ABI). The worker is
//!   also in a session of its own, with no controlling terminal (`client.rs`, `setsid`
//!   before exec).
//! - **Landlock** (Linux ≥ 5.13; write rights only, best effort by the kernel's ABI): the
//!   worker may create, change and remove files only under its scratch folder; it may write
//!   to existing device files (`/dev/null`, the GPU's `/dev/nvidia*`), to its own
//!   `/proc/self` (CUDA does not start without) and anywhere under `/dev/shm`. Without
//!   Landlock, nothing stops a write the user could make: the parent is warned once (the
//!   weaker guarantee is docs/bench.md's).
//! - **Limits**: `RLIMIT_FSIZE` (a larger file write gets `SIGXFSZ`: a `CRASH`),
//!   `RLIMIT_CORE` 0, `PR_SET_NO_NEW_PRIVS`; the address space on the CPU through the
//!   worker's memory limit.
//!
//! Crates: `landlock` and `seccompiler` build the rulesets; the namespace, fork and wait
//! calls are plain `libc`, each a line or two (the `nix` crate would add a dependency for
//! that alone).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// How strictly a candidate's worker is sandboxed. The default is the strongest the kernel
/// allows; see the module documentation of `sandbox.rs` and docs/bench.md.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxOptions {
    /// Use user, network and pid namespaces where the kernel allows them (default `true`).
    /// `false` takes the fallback (seccomp against inet sockets, a subreaper that kills the
    /// candidate's leftover processes) even where namespaces would work: for tests.
    pub namespaces: bool,
    /// The largest file the worker may write, in MB (2²⁰ B); default 1024.
    pub max_file_size_mb: u64,
}

impl Default for SandboxOptions {
    fn default() -> Self {
        SandboxOptions {
            namespaces: true,
            max_file_size_mb: 1024,
        }
    }
}

/// The signal the parent sends a sandboxed worker's launcher to end the evaluation: the
/// launcher kills the worker, waits until every process of the candidate's is gone, then
/// exits, so that a `bench` that returns leaves nothing behind. (Not SIGTERM, which a batch
/// system sends to every process of a job, and which the worker lives through.)
pub(crate) const STOP_SIGNAL: libc::c_int = libc::SIGUSR2;

/// What the parent hands the worker (as JSON in `env::SANDBOX`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Spec {
    /// The private folder the worker may write to (made by the parent, mode 0700).
    pub scratch: PathBuf,
    /// [`SandboxOptions::namespaces`].
    pub namespaces: bool,
    /// [`SandboxOptions::max_file_size_mb`].
    pub max_file_size_mb: u64,
    /// A pid namespace of its own: only for a worker on the CPU. CUDA's driver does not
    /// start in a pid namespace whose `/proc` is still the host's (`cudaGetDeviceCount`
    /// error 304, seen on the H200), so a worker that may use the GPU gets the user and
    /// network namespaces and the subreaper of the fallback instead.
    #[serde(default)]
    pub pid_namespace: bool,
}

/// What [`isolate`] achieved, for [`restrict`] and the parent's one warning.
#[derive(Debug, Default)]
pub(crate) struct Isolation {
    /// In a network namespace of its own: no seccomp filter needed for inet sockets.
    pub network_namespace: bool,
    /// Why something is weaker than the module documentation's first choice.
    pub warnings: Vec<String>,
}

#[cfg(target_os = "linux")]
pub(crate) use linux::{isolate, landlock_abi, refuse_unix_sockets, restrict, shield_parent};

#[cfg(not(target_os = "linux"))]
pub(crate) fn refuse_unix_sockets() -> Option<String> {
    None
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn landlock_abi() -> i64 {
    0
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn shield_parent(_landlock_abi: i64) -> bool {
    false
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn isolate(_spec: &Spec) -> Isolation {
    Isolation {
        network_namespace: false,
        warnings: vec![
            "no sandbox on this operating system: a candidate runs with the \
                        user's network and files"
                .into(),
        ],
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn restrict(_spec: &Spec, _isolation: &Isolation) -> Vec<String> {
    Vec::new()
}

#[cfg(target_os = "linux")]
mod linux {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicI32, Ordering};
    use std::time::Duration;

    use landlock::{
        Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
        RulesetCreatedAttr, RulesetStatus, Scope, ABI,
    };
    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };

    use super::{Isolation, Spec};

    /// The Landlock ABI asked for (best effort below it): 5 has `IoctlDev`, 6 the scopes.
    const LANDLOCK_ABI: ABI = ABI::V6;

    fn errno() -> std::io::Error {
        std::io::Error::last_os_error()
    }

    /// Forks; `Ok(None)` in the child, `Ok(Some(pid))` in the parent.
    fn fork() -> std::io::Result<Option<libc::pid_t>> {
        // SAFETY: called while the process is single-threaded (before any thread starts),
        // so the child's copy of every lock is consistent.
        match unsafe { libc::fork() } {
            -1 => Err(errno()),
            0 => Ok(None),
            pid => Ok(Some(pid)),
        }
    }

    /// Asks the kernel to SIGKILL this process when the process that forked it dies, and
    /// exits at once if that already happened (the usual race of `PR_SET_PDEATHSIG`) where
    /// the parent's pid is visible (`None`: a namespace's init, whose parent is outside).
    fn die_with_parent(parent: Option<libc::pid_t>) {
        // SAFETY: prctl with integer arguments; getppid and _exit have no preconditions.
        unsafe {
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            );
            if parent.is_some_and(|p| libc::getppid() != p) {
                libc::_exit(1);
            }
        }
    }

    /// Enters new user, network and (with `pid`) pid namespaces, mapping the user's own uid
    /// and gid (so files look as they did); the network and pid namespaces alone where no
    /// user namespace may be made but the process is privileged.
    fn enter_namespaces(pid: bool) -> Result<(), String> {
        // SAFETY: getuid/getgid/unshare take no pointers.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let pid = if pid { libc::CLONE_NEWPID } else { 0 };
        let all = libc::CLONE_NEWUSER | libc::CLONE_NEWNET | pid;
        // SAFETY: as above; the process is single-threaded, as CLONE_NEWUSER requires.
        if unsafe { libc::unshare(all) } == 0 {
            // without the maps the worker would see itself as `nobody`; a failure here is
            // harmless to the sandbox, so it is not an error
            let _ = std::fs::write("/proc/self/setgroups", "deny");
            let _ = std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"));
            let _ = std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"));
            return Ok(());
        }
        let user_error = errno();
        // SAFETY: as above.
        if unsafe { libc::unshare(libc::CLONE_NEWNET | pid) } == 0 {
            return Ok(());
        }
        Err(user_error.to_string())
    }

    /// The process ids whose parent is this process (from `/proc`: every child, also those
    /// adopted as a subreaper).
    fn children() -> Vec<libc::pid_t> {
        let me = std::process::id().to_string();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<libc::pid_t>().ok())
            .filter(|pid| {
                // the ppid is the 2nd field after the `(comm)`, which may hold spaces
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .ok()
                    .and_then(|s| {
                        let rest = &s[s.rfind(')')? + 1..];
                        rest.split_whitespace().nth(1).map(|p| p == me)
                    })
                    .unwrap_or(false)
            })
            .collect()
    }

    /// Kills every process left below this subreaper and reaps them: a killed child's own
    /// children are adopted here in turn, so it repeats until none is left (5 s at most).
    fn kill_descendants() {
        for _ in 0..500 {
            let kids = children();
            for pid in &kids {
                // SAFETY: kill with a pid that is our child (not reaped, so not reused).
                unsafe { libc::kill(*pid, libc::SIGKILL) };
            }
            let mut status = 0;
            // SAFETY: waitpid with a valid status pointer.
            while unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) } > 0 {}
            if kids.is_empty() && unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) } == -1 {
                return; // ECHILD: nothing left
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Ends this process the way the worker ended: the same exit code, or the same signal
    /// (no core dump), so the parent reports a crash as it always did.
    fn exit_like(status: libc::c_int) -> ! {
        // SAFETY: plain libc calls on this process; _exit never returns.
        unsafe {
            if libc::WIFSIGNALED(status) {
                let sig = libc::WTERMSIG(status);
                let no_core = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                libc::setrlimit(libc::RLIMIT_CORE, &no_core);
                libc::signal(sig, libc::SIG_DFL);
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, sig);
                libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
                libc::kill(libc::getpid(), sig);
                libc::_exit(128 + sig);
            }
            libc::_exit(if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                1
            })
        }
    }

    /// The launcher's child (the namespace's init, or the worker), for [`on_stop`].
    static CHILD: AtomicI32 = AtomicI32::new(0);

    /// [`super::STOP_SIGNAL`]'s handler in the launcher: kills its child, whose end (the
    /// namespace torn down, or the subreaper's sweep) the launcher then waits for.
    extern "C" fn on_stop(_: libc::c_int) {
        let child = CHILD.load(Ordering::SeqCst);
        if child > 0 {
            // SAFETY: kill is async-signal-safe; the pid is our unreaped child.
            unsafe { libc::kill(child, libc::SIGKILL) };
        }
    }

    /// The launcher's loop: waits for `child`, kills it when the parent (autokernel) dies,
    /// reads the worker's own status from `relay` when `child` is the namespace's init,
    /// kills what is left as a subreaper, then exits like the worker.
    fn supervise(child: libc::pid_t, relay: Option<libc::c_int>, subreaper: bool) -> ! {
        CHILD.store(child, Ordering::SeqCst);
        // SAFETY: a zeroed sigaction is valid; the handler only calls kill.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(super::STOP_SIGNAL, &action, std::ptr::null_mut());
        }
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() };
        let mut status = 0;
        loop {
            // SAFETY: waitpid with a valid status pointer.
            let r = unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) };
            if r == child {
                break;
            }
            if r == -1 && errno().raw_os_error() != Some(libc::EINTR) {
                status = 1 << 8; // lost track of it: exit status 1
                break;
            }
            // SAFETY: as above; kill of our own unreaped child.
            if unsafe { libc::getppid() } != parent {
                unsafe { libc::kill(child, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(fd) = relay {
            let mut raw = [0u8; 4];
            // SAFETY: reading 4 bytes into a 4-byte buffer from our pipe's read end.
            if unsafe { libc::read(fd, raw.as_mut_ptr().cast(), 4) } == 4 {
                status = i32::from_ne_bytes(raw);
            }
        }
        if subreaper {
            kill_descendants();
        }
        exit_like(status)
    }

    /// Enters the process structure of the module documentation. Only the worker returns;
    /// the launcher and the namespace's init exit in here.
    pub(crate) fn isolate(spec: &Spec) -> Isolation {
        let mut isolation = Isolation::default();
        let entered = if spec.namespaces {
            enter_namespaces(spec.pid_namespace)
        } else {
            Err("namespaces turned off (SandboxOptions::namespaces)".into())
        };
        // SAFETY: getpid has no preconditions.
        let launcher = unsafe { libc::getpid() };
        match entered {
            Ok(()) if !spec.pid_namespace => {
                isolation.network_namespace = true;
                supervise_as_subreaper(isolation, launcher)
            }
            Ok(()) => {
                isolation.network_namespace = true;
                let mut fds = [0; 2];
                // SAFETY: pipe with a 2-int buffer.
                if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
                    fds = [-1, -1];
                }
                match fork() {
                    Ok(Some(init)) => {
                        // SAFETY: closing our copy of the write end.
                        unsafe { libc::close(fds[1]) };
                        supervise(init, (fds[0] >= 0).then_some(fds[0]), false)
                    }
                    Ok(None) => {
                        die_with_parent(None);
                        // SAFETY: closing our copy of the read end; getpid as above.
                        let init = unsafe {
                            libc::close(fds[0]);
                            libc::getpid()
                        };
                        match fork() {
                            Ok(None) => {
                                die_with_parent(Some(init));
                                // SAFETY: the worker keeps no end of the relay pipe.
                                unsafe { libc::close(fds[1]) };
                                isolation
                            }
                            Ok(Some(worker)) => {
                                let mut status = 0;
                                // SAFETY: waitpid with a valid status pointer, retried
                                // on EINTR; the write of 4 bytes from a 4-byte buffer.
                                unsafe {
                                    while libc::waitpid(worker, &mut status, 0) == -1
                                        && errno().raw_os_error() == Some(libc::EINTR)
                                    {
                                    }
                                    let raw = status.to_ne_bytes();
                                    libc::write(fds[1], raw.as_ptr().cast(), 4);
                                    // init's exit kills every process left in the namespace
                                    libc::_exit(0)
                                }
                            }
                            Err(e) => {
                                crate::worker::log::log(&format!("sandbox: cannot fork: {e}"));
                                // SAFETY: _exit never returns.
                                unsafe { libc::_exit(3) }
                            }
                        }
                    }
                    Err(e) => {
                        isolation.warnings.push(format!(
                            "sandbox: cannot fork ({e}): the candidate runs unsupervised"
                        ));
                        isolation
                    }
                }
            }
            Err(why) => {
                isolation.warnings.push(format!(
                    "sandbox: no user namespace ({why}): the network is refused by seccomp and \
                     leftover processes are killed by a subreaper (docs/bench.md, the weaker \
                     guarantees)"
                ));
                supervise_as_subreaper(isolation, launcher)
            }
        }
    }

    /// Forks the worker under this process as a subreaper (`PR_SET_CHILD_SUBREAPER`), which
    /// kills every descendant left once the worker ends. Only the worker returns.
    fn supervise_as_subreaper(mut isolation: Isolation, launcher: libc::pid_t) -> Isolation {
        // SAFETY: prctl with integer arguments.
        let subreaper = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } == 0;
        match fork() {
            Ok(Some(worker)) => supervise(worker, None, subreaper),
            Ok(None) => {
                die_with_parent(Some(launcher));
                isolation
            }
            Err(e) => {
                isolation.warnings.push(format!(
                    "sandbox: cannot fork ({e}): the candidate runs unsupervised"
                ));
                isolation
            }
        }
    }

    /// A seccomp rule: the syscall's argument `index` (its low 32 bits) equals `value`.
    fn arg_is(index: u8, value: u64) -> Result<SeccompRule, String> {
        SeccompCondition::new(index, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value)
            .and_then(|c| SeccompRule::new(vec![c]))
            .map_err(|e| e.to_string())
    }

    /// A seccomp filter answering `EACCES` to `socket(family, …)` for each of `families`.
    fn socket_filter(families: &[libc::c_int]) -> Result<BpfProgram, String> {
        let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| e.to_string())?;
        let rules = families
            .iter()
            .map(|family| arg_is(0, *family as u64))
            .collect::<Result<Vec<_>, _>>()?;
        SeccompFilter::new(
            BTreeMap::from([(libc::SYS_socket, rules)]),
            SeccompAction::Allow,
            SeccompAction::Errno(libc::EACCES as u32),
            arch,
        )
        .map_err(|e| e.to_string())?
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())
    }

    /// Refuses `socket(AF_UNIX, …)` (`EACCES`) to every thread of the worker, from now on: a
    /// socket by path (an ssh agent's, a terminal multiplexer's, a container daemon's) is
    /// outside every namespace and Landlock ABI. Called once the harness has started, before
    /// any candidate loads: CUDA's driver does not start without one (`cudaGetDeviceCount`
    /// error 304 on the H200 when refused from the start). `None` when in force, else why
    /// not.
    pub(crate) fn refuse_unix_sockets() -> Option<String> {
        let applied = socket_filter(&[libc::AF_UNIX])
            .and_then(|p| seccompiler::apply_filter_all_threads(&p).map_err(|e| e.to_string()));
        applied.err().map(|e| {
            format!(
                "sandbox: no seccomp filter on AF_UNIX sockets ({e}): the candidate can \
                 connect to sockets by path"
            )
        })
    }

    /// Seccomp filters that answer `EACCES` to the ioctls that type into a terminal
    /// (`TIOCSTI`, `TIOCLINUX`), `ENOSYS` to io_uring (whose socket operations would bypass
    /// a socket rule), and with `inet` `EACCES` to `socket(AF_INET | AF_INET6, …)`.
    fn refuse_syscalls(inet: bool) -> Result<(), String> {
        let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| e.to_string())?;
        if inet {
            let program = socket_filter(&[libc::AF_INET, libc::AF_INET6])?;
            seccompiler::apply_filter(&program).map_err(|e| e.to_string())?;
        }
        // the ioctl numbers' type differs between C libraries (c_ulong, c_int)
        #[allow(clippy::unnecessary_cast)]
        let terminal = SeccompFilter::new(
            BTreeMap::from([(
                libc::SYS_ioctl,
                vec![
                    arg_is(1, libc::TIOCSTI as u64)?,
                    arg_is(1, libc::TIOCLINUX as u64)?,
                ],
            )]),
            SeccompAction::Allow,
            // not the kernel's own refusal (EPERM): a test tells the filter's answer apart
            SeccompAction::Errno(libc::EACCES as u32),
            arch,
        )
        .map_err(|e| e.to_string())?;
        let uring = SeccompFilter::new(
            BTreeMap::from([
                (libc::SYS_io_uring_setup, vec![]),
                (libc::SYS_io_uring_enter, vec![]),
                (libc::SYS_io_uring_register, vec![]),
            ]),
            SeccompAction::Allow,
            SeccompAction::Errno(libc::ENOSYS as u32),
            arch,
        )
        .map_err(|e| e.to_string())?;
        for f in [terminal, uring] {
            let program: BpfProgram = f
                .try_into()
                .map_err(|e: seccompiler::BackendError| e.to_string())?;
            seccompiler::apply_filter(&program).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Landlock: write rights only under `spec.scratch` (all of them), existing files under
    /// `/dev` (write, truncate, device ioctls: `/dev/null`, the GPU) and the worker's own
    /// `/proc/self` (which CUDA writes to), and `/dev/shm`; no
    /// signals to processes outside the sandbox. `Ok(None)` when fully enforced, else what
    /// is missing.
    fn landlock(spec: &Spec) -> Result<Option<String>, String> {
        let abi = LANDLOCK_ABI;
        let err = |e: landlock::RulesetError| e.to_string();
        let mut rules = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_write(abi))
            .map_err(err)?
            .scope(Scope::from_all(abi))
            .map_err(err)?
            .create()
            .map_err(err)?
            .add_rule(PathBeneath::new(
                PathFd::new(&spec.scratch).map_err(|e| e.to_string())?,
                AccessFs::from_write(abi),
            ))
            .map_err(err)?;
        let devices = AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev;
        // CUDA's driver does not start without writing to files of its own process under
        // /proc (cudaGetDeviceCount error 304, seen on the H200); another process's are out
        // of reach there too (Landlock forbids ptrace-like access outside the domain)
        for (path, access) in [
            ("/dev", devices),
            ("/dev/shm", AccessFs::from_write(abi)),
            ("/proc/self", devices),
        ] {
            if let Ok(fd) = PathFd::new(path) {
                rules = rules.add_rule(PathBeneath::new(fd, access)).map_err(err)?;
            }
        }
        let status = rules.restrict_self().map_err(err)?;
        Ok(match status.ruleset {
            RulesetStatus::FullyEnforced => None,
            RulesetStatus::PartiallyEnforced => Some(
                "Landlock is partly enforced (an older kernel ABI): writes outside the \
                 scratch folder are refused, some rights (truncation, device ioctls, \
                 signal scoping) may not be"
                    .into(),
            ),
            _ => Some(
                "Landlock is not available on this kernel: the candidate can write wherever \
                 the user can (docs/bench.md, the weaker guarantees)"
                    .into(),
            ),
        })
    }

    /// The Landlock ABI version the kernel offers; 0 without Landlock (not built, or not in
    /// the `lsm=` list).
    pub(crate) fn landlock_abi() -> i64 {
        // LANDLOCK_CREATE_RULESET_VERSION (linux/landlock.h): asks for the version only
        const VERSION: libc::c_uint = 1;
        // SAFETY: landlock_create_ruleset with a null attribute, size 0 and the version flag
        // creates nothing and returns the ABI version or -1.
        let abi = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<u8>(),
                0usize,
                VERSION,
            )
        };
        abi.max(0)
    }

    /// Without Landlock (`landlock_abi` 0), makes this process, the one that starts the
    /// candidates' workers, undumpable: a candidate of the same user could otherwise open
    /// its fds (the reference worker's pipes and payload area) through `/proc/<pid>/fd`,
    /// read-write. Its `/proc` files are then root's (a candidate running as root still
    /// reaches them), and it leaves no core dump. Whether it did.
    pub(crate) fn shield_parent(landlock_abi: i64) -> bool {
        // Landlock's ptrace scope already refuses a sandboxed process those files
        // SAFETY: prctl with integer arguments only.
        landlock_abi < 1 && unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0) } == 0
    }

    /// Sets a resource limit (soft and hard); a macro because the resource's type differs
    /// between C libraries.
    macro_rules! set_limit {
        ($resource:expr, $value:expr) => {{
            let value = $value as libc::rlim_t;
            let limit = libc::rlimit {
                rlim_cur: value,
                rlim_max: value,
            };
            // SAFETY: setrlimit with a valid struct pointer.
            if unsafe { libc::setrlimit($resource, &limit) } == 0 {
                Ok(())
            } else {
                Err(errno().to_string())
            }
        }};
    }

    /// Restricts the worker: limits, no new privileges, seccomp (inet sockets too where there
    /// is no network namespace), Landlock; points the caches Python and Triton write at the
    /// scratch folder. Returns warnings for what could not be done (it never fails: a worker that cannot be
    /// sandboxed still judges, and the parent says so).
    pub(crate) fn restrict(spec: &Spec, isolation: &Isolation) -> Vec<String> {
        let mut warnings = isolation.warnings.clone();
        let bytes = spec.max_file_size_mb.saturating_mul(1 << 20);
        if let Err(e) = set_limit!(libc::RLIMIT_FSIZE, bytes) {
            warnings.push(format!("sandbox: cannot limit file size ({e})"));
        }
        let _: Result<(), String> = set_limit!(libc::RLIMIT_CORE, 0);
        // the writes Python, Triton and torch make by default, into the scratch folder
        for (var, sub) in [
            ("TMPDIR", "tmp"),
            ("TRITON_CACHE_DIR", "triton"),
            ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
            ("XDG_CACHE_HOME", "cache"),
        ] {
            let dir = spec.scratch.join(sub);
            let _ = std::fs::create_dir_all(&dir);
            // SAFETY of set_var: still no other thread reads the environment (the parent
            // watch only sleeps and calls getppid).
            std::env::set_var(var, &dir);
        }
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            warnings.push(format!("sandbox: cannot set no_new_privs ({})", errno()));
        }
        if let Err(e) = refuse_syscalls(!isolation.network_namespace) {
            let network = if isolation.network_namespace {
                ""
            } else {
                "open network connections, "
            };
            warnings.push(format!(
                "sandbox: no seccomp filter ({e}): the candidate can {network}type into a \
                 terminal it can open"
            ));
        }
        match landlock(spec) {
            Ok(None) => {}
            Ok(Some(w)) => warnings.push(format!("sandbox: {w}")),
            Err(e) => warnings.push(format!(
                "sandbox: Landlock failed ({e}): the candidate can write wherever the user can"
            )),
        }
        warnings
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    /// `PR_GET_DUMPABLE` in a forked child after it ran `f`: the test process stays as it was.
    fn dumpable_after(f: fn()) -> i32 {
        // SAFETY: the child calls only prctl and _exit (async-signal-safe) before it exits;
        // the parent waits for it with a valid status pointer.
        unsafe {
            let pid = libc::fork();
            assert!(pid >= 0, "fork");
            if pid == 0 {
                f();
                libc::_exit(libc::prctl(libc::PR_GET_DUMPABLE));
            }
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0);
            libc::WEXITSTATUS(status)
        }
    }

    #[test]
    fn without_landlock_the_parent_makes_itself_undumpable_and_with_it_stays_dumpable() {
        assert_eq!(dumpable_after(|| assert!(super::shield_parent(0))), 0);
        assert_eq!(dumpable_after(|| assert!(!super::shield_parent(3))), 1);
    }
}

//! `autokernel verify`'s exit code: a kernel that is wrong fails it, even though it is left
//! out of the model; a workspace whose kernels are right passes.

use std::path::Path;

use sha2::{Digest, Sha256};

use crate::util::{
    autokernel, git, judged, python_check, report, tempdir, tiny_workspace, tiny_workspace_with,
};

/// `verify -w ws --device cpu`: (exit code, stdout, stderr).
fn verify(ws: &Path) -> (Option<i32>, String, String) {
    verify_with(ws, &[])
}

/// `verify -w ws --device cpu EXTRA…`: (exit code, stdout, stderr).
fn verify_with(ws: &Path, extra: &[&str]) -> (Option<i32>, String, String) {
    let out = autokernel()
        .args(["verify", "--device", "cpu", "-w"])
        .arg(ws)
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_kernel_that_breaks_the_model_cannot_load_or_kills_the_worker_fails_verify_with_exit_1() {
    let (_dir, ws) = tempdir();
    let plan = tiny_workspace(&ws, 1);
    let target = plan[0]["id"].as_str().unwrap().to_string();
    let kernel = crate::util::kernel_or_starter(&ws, &plan, 0);
    let source = std::fs::read_to_string(&kernel).unwrap();

    // as it is, the kernel is plugged in and the model matches
    let (code, stdout, stderr) = verify(&ws);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("verified: true"), "{stdout}");
    assert!(
        stdout.contains("timings: Triton's interpreter on the CPU, not representative"),
        "{stdout}"
    );
    // verify.json holds the sha256 of the kernel it verified; an edit after it makes the
    // verification stale, which `report` says on stderr and in report.md
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ws.join("verify.json")).unwrap()).unwrap();
    let digest = format!("{:x}", Sha256::digest(source.as_bytes()));
    assert_eq!(saved["kernel_sha256"][&target], digest.as_str(), "{saved}");
    std::fs::write(
        &kernel,
        format!("{source}\n# edited after the verification\n"),
    )
    .unwrap();
    let out = report(&ws);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "warning: the verification is stale: the kernel.py of {target} changed after it"
        )),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("verification: PASS on cpu, "), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "; stale: the kernel.py of {target} is not the one verified\n"
        )),
        "{stdout}"
    );
    let report_md = std::fs::read_to_string(ws.join("report.md")).unwrap();
    assert!(
        report_md.contains(&format!("**Stale:** the `kernel.py` of {target} changed")),
        "{report_md}"
    );

    // 1.5 times the right answer
    let wrong = format!(
        "{source}\n_right = kernel_fn\n\ndef kernel_fn(**inputs):\n    return _right(**inputs) * 1.5\n"
    );
    judged(&ws, &target, &wrong);
    let (code, stdout, stderr) = verify(&ws);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    // caught by the plug check against the model's own module (norms, attention), or
    // else inside the model
    assert!(
        stdout.contains(&format!(
            "excluded: {target}: breaks the model: relative L2 error"
        )) || stdout.contains(&format!(
            "excluded: {target}: plug check failed: differs from"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("verified: false (1 kernel(s) break the model or cannot be loaded)"),
        "{stdout}"
    );

    // a syntax error
    judged(&ws, &target, &format!("{source}\ndef broken(:\n"));
    let (code, stdout, stderr) = verify(&ws);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!("excluded: {target}: cannot load")),
        "{stdout}"
    );
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ws.join("verify.json")).unwrap()).unwrap();
    assert_eq!(saved["passed"], false, "{saved}");
    assert_eq!(saved["excluded"][0]["broken"], true, "{saved}");
    // report still exits 0, and its summary names the failed verification
    let out = report(&ws);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("verification: FAIL on cpu (report.md says why)\n"),
        "{stdout}"
    );
    // a corrupt verify.json: the summary all the same, the file named on stderr
    let saved = std::fs::read_to_string(ws.join("verify.json")).unwrap();
    std::fs::write(ws.join("verify.json"), "{bad").unwrap();
    let out = report(&ws);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("experiments: ")
            && stdout.contains("verification: unreadable verify.json (autokernel verify"),
        "{stdout}"
    );
    assert!(
        stderr.contains("verify.json` is not a verification"),
        "{stderr}"
    );
    // report.md says the same, not "Not run yet"
    let md = std::fs::read_to_string(ws.join("report.md")).unwrap();
    assert!(
        md.contains("Unreadable: `") && md.contains("verify.json` is not a verification"),
        "{md}"
    );
    assert!(!md.contains("Not run yet"), "{md}");
    std::fs::write(ws.join("verify.json"), saved).unwrap();

    // a kernel that kills the process inside the model: named and left out, exit 1 (not
    // the "bench worker died" error of exit 2)
    let killer = format!(
        "{source}\n_right = kernel_fn\n\ndef kernel_fn(**inputs):\n    import os\n    os._exit(3)\n"
    );
    judged(&ws, &target, &killer);
    let (code, stdout, stderr) = verify(&ws);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!(
            "excluded: {target}: kills the bench worker (exit status 3) inside the model"
        )),
        "{stdout}"
    );
    assert!(stdout.contains("verified: false"), "{stdout}");

    // put right again, it passes again
    judged(&ws, &target, &source);
    let (code, stdout, stderr) = verify(&ws);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
}

/// With two kernels: one that kills the worker, or hangs it, inside the model is left out
/// and the other is still verified and plugged in (the culprit is found by plugging each
/// in alone, each on a fresh worker, so a kernel that leaves the process broken for the
/// next is not blamed on the next); a verification that fails leaves no stale verify.json;
/// a deleted kernel.py is said, not skipped.
#[test]
fn a_kernel_that_kills_or_hangs_the_worker_leaves_the_other_kernels_verified() {
    let (_dir, ws) = tempdir();
    let plan = tiny_workspace(&ws, 2);
    let ids: Vec<String> = plan
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect();
    // two ops planned; an op split by matmul call site may bring more targets, which the
    // run never reached (no kernel.py: said, not plugged in)
    assert!(ids.len() >= 2, "{plan}");
    let (first, second) = (&ids[0], &ids[1]);
    let path = |id: &str| ws.join(format!("targets/{id}/kernel.py"));
    // the run's one experiment went to the first target (and kept no kernel when it did
    // not pass, as on a loaded machine): a target without a kernel gets its starter,
    // committed as an experiment would be
    for (i, id) in [first, second].into_iter().enumerate() {
        if !path(id).exists() {
            std::fs::create_dir_all(path(id).parent().unwrap()).unwrap();
            crate::util::new_kernel(plan[i]["kind"].as_str().unwrap(), &path(id));
            let starter = std::fs::read_to_string(path(id)).unwrap();
            judged(&ws, id, &starter);
        }
    }
    let source = |id: &str| std::fs::read_to_string(path(id)).unwrap();
    let (first_source, second_source) = (source(first), source(second));
    let restore = || {
        judged(&ws, first, &first_source);
        judged(&ws, second, &second_source);
    };

    // the first kills the process: it is named, the second is plugged in
    judged(
        &ws,
        first,
        &format!("{first_source}\n\ndef kernel_fn(**inputs):\n    import os\n    os._exit(3)\n"),
    );
    let (code, stdout, stderr) = verify(&ws);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!("excluded: {first}: kills the bench worker")),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("included: {second}")), "{stdout}");
    restore();

    // the second hangs: found once the timeout passes, the first is plugged in
    judged(
        &ws,
        second,
        &format!("{second_source}\n\ndef kernel_fn(**inputs):\n    import time\n    while True:\n        time.sleep(0.1)\n"),
    );
    let (code, stdout, stderr) = verify_with(&ws, &["--timeout", "20"]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!(
            "excluded: {second}: hangs: no reply within 20 s inside the model"
        )),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("included: {first}")), "{stdout}");

    // SIGTERM while it hangs: verify stops at once, exit 130, and saves nothing (the
    // last verification stays as it was)
    let before = std::fs::read(ws.join("verify.json")).unwrap();
    let child = autokernel()
        .args(["verify", "--device", "cpu", "--timeout", "600", "-w"])
        .arg(&ws)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(8));
    // SAFETY: kill with a pid and a signal number has no memory preconditions.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("SIGTERM: verification stopped"), "{stderr}");
    assert_eq!(std::fs::read(ws.join("verify.json")).unwrap(), before);
    restore();

    // the first runs right but leaves the process broken for the second, which dies: no
    // kernel alone kills a fresh worker, so neither is blamed (exit 2, said why). The
    // first breaks it when loaded: an operator's launcher replays a recorded kernel_fn
    // without running its Python again, so a kernel_fn's later calls may never come
    judged(
        &ws,
        first,
        &format!("{first_source}\n\nimport builtins\nbuiltins._autokernel_test_poison = True\n"),
    );
    judged(
        &ws,
        second,
        &format!("{second_source}\n\n_right = kernel_fn\n\ndef kernel_fn(**inputs):\n    import builtins, os\n    if getattr(builtins, '_autokernel_test_poison', False):\n        os._exit(6)\n    return _right(**inputs)\n"),
    );
    let before = std::fs::read(ws.join("verify.json")).unwrap();
    let (code, stdout, stderr) = verify(&ws);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(stderr.contains("with none of them alone"), "{stderr}");
    // an error saves nothing: the last verification stays, stale for these kernels
    assert_eq!(std::fs::read(ws.join("verify.json")).unwrap(), before);
    restore();

    // a deleted kernel.py: said, and no failure
    std::fs::remove_file(path(second)).unwrap();
    let (code, stdout, stderr) = verify(&ws);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!(
            "excluded: {second}: no kernel: `targets/{second}/kernel.py` does not exist (the run has not reached this target"
        )),
        "{stdout}"
    );
}

/// `--deploy compile` on the CPU: the kernel alone is checked compiled, and the modes table
/// has the eager and the compiled model, each without and with it, with no error; verify.json
/// records the mode. `--deploy cudagraph` needs a GPU and says so. A mode `run --deploy`
/// chose is the workspace's: `verify` without `--deploy` takes it.
#[test]
fn verify_times_the_model_in_the_deploy_mode_it_is_asked_for() {
    let (_dir, ws) = tempdir();
    let plan = tiny_workspace(&ws, 1);
    let target = plan[0]["id"].as_str().unwrap().to_string();
    let (code, stdout, stderr) = verify_with(&ws, &["--deploy", "compile"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains(&format!("included: {target}")), "{stdout}");
    assert!(stdout.contains("deploy: compile"), "{stdout}");
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ws.join("verify.json")).unwrap()).unwrap();
    assert_eq!(saved["deploy"], "compile", "{saved}");
    let modes: Vec<&str> = saved["modes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["eager", "compile"], "{saved}");
    // where an exported package will run it: compile (deployed there), cudagraph (not
    // measured on the CPU), eager only if the CPU's eager row did not lose
    let eager = &saved["modes"][0];
    let eager_won = eager["error"].is_null() && eager["speedup"].as_f64().unwrap_or(1.0) >= 1.0;
    let want: &[&str] = if eager_won {
        &["eager", "cudagraph", "compile"]
    } else {
        &["cudagraph", "compile"]
    };
    assert_eq!(saved["contexts"], serde_json::json!(want), "{saved}");
    for m in saved["modes"].as_array().unwrap() {
        assert!(m["error"].is_null(), "{m}");
        assert!(m["baseline_ms"].as_f64().unwrap() > 0.0, "{m}");
        assert!(m["kernels_ms"].as_f64().unwrap() > 0.0, "{m}");
    }
    // the table goes into report.md
    let out = report(&ws);
    assert!(out.status.success());
    let md = std::fs::read_to_string(ws.join("report.md")).unwrap();
    assert!(
        md.contains("(ms; `compile` decided which kernels went in)") && md.contains("| compile | "),
        "{md}"
    );
    // and its chart beside progress.png, a PNG that git does not see
    assert!(md.contains("](modes.png)"), "{md}");
    let png = std::fs::read(ws.join("modes.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert!(!git(&ws, &["status", "--porcelain"]).contains("modes.png"));

    let (code, stdout, stderr) = verify_with(&ws, &["--deploy", "cudagraph"]);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(
        stderr.contains("--deploy cudagraph needs a GPU"),
        "{stderr}"
    );
    // with --device cpu the refusal comes before any progress line or worker
    assert!(!stderr.contains("verifying"), "{stderr}");

    // `run --deploy` records the mode in the workspace's settings, and a later `verify`
    // without --deploy decides in it (the CPU's own default is eager)
    tiny_workspace_with(&ws, 1, &["--deploy", "compile"]);
    let settings = std::fs::read_to_string(ws.join("autokernel.toml")).unwrap();
    assert!(settings.contains("deploy = \"compile\""), "{settings}");
    let (code, stdout, stderr) = verify_with(&ws, &[]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("deploy: compile"), "{stdout}");
}

/// Kernels that each made the model faster alone, but together make it slower in the mode
/// that decides, all stay out (`verify_rules_check.py slower_together`).
#[test]
fn kernels_slower_together_in_the_deploy_mode_stay_out() {
    python_check("verify_rules_check.py", "slower_together");
}

/// An exported package leaves eager, CUDA graphs and torch.compile the model's own ops where
/// the verification measured the kernels slower there (`verify_rules_check.py contexts`).
#[test]
fn an_exported_package_runs_the_kernels_only_where_they_did_not_lose() {
    python_check("verify_rules_check.py", "contexts");
}

/// A mode's rounds stop once they decide every variant, a compiled variant is compiled once,
/// and the deadline stops the timing between rounds (`verify_rules_check.py early_stop`, on
/// made-up timings).
#[test]
fn a_modes_rounds_stop_once_decided_and_at_the_deadline() {
    python_check("verify_rules_check.py", "early_stop");
}

/// The target ids of the tiny example's first two targets, each with a judged kernel (the
/// run's, or its starter).
fn two_judged_kernels(ws: &Path) -> (String, String) {
    let plan = tiny_workspace(ws, 2);
    let ids: Vec<String> = plan
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect();
    assert!(ids.len() >= 2, "{plan}");
    for i in 0..2 {
        crate::util::kernel_or_starter(ws, &plan, i);
    }
    (ids[0].clone(), ids[1].clone())
}

/// The last progress line the verification script wrote in `ws` (its `text`), if any.
fn last_progress(ws: &Path) -> Option<String> {
    let text = std::fs::read_to_string(ws.join(".autokernel/verify.progress.jsonl")).ok()?;
    let line: serde_json::Value = serde_json::from_str(text.lines().last()?).ok()?;
    Some(line["text"].as_str()?.to_string())
}

/// Issue #36: a verification cut short still saves what it decided. The second kernel hangs
/// once the verification checks it alone in the model, after the first was decided in: with
/// `--verify-budget 20s` the script cannot stop itself there, so the worker is stopped at the
/// hard limit (the deadline and its grace), and verify.json holds the first kernel plugged
/// in and the second left out undecided, marked cut short; `export` ships the decided kernel.
/// SIGTERM at the same moment saves the same, with exit 130.
#[test]
fn a_verification_cut_short_saves_the_kernels_it_decided() {
    let (dir, ws) = tempdir();
    let (first, second) = two_judged_kernels(&ws);
    let path = ws.join(format!("targets/{second}/kernel.py"));
    let source = std::fs::read_to_string(&path).unwrap();
    let progress = ws.join(".autokernel/verify.progress.jsonl");
    judged(
        &ws,
        &second,
        &format!(
            // a host read first: the operator's launcher then runs this Python at every call
            // (a call that only launches kernels is replayed without it)
            "{source}\n\n_right = kernel_fn\n\ndef kernel_fn(**inputs):\n    import pathlib, time, torch\n    [v for v in inputs.values() if isinstance(v, torch.Tensor)][0].sum().item()\n    progress = pathlib.Path({progress:?})\n    while progress.exists() and 'checking {second} alone' in progress.read_text().splitlines()[-1]:\n        time.sleep(0.1)\n    return _right(**inputs)\n",
        ),
    );
    let (code, stdout, stderr) = verify_with(&ws, &["--verify-budget", "20s", "--timeout", "600"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("verified: true; cut short: stopped 5 s past the end of its budget"),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("included: {first}\n")), "{stdout}");
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ws.join("verify.json")).unwrap()).unwrap();
    assert_eq!(saved["cut_short"], true, "{saved}");
    assert_eq!(saved["included"], serde_json::json!([first]), "{saved}");
    let left_out = saved["excluded"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["target"] == second.as_str())
        .unwrap_or_else(|| panic!("{second} is not left out: {saved}"));
    assert_eq!(left_out["undecided"], true, "{saved}");
    assert_eq!(left_out["broken"], false, "{saved}");
    assert!(
        left_out["reason"].as_str().unwrap().starts_with(&format!(
            "not decided: the verification was cut short (stopped while checking {second} alone"
        )),
        "{saved}"
    );
    // the modes table was never reached: its row says so
    assert!(
        saved["modes"][0]["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("not timed: the verification was cut short")),
        "{saved}"
    );
    // report says it was cut short
    let out = report(&ws);
    let report_out = String::from_utf8_lossy(&out.stdout);
    assert!(report_out.contains("; cut short: "), "{report_out}");
    let md = std::fs::read_to_string(ws.join("report.md")).unwrap();
    assert!(md.contains("**Cut short:** stopped 5 s past"), "{md}");
    // export takes the kernel it decided, and says the verification was cut short
    let out = autokernel()
        .args(["export", "--name", "cut_short_kernels", "-w"])
        .arg(&ws)
        .arg("-o")
        .arg(dir.path().join("exported"))
        .output()
        .unwrap();
    let (export_out, export_err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{export_out}{export_err}");
    assert!(
        export_out.contains("exported 1 kernel(s)") && export_out.contains(&first),
        "{export_out}"
    );
    assert!(export_err.contains("was cut short"), "{export_err}");

    // SIGTERM while it hangs there: exit 130, and the same decisions saved
    std::fs::remove_file(ws.join("verify.json")).unwrap();
    // the last run's progress ends on the same line: wait for this run's
    std::fs::remove_file(&progress).unwrap();
    let child = autokernel()
        .args(["verify", "--device", "cpu", "--timeout", "600", "-w"])
        .arg(&ws)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while !last_progress(&ws).is_some_and(|t| t.starts_with(&format!("checking {second} alone"))) {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(600),
            "the verification never reached {second}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // SAFETY: kill with a pid and a signal number has no memory preconditions.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("SIGTERM: verification stopped; what it decided is saved"),
        "{stderr}"
    );
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ws.join("verify.json")).unwrap()).unwrap();
    assert_eq!(saved["cut_short"], true, "{saved}");
    assert_eq!(saved["included"], serde_json::json!([first]), "{saved}");
    assert!(
        saved["cut_short_reason"]
            .as_str()
            .unwrap()
            .starts_with("interrupted (Ctrl-C or SIGTERM): stopped while checking"),
        "{saved}"
    );
}

/// Issue #36: the verification's progress lines on stderr come in order: the model loaded,
/// each kernel alone, then per mode (the deploy mode first, then the others `--all-modes`
/// asks for) each variant's rounds, then done; each says the time left. stdout has none.
#[test]
fn the_verifications_progress_lines_come_in_order() {
    let (_dir, ws) = tempdir();
    let plan = tiny_workspace(&ws, 1);
    let target = plan[0]["id"].as_str().unwrap().to_string();
    crate::util::kernel_or_starter(&ws, &plan, 0);
    let (code, stdout, stderr) = verify_with(&ws, &["--all-modes", "--verify-budget", "20m"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(!stdout.contains("verify: "), "{stdout}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("verify: "))
        .collect();
    assert!(
        lines
            .iter()
            .all(|l| l.contains("s of the verification's budget left")),
        "{stderr}"
    );
    let text = |l: &&str| {
        l.trim_start_matches("verify: ")
            .split(" · ")
            .next()
            .unwrap()
            .to_string()
    };
    let texts: Vec<String> = lines.iter().map(text).collect();
    let at = |want: &str| {
        texts
            .iter()
            .position(|t| t == want)
            .unwrap_or_else(|| panic!("no `{want}` line:\n{stderr}"))
    };
    assert_eq!(
        texts.first().map(String::as_str),
        Some("loading the model"),
        "{stderr}"
    );
    assert_eq!(texts.last().map(String::as_str), Some("done"), "{stderr}");
    let alone = at(&format!("checking {target} alone in the model"));
    // on the CPU one round per variant; eager (deployed) first, then torch.compile
    let timings: Vec<&String> = texts.iter().filter(|t| t.starts_with("timing ")).collect();
    let with = format!("with {target}");
    let want: Vec<String> = ["eager", "compile"]
        .iter()
        .flat_map(|mode| {
            ["without kernels", with.as_str()]
                .map(|variant| format!("timing {mode} {variant}, round 1 of 1"))
        })
        .collect();
    assert_eq!(timings, want.iter().collect::<Vec<_>>(), "{stderr}");
    assert!(alone < at(&want[0]), "{stderr}");
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ws.join("verify.json")).unwrap()).unwrap();
    assert!(saved.get("cut_short").is_none(), "{saved}");
    let modes: Vec<&str> = saved["modes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["eager", "compile"], "{saved}");
}

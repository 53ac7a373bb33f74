//! `autokernel verify`'s exit code: a kernel that is wrong fails it, even though it is left
//! out of the model; a workspace whose kernels are right passes.

use std::path::Path;

use crate::util::{autokernel, git, tempdir};

/// `verify -w ws --device cpu`: (exit code, stdout, stderr).
fn verify(ws: &Path) -> (Option<i32>, String, String) {
    let out = autokernel()
        .args(["verify", "--device", "cpu", "-w"])
        .arg(ws)
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
    let out = autokernel()
        .args([
            "run",
            "--example",
            "tiny",
            "--device",
            "cpu",
            "--top",
            "1",
            "--max-experiments",
            "1",
            "--no-verify",
            "-w",
        ])
        .arg(&ws)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ws.join("plan.json")).unwrap()).unwrap();
    let target = plan[0]["id"].as_str().unwrap().to_string();
    let kernel = ws.join(format!("targets/{target}/kernel.py"));
    let source = std::fs::read_to_string(&kernel).unwrap();

    // as it is, the kernel is plugged in and the model matches
    let (code, stdout, stderr) = verify(&ws);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("verified: true"), "{stdout}");

    // 1.5 times the right answer
    let wrong = format!(
        "{source}\n_right = kernel_fn\n\ndef kernel_fn(**inputs):\n    return _right(**inputs) * 1.5\n"
    );
    std::fs::write(&kernel, wrong).unwrap();
    let (code, stdout, stderr) = verify(&ws);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!(
            "excluded: {target}: breaks the model: relative L2 error"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("verified: false (1 kernel(s) break the model or cannot be loaded)"),
        "{stdout}"
    );

    // a syntax error
    std::fs::write(&kernel, format!("{source}\ndef broken(:\n")).unwrap();
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

    // a kernel that kills the process inside the model: named and left out, exit 1 (not
    // the "bench worker died" error of exit 2)
    let killer = format!(
        "{source}\n_right = kernel_fn\n\ndef kernel_fn(**inputs):\n    import os\n    os._exit(3)\n"
    );
    std::fs::write(&kernel, killer).unwrap();
    let (code, stdout, stderr) = verify(&ws);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!(
            "excluded: {target}: kills the bench worker inside the model (exit status 3)"
        )),
        "{stdout}"
    );
    assert!(stdout.contains("verified: false"), "{stdout}");

    // put right again, it passes again
    git(
        &ws,
        &["checkout", "--", &format!("targets/{target}/kernel.py")],
    );
    let (code, stdout, stderr) = verify(&ws);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
}

/// With two kernels, one that kills the worker inside the model is left out and the other
/// is still verified and plugged in (the killer is found by plugging each in alone).
#[test]
fn a_kernel_that_kills_the_worker_leaves_the_other_kernels_verified() {
    let (_dir, ws) = tempdir();
    let out = autokernel()
        .args([
            "run",
            "--example",
            "tiny",
            "--device",
            "cpu",
            "--top",
            "2",
            "--max-experiments",
            "4",
            "--plateau",
            "1",
            "--no-verify",
            "-w",
        ])
        .arg(&ws)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ws.join("plan.json")).unwrap()).unwrap();
    let ids: Vec<String> = plan
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 2, "{plan}");
    let (killer, other) = (&ids[0], &ids[1]);
    assert!(
        ws.join(format!("targets/{other}/kernel.py")).exists(),
        "the run made no kernel for {other}"
    );
    let kernel = ws.join(format!("targets/{killer}/kernel.py"));
    let source = std::fs::read_to_string(&kernel).unwrap();
    std::fs::write(
        &kernel,
        format!("{source}\n\ndef kernel_fn(**inputs):\n    import os\n    os._exit(3)\n"),
    )
    .unwrap();
    let (code, stdout, stderr) = verify(&ws);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!("excluded: {killer}: kills the bench worker")),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("included: {other}")), "{stdout}");
}

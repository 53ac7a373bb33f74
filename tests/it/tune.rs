//! `autokernel tune` on the CPU: one kernel file refined at a shape without a model, the
//! best version written out, resumed, and bad input refused before anything is written.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::util::{assert_consistent, autokernel, git, new_kernel, report, run_branch, tempdir};

/// A softmax starter written to `dir/softmax.py`.
fn starter(dir: &Path) -> PathBuf {
    let path = dir.join("softmax.py");
    new_kernel("softmax", &path);
    path
}

fn tune(kernel: &Path, ws: &Path, extra: &[&str]) -> Output {
    autokernel()
        .arg("tune")
        .arg(kernel)
        .args(["--device", "cpu", "--no-progress", "-w"])
        .arg(ws)
        .args(extra)
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn tune_refines_a_file_at_a_shape_and_writes_the_best_version() {
    let (dir, ws) = tempdir();
    let kernel = starter(dir.path());
    let original = std::fs::read_to_string(&kernel).unwrap();
    let best = dir.path().join("best.py");
    let out = tune(
        &kernel,
        &ws,
        &[
            "--shape",
            "8,96",
            "--max-experiments",
            "2",
            "-o",
            best.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let rows = assert_consistent(&ws);
    // the file as given is the baseline; then two configurations from its TUNABLES
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(
        rows[0]["description"],
        format!("baseline: softmax kernel from {}", kernel.display())
    );
    assert!(
        rows[1..]
            .iter()
            .all(|r| r["description"].starts_with("tune: ")),
        "{rows:?}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("configurations_measured: 3"), "{stdout}");
    // the copy is the branch's head: the last kept configuration (or the file itself)
    let head = git(
        &ws,
        &[
            "show",
            &format!("{}:targets/01-softmax/kernel.py", run_branch(&ws)),
        ],
    );
    assert_eq!(std::fs::read_to_string(&best).unwrap(), head);
    let kept: Vec<_> = rows.iter().filter(|r| r["decision"] == "keep").collect();
    if kept.is_empty() {
        assert_eq!(head, original);
    } else {
        assert_ne!(head, original);
    }
    // the file given is left as it was
    assert_eq!(std::fs::read_to_string(&kernel).unwrap(), original);
    assert!(ws.join("report.md").is_file());
}

#[test]
fn tune_resumes_and_refuses_another_problem_or_a_run() {
    let (dir, ws) = tempdir();
    let kernel = starter(dir.path());
    // both write -o: the resumed one overwrites its own earlier result without --force
    let best = dir.path().join("best.py");
    let args = [
        "--shape",
        "8,96",
        "--max-experiments",
        "1",
        "-o",
        best.to_str().unwrap(),
    ];
    let first = tune(&kernel, &ws, &args);
    assert!(first.status.success(), "{}", text(&first));
    // --json: the resumed tune's summary is one JSON object on stdout
    let again = tune(&kernel, &ws, &[&args[..], &["--json"]].concat());
    assert!(again.status.success(), "{}", text(&again));
    let summary: serde_json::Value = serde_json::from_slice(&again.stdout)
        .unwrap_or_else(|e| panic!("tune --json: {e}: {}", text(&again)));
    assert_eq!(summary["configurations_measured"], 3, "{summary}");
    assert_eq!(summary["written_to"], best.to_str().unwrap(), "{summary}");
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("resuming"),
        "{}",
        text(&again)
    );
    assert!(best.is_file());
    let rows = assert_consistent(&ws);
    // one baseline across both invocations, one experiment each
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(
        rows.iter().filter(|r| r["decision"] == "baseline").count(),
        1
    );
    // each experiment's note keeps the CONFIG it measured, all three on one structure and
    // no configuration measured twice across the resume
    let mut configs = Vec::new();
    let mut structures = std::collections::HashSet::new();
    for r in &rows {
        let note = git(&ws, &["notes", "--ref", "autokernel", "show", &r["commit"]]);
        let field = |key: &str| {
            note.lines()
                .find_map(|l| l.strip_prefix(key))
                .unwrap_or_else(|| panic!("no `{key}` in the note:\n{note}"))
                .to_string()
        };
        configs.push(field("kernel_config: "));
        structures.insert(field("kernel_structure_sha256: "));
    }
    assert_eq!(structures.len(), 1, "{configs:?}");
    let distinct: std::collections::HashSet<_> = configs.iter().collect();
    assert_eq!(distinct.len(), 3, "{configs:?}");

    // an edited file is not resumed from its old text, nor another file's text
    let original = std::fs::read_to_string(&kernel).unwrap();
    std::fs::write(&kernel, format!("{original}# edited\n")).unwrap();
    let changed = tune(&kernel, &ws, &["--shape", "8,96", "--max-experiments", "1"]);
    assert_eq!(changed.status.code(), Some(2), "{}", text(&changed));
    assert!(
        text(&changed).contains("has changed since"),
        "{}",
        text(&changed)
    );
    let copy = dir.path().join("edited.py");
    std::fs::rename(&kernel, &copy).unwrap();
    std::fs::write(&kernel, &original).unwrap();
    let other_file = tune(&copy, &ws, &["--shape", "8,96", "--max-experiments", "1"]);
    assert_eq!(other_file.status.code(), Some(2), "{}", text(&other_file));
    assert!(
        text(&other_file).contains("whose text differs"),
        "{}",
        text(&other_file)
    );

    let other = tune(
        &kernel,
        &ws,
        &["--shape", "16,96", "--max-experiments", "1"],
    );
    assert_eq!(other.status.code(), Some(2), "{}", text(&other));
    assert!(
        text(&other).contains("tunes softmax 8x96 float32, not softmax 16x96 float32"),
        "{}",
        text(&other)
    );
    let run = autokernel()
        .args(["run", "--example", "tiny", "--device", "cpu", "--workspace"])
        .arg(&ws)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(2), "{}", text(&run));
    assert!(
        text(&run).contains("is `autokernel tune`'s"),
        "{}",
        text(&run)
    );
    let verify = autokernel()
        .args(["verify", "-w"])
        .arg(&ws)
        .output()
        .unwrap();
    assert_eq!(verify.status.code(), Some(2), "{}", text(&verify));
    assert!(
        text(&verify).contains("no model to plug"),
        "{}",
        text(&verify)
    );
    // a verify.json there (copied in, say) is not read: no warning pointing at `verify`,
    // which refuses a tune workspace
    std::fs::write(ws.join("verify.json"), "{bad").unwrap();
    let report = report(&ws);
    assert!(report.status.success(), "{}", text(&report));
    assert!(!text(&report).contains("verify.json"), "{}", text(&report));
    assert!(
        !text(&report).contains("projected_speedup"),
        "{}",
        text(&report)
    );
    assert!(
        !text(&report).contains("verification:"),
        "{}",
        text(&report)
    );
    assert!(std::fs::read_to_string(ws.join("report.md"))
        .unwrap()
        .contains("An `autokernel tune` workspace has no model"));
    // none of the refusals wrote a row
    assert_eq!(assert_consistent(&ws).len(), 3);
}

#[test]
fn tune_refuses_bad_input_before_creating_a_workspace() {
    let (dir, ws) = tempdir();
    let kernel = starter(dir.path());
    let cases: Vec<(PathBuf, Vec<&str>, &str)> = vec![
        (
            dir.path().join("missing.py"),
            vec!["--shape", "8,96"],
            "not found",
        ),
        (kernel.clone(), vec!["--shape", "8,96,4"], "--shape"),
        (
            kernel.clone(),
            vec!["--shape", "8,96", "-o", "/nonexistent-folder/best.py"],
            "is not a file in an existing folder",
        ),
        (
            kernel.clone(),
            vec!["--shape", "8,96", "--max-experiments", "0"],
            "--max-experiments 0",
        ),
    ];
    // a file of the user's that a fresh tuning must not overwrite without --force
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "mine\n").unwrap();
    let no_kind = dir.path().join("no_kind.py");
    let source = std::fs::read_to_string(&kernel).unwrap();
    std::fs::write(&no_kind, source.replace("KERNEL_KIND = \"softmax\"", "")).unwrap();
    let no_tunables = dir.path().join("no_tunables.py");
    std::fs::write(&no_tunables, source.replace("TUNABLES = {", "OPTIONS = {")).unwrap();
    let nothing_to_tune = dir.path().join("nothing_to_tune.py");
    let start = source.find("TUNABLES = {").unwrap();
    let end = start + source[start..].find("\n}\n").unwrap() + 3;
    std::fs::write(
        &nothing_to_tune,
        format!("{}TUNABLES = {{}}\n{}", &source[..start], &source[end..]),
    )
    .unwrap();
    let cases = cases.into_iter().chain([
        (no_kind, vec!["--shape", "8,96"], "declares no KERNEL_KIND"),
        (no_tunables, vec!["--shape", "8,96"], "TUNABLES"),
        (nothing_to_tune, vec!["--shape", "8,96"], "nothing to tune"),
        (
            kernel.clone(),
            vec!["--shape", "8,96", "--layout", "b_transposed"],
            "matmul only",
        ),
        (
            kernel.clone(),
            vec!["--shape", "8,96", "-o", kernel.to_str().unwrap()],
            "never modifies",
        ),
        (
            kernel.clone(),
            vec!["--shape", "8,96", "-o", notes.to_str().unwrap()],
            "exists and tune would overwrite it",
        ),
    ]);
    for (file, args, message) in cases {
        let out = tune(&file, &ws, &args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{}: {}",
            file.display(),
            text(&out)
        );
        assert!(
            text(&out).contains(message),
            "{}: {}",
            file.display(),
            text(&out)
        );
        assert!(!ws.exists(), "{} left a workspace behind", file.display());
    }
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "mine\n");
}

#[test]
fn a_kernel_that_never_passes_is_not_written_out() {
    let (dir, ws) = tempdir();
    let kernel = starter(dir.path());
    let source = std::fs::read_to_string(&kernel).unwrap();
    // the starter's result, scaled: wrong for every configuration the tuner can try
    let wrong = dir.path().join("wrong.py");
    assert!(source.contains("    return y\n"));
    std::fs::write(
        &wrong,
        source.replace("    return y\n", "    return y * 1.5\n"),
    )
    .unwrap();
    let best = dir.path().join("best.py");
    let out = tune(
        &wrong,
        &ws,
        &[
            "--shape",
            "8,96",
            "--max-experiments",
            "1",
            "-o",
            best.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(!best.exists(), "a failing kernel was written out");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("best: none"), "{stdout}");
    assert!(crate::util::rows(&ws)
        .iter()
        .all(|r| r["correctness"] != "PASS"));
}

#[test]
fn a_gpu_sized_shape_on_the_cpu_is_warned_about_and_a_timed_out_baseline_is_named() {
    let (dir, ws) = tempdir();
    let kernel = starter(dir.path());
    // 4096x4096 float32 moves 134 MB: minutes per configuration in the interpreter, so the
    // 2 s limit times the baseline out
    let out = tune(
        &kernel,
        &ws,
        &[
            "--shape",
            "4096,4096",
            "--bench-timeout",
            "2",
            "--max-experiments",
            "1",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stderr.contains("warning: softmax 4096x4096 on the CPU runs in Triton's interpreter"),
        "{stderr}"
    );
    assert!(stderr.contains("--shape 8,128"), "{stderr}");
    assert!(
        stdout.contains(
            "best: none (no configuration passed the judge: the baseline's verdict was TIMEOUT;"
        ),
        "{stdout}"
    );
    // a small shape is not warned about
    let (dir, ws) = tempdir();
    let kernel = starter(dir.path());
    let out = tune(
        &kernel,
        &ws,
        &["--shape", "8,128", "--max-experiments", "0"],
    );
    assert!(!text(&out).contains("warning: softmax"), "{}", text(&out));
}

/// A kernel that returns a meta tensor at every CONFIG value but the file's own (issue 21,
/// point 6) used to make `tune` exit 2 at its first tuned configuration, and every resume
/// retry that configuration and exit 2 again. Each such configuration is now a FAIL row;
/// the tune finishes with the baseline as its best, and a resume measures new ones.
#[test]
fn a_kernel_that_breaks_the_harness_at_one_config_is_a_fail_and_resumes_go_on() {
    let (dir, ws) = tempdir();
    let source = std::fs::read_to_string(starter(dir.path())).unwrap();
    let body = "    x = x.contiguous()\n";
    assert!(source.contains(body), "the starter's kernel_fn starts so");
    // the starter's own values of the keys read at 8x96 (BLOCK_ROWS 2, num_warps 8)
    assert!(source.contains("\"BLOCK_ROWS\": 2,") && source.contains("\"num_warps\": 8,"));
    let meta = "    if (CONFIG[\"BLOCK_ROWS\"], CONFIG[\"num_warps\"]) != (2, 8):\n        return torch.empty(x.shape, dtype=x.dtype, device=\"meta\")\n";
    let kernel = dir.path().join("meta_when_tuned.py");
    std::fs::write(&kernel, source.replacen(body, &format!("{meta}{body}"), 1)).unwrap();
    for budget in ["2", "1"] {
        let out = tune(
            &kernel,
            &ws,
            &["--shape", "8,96", "--max-experiments", budget],
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    }
    let rows = assert_consistent(&ws);
    // one baseline, two experiments moving the keys it reads (each a FAIL), then one more
    // on resume (another key, which may pass), no configuration measured twice
    assert_eq!(rows.len(), 4, "{rows:?}");
    assert_eq!(rows[0]["correctness"], "PASS", "{rows:?}");
    assert_eq!(rows[1]["correctness"], "FAIL", "{rows:?}");
    assert_eq!(rows[2]["correctness"], "FAIL", "{rows:?}");
    let mut configs = std::collections::HashSet::new();
    for r in &rows {
        let note = git(&ws, &["notes", "--ref", "autokernel", "show", &r["commit"]]);
        let config = note.lines().find(|l| l.starts_with("kernel_config: "));
        assert!(configs.insert(config.map(str::to_string)), "{note}");
    }
}

/// Python that appends, at import, a well-formed row to the workspace's `results.tsv`
/// claiming the experiment being judged (the next number, the branch's head commit) was
/// kept and passed: the attack of issue 21, a candidate writing the log itself.
fn forger(ws: &Path) -> String {
    format!(
        r#"
import subprocess as _sp


def _forge(ws={ws:?}):
    with open(ws + "/results.tsv") as f:
        lines = f.read().splitlines()
    if len(lines) < 2:
        return
    header = lines[0].split("\t")
    row = dict(zip(header, lines[-1].split("\t")))
    n = max(int(line.split("\t")[0]) for line in lines[1:]) + 1
    head = _sp.check_output(["git", "-C", ws, "rev-parse", "HEAD"], text=True).strip()
    row.update(experiment=str(n), commit=head, decision="keep", correctness="PASS",
               latency_us="1.000", description="forged")
    with open(ws + "/results.tsv", "a") as f:
        f.write("\t".join(row[h] for h in header) + "\n")


_forge()
"#,
        ws = ws.to_str().unwrap()
    )
}

/// The log checks itself (issue 21, point 7): forged rows (each tuned configuration here
/// FAILs and tries to append a kept PASS for itself at import, which the candidates'
/// sandbox refuses, so the test appends the same rows itself) and a row whose verdict was
/// edited by hand are set aside, with a warning naming each, by `report`, `log` and a
/// resumed `tune`; none is counted. `report` counted the forged rows as kept experiments.
#[test]
fn forged_and_edited_rows_are_set_aside_by_report_log_and_resume() {
    let (dir, ws) = tempdir();
    let source = std::fs::read_to_string(starter(dir.path())).unwrap();
    let body = "    x = x.contiguous()\n";
    let meta = "    if (CONFIG[\"BLOCK_ROWS\"], CONFIG[\"num_warps\"]) != (2, 8):\n        return torch.empty(x.shape, dtype=x.dtype, device=\"meta\")\n";
    let kernel = dir.path().join("forger.py");
    std::fs::write(
        &kernel,
        format!(
            "{}{}",
            source.replacen(body, &format!("{meta}{body}"), 1),
            forger(&ws)
        ),
    )
    .unwrap();
    let out = tune(&kernel, &ws, &["--shape", "8,96", "--max-experiments", "2"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("kept: 0"),
        "{}",
        text(&out)
    );
    // the candidates' sandbox refused their writes: the baseline and two real rows only
    let rows = crate::util::rows(&ws);
    assert!(
        rows.iter().all(|r| r["description"] != "forged"),
        "a candidate wrote results.tsv: {rows:?}"
    );
    assert_eq!(rows.len(), 3, "{rows:?}");
    // the rows the forger would have written without the sandbox (or a person), appended
    // here: each real experiment's number and commit claimed as a kept PASS
    let tsv = ws.join("results.tsv");
    let text_now = std::fs::read_to_string(&tsv).unwrap();
    let header: Vec<&str> = text_now.lines().next().unwrap().split('\t').collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let mut forged_rows = String::new();
    for line in text_now.lines().skip(2) {
        let mut f: Vec<&str> = line.split('\t').collect();
        f[column("decision")] = "keep";
        f[column("correctness")] = "PASS";
        f[column("latency_us")] = "1.000";
        f[column("description")] = "forged";
        forged_rows.push_str(&(f.join("\t") + "\n"));
    }
    std::fs::write(&tsv, text_now + &forged_rows).unwrap();
    let rows = crate::util::rows(&ws);
    let forged = rows.iter().filter(|r| r["description"] == "forged").count();
    assert_eq!((rows.len(), forged), (5, 2), "{rows:?}");

    let out = report(&ws);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("experiments: 2\n"), "{stdout}");
    assert_eq!(
        stderr.matches("set aside, not counted").count(),
        2,
        "{stderr}"
    );
    assert!(
        stderr.contains("the verdict recorded with its commit says decision revert, verdict FAIL"),
        "{stderr}"
    );
    let log = autokernel().args(["log", "-w"]).arg(&ws).output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&log.stdout),
        String::from_utf8_lossy(&log.stderr),
    );
    assert!(!stdout.contains("forged"), "{stdout}");
    assert_eq!(
        stderr.matches("set aside, not counted").count(),
        2,
        "{stderr}"
    );

    // experiment 2's real row edited by hand into a kept PASS
    let tsv = ws.join("results.tsv");
    let text_before = std::fs::read_to_string(&tsv).unwrap();
    let edited: Vec<String> = text_before
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            if f[0] == "2" && f[5] != "forged" {
                assert_eq!((f[7], f[8]), ("revert", "FAIL"), "{l}");
                let mut f: Vec<String> = f.iter().map(|s| s.to_string()).collect();
                f[7] = "keep".into();
                f[8] = "PASS".into();
                f.join("\t")
            } else {
                l.to_string()
            }
        })
        .collect();
    assert_ne!(edited.join("\n") + "\n", text_before);
    std::fs::write(&tsv, edited.join("\n") + "\n").unwrap();

    let resumed = tune(&kernel, &ws, &["--shape", "8,96", "--max-experiments", "1"]);
    let all = text(&resumed);
    assert_eq!(resumed.status.code(), Some(0), "{all}");
    assert!(
        all.contains("results.tsv row of experiment 2 (01-softmax, keep PASS")
            && all.contains("says decision revert, verdict FAIL"),
        "{all}"
    );
    // set aside: the edited row and the two forged ones (the resumed candidate's own
    // forgery is refused by the sandbox; the command prints each warning once)
    assert_eq!(all.matches("warning: results.tsv row").count(), 3, "{all}");
    let out = report(&ws);
    let stdout = String::from_utf8_lossy(&out.stdout);
    // counted: experiments 3 and 4 (the edited 2 and the two forged rows are not)
    assert!(stdout.contains("experiments: 2\n"), "{stdout}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr)
            .matches("set aside, not counted")
            .count(),
        3
    );
}

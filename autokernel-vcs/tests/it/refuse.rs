//! States the store refuses to start from, with a hint.

use autokernel_core::StoreError;
use autokernel_vcs::GixStore;

use crate::support::*;

fn user_repo(fx: &Fixture) -> std::path::PathBuf {
    let ws = fx.ws();
    std::fs::create_dir_all(&ws).unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    std::fs::create_dir_all(ws.join("targets/t")).unwrap();
    std::fs::write(ws.join("targets/t/kernel.py"), "v1\n").unwrap();
    git(&ws, &["add", "."]);
    git(&ws, &["commit", "-q", "-m", "base"]);
    ws
}

#[test]
fn a_detached_head_at_start_is_refused_with_a_hint() {
    let fx = Fixture::new();
    let ws = user_repo(&fx);
    git(&ws, &["checkout", "-q", "--detach"]);
    let err = GixStore::open(&ws, options("d")).unwrap_err();
    let StoreError::Refused { message, hint } = &err else {
        panic!("expected Refused, got {err:?}");
    };
    assert!(message.contains("detached HEAD"), "{message}");
    assert!(hint.contains("git -C") && hint.contains("switch"), "{hint}");
    // nothing changed: still detached, no branch made
    assert!(!git_raw(&ws, &["symbolic-ref", "-q", "HEAD"])
        .status
        .success());
    assert_eq!(git(&ws, &["branch", "--list", "autokernel/*"]), "");
    // after following the hint it opens
    git(&ws, &["switch", "-q", "main"]);
    GixStore::open(&ws, options("d")).unwrap();
}

#[test]
fn tracked_files_changed_by_someone_else_are_refused() {
    let fx = Fixture::new();
    let ws = user_repo(&fx);
    std::fs::write(ws.join("targets/t/kernel.py"), "edited by hand\n").unwrap();
    let err = GixStore::open(&ws, options("x")).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, StoreError::Refused { .. }), "{err:?}");
    assert!(text.contains("modified: targets/t/kernel.py"), "{text}");
    assert!(text.contains("hint: commit them"), "{text}");
    assert_eq!(
        std::fs::read_to_string(ws.join("targets/t/kernel.py")).unwrap(),
        "edited by hand\n"
    );

    // a staged change is refused too
    git(&ws, &["add", "targets/t/kernel.py"]);
    let text = GixStore::open(&ws, options("x")).unwrap_err().to_string();
    assert!(text.contains("staged: targets/t/kernel.py"), "{text}");
}

#[test]
fn a_live_owner_is_refused_and_a_dead_one_is_replaced() {
    let fx = Fixture::new();
    let ws = fx.ws();
    let store = fx.open("o");
    // a second store in the same process
    let text = GixStore::open(&ws, options("o")).unwrap_err().to_string();
    assert!(text.contains("already open in this process"), "{text}");
    drop(store);
    assert!(
        !ws.join(".autokernel/owner.pid").exists(),
        "pid file removed on drop"
    );

    // another live process
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    std::fs::write(
        ws.join(".autokernel/owner.pid"),
        format!("{}\n", child.id()),
    )
    .unwrap();
    let err = GixStore::open(&ws, options("o")).unwrap_err();
    assert!(matches!(err, StoreError::Refused { .. }));
    assert!(
        err.to_string()
            .contains(&format!("owned by process {}", child.id())),
        "{err}"
    );
    child.kill().unwrap();
    child.wait().unwrap();

    // now dead: the workspace is taken over
    let store = GixStore::open(&ws, options("o")).unwrap();
    assert_eq!(
        store.open_report().previous_dead_owner,
        Some(child.id() as i32)
    );
    assert_eq!(
        std::fs::read_to_string(ws.join(".autokernel/owner.pid"))
            .unwrap()
            .trim(),
        std::process::id().to_string()
    );
}

#[test]
fn a_run_tag_that_cannot_name_a_branch_is_refused() {
    let fx = Fixture::new();
    let err = GixStore::open(&fx.ws(), options("bad tag..")).unwrap_err();
    assert!(matches!(err, StoreError::Refused { .. }), "{err:?}");
    assert!(err.to_string().contains("`bad tag..`"), "{err}");
}

//! Each experiment's note keeps the configuration it measured, and the store gives it back.

use autokernel_core::pyliteral::{KernelConfig, PyValue};
use autokernel_core::{CommitId, Decision, ExperimentDraft, VersionStore};
use autokernel_vcs::GixStore;

use crate::support::*;

const BEFORE: &str = "KERNEL_KIND = \"softmax\"\nCONFIG = ";
const LITERAL: &str = "{'BLOCK_SIZE': 128, \"num_warps\": 4}";
const AFTER: &str = "  # launch\nTUNABLES = {\"BLOCK_SIZE\": [64, 128]}\n";

/// SHA-256 of `bytes`, by the `sha256sum` command: a reader independent of the code
/// under test.
fn sha256sum(bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bytes");
    std::fs::write(&path, bytes).unwrap();
    let out = std::process::Command::new("sha256sum")
        .arg(&path)
        .output()
        .expect("sha256sum runs");
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

async fn commit(store: &mut GixStore, n: u64, source: &str) -> CommitId {
    store
        .commit(&ExperimentDraft {
            experiment: n,
            target: &target("t"),
            description: &format!("experiment {n}"),
            agent: "tune",
            source,
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn a_note_with_a_configuration_reads_back_with_git_and_through_the_store() {
    let fx = Fixture::new();
    let ws = fx.ws();
    let mut store = fx.open("run1");
    let source = format!("{BEFORE}{LITERAL}{AFTER}");
    let c1 = commit(&mut store, 1, &source).await;
    let mut row = record(1, "t", &c1, Decision::Keep);
    row.config = KernelConfig::read(&source);
    store.keep(&row).await.unwrap();

    // the digest of the file with the literal cut out, the cut marked by a 0xFF byte
    let structure = sha256sum(&[BEFORE.as_bytes(), &[0xFF], AFTER.as_bytes()].concat());
    let note = git(&ws, &["notes", "--ref", "autokernel", "show", &c1.0]);
    assert!(
        note.contains(&format!(
            "\nkernel_config: {{\"BLOCK_SIZE\": 128, \"num_warps\": 4}}\nkernel_structure_sha256: {structure}\n"
        )),
        "{note}"
    );

    // a row read from results.tsv (no configuration there) gets it back
    let mut rows = vec![record(1, "t", &c1, Decision::Keep)];
    store.recall(&mut rows).await.unwrap();
    let config = rows[0].config.clone().expect("recalled from the note");
    assert_eq!(
        config.values,
        vec![
            ("BLOCK_SIZE".to_string(), PyValue::Int(128)),
            ("num_warps".to_string(), PyValue::Int(4)),
        ]
    );
    assert_eq!(config.structure, structure);
}

/// A workspace of an earlier autokernel: its notes say nothing of configurations, but
/// the commits still hold each kernel.py, which the store reads back.
#[tokio::test]
async fn an_old_note_gives_no_configuration_but_the_commit_still_gives_the_source() {
    let fx = Fixture::new();
    let ws = fx.ws();
    let mut store = fx.open("run1");
    let source = format!("{BEFORE}{LITERAL}{AFTER}");
    let c1 = commit(&mut store, 1, &source).await;
    store
        .keep(&record(1, "t", &c1, Decision::Keep))
        .await
        .unwrap();
    let old = "experiment: 1\ntarget: t\ndecision: keep\ncorrectness: PASS\nlatency_us: 99\n";
    git(
        &ws,
        &[
            "notes",
            "--ref",
            "autokernel",
            "add",
            "-f",
            "-m",
            old,
            &c1.0,
        ],
    );
    let mut rows = vec![record(1, "t", &c1, Decision::Keep)];
    store.recall(&mut rows).await.unwrap();
    assert_eq!(rows[0].config, None);
    assert_eq!(
        store.source_at("t", &c1).await.unwrap().as_deref(),
        Some(source.as_str())
    );
    // a commit the repository never had: nothing, not an error
    let unknown = CommitId("0".repeat(40));
    assert_eq!(store.source_at("t", &unknown).await.unwrap(), None);
}

/// Records the configurations of the history it is shown, then is done.
struct Probe(std::sync::Arc<std::sync::Mutex<Vec<Option<String>>>>);

#[async_trait::async_trait]
impl autokernel_core::Agent for Probe {
    fn name(&self) -> String {
        "probe".into()
    }
    async fn propose(
        &mut self,
        ctx: &autokernel_core::ProposalContext<'_>,
    ) -> Result<autokernel_core::Proposal, autokernel_core::AgentError> {
        *self.0.lock().unwrap() = ctx
            .history
            .iter()
            .map(|r| {
                r.config
                    .as_ref()
                    .map(|c| PyValue::Dict(c.values.clone()).to_string())
            })
            .collect();
        Ok(autokernel_core::Proposal::Exhausted)
    }
}

fn configured(block: i64, latency: f64) -> String {
    format!(
        "KERNEL_KIND = \"softmax\"\nCONFIG = {{\"BLOCK\": {block}}}\n# latency_us = {latency}\n"
    )
}

/// A workspace written before notes kept configurations (its notes rewritten here as an
/// earlier autokernel wrote them) resumes with each row's configuration read from the
/// kernel.py its commit holds.
#[tokio::test]
async fn a_workspace_whose_notes_predate_configurations_resumes_with_them() {
    use autokernel_core::testing::{FakeBenchmarker, ScriptedAgent};
    use autokernel_core::{Interrupt, LoopOptions, OptimizationLoop, ResultsLog};
    let fx = Fixture::new();
    let ws = fx.ws();
    let (two, four) = (configured(2, 80.0), configured(4, 90.0));
    let options = || LoopOptions::new(ws.join(".autokernel/scratch"));
    let commits: Vec<String> = {
        let mut l = OptimizationLoop::new(
            ScriptedAgent::candidates(&[("two", &two), ("four", &four)]),
            FakeBenchmarker::from_comments(),
            fx.open("old"),
            ResultsLog::open(ws.join("results.tsv")).unwrap(),
            options(),
        );
        l.run(vec![(target("t"), configured(1, 100.0))], &Interrupt::new())
            .await
            .unwrap();
        l.log()
            .rows()
            .iter()
            .map(|r| r.commit.clone().unwrap())
            .collect()
    };
    assert_eq!(commits.len(), 3);
    for c in &commits {
        let note = git(&ws, &["notes", "--ref", "autokernel", "show", c]);
        assert!(note.contains("kernel_config: "), "{note}");
        let old: String = note
            .lines()
            .filter(|l| !l.starts_with("kernel_"))
            .map(|l| format!("{l}\n"))
            .collect();
        git(
            &ws,
            &["notes", "--ref", "autokernel", "add", "-f", "-m", &old, c],
        );
    }
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut l = OptimizationLoop::new(
        Probe(seen.clone()),
        FakeBenchmarker::from_comments(),
        fx.open("old"),
        ResultsLog::open(ws.join("results.tsv")).unwrap(),
        options(),
    );
    l.run(vec![(target("t"), configured(1, 100.0))], &Interrupt::new())
        .await
        .unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        [
            Some("{\"BLOCK\": 1}".to_string()),
            Some("{\"BLOCK\": 2}".to_string()),
            Some("{\"BLOCK\": 4}".to_string()),
        ]
    );
}

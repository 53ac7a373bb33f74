//! Every starter passes every stage on the CPU (Triton's interpreter).

use autokernel_bench::PyWorkerBenchmarker;
use autokernel_core::{KernelKind, Stage};

use super::*;

#[tokio::test]
async fn every_starter_passes_all_stages_on_the_cpu() {
    let b = PyWorkerBenchmarker::with_worker(worker());
    for kind in KernelKind::ALL {
        let path = starter_path(kind.name());
        let r = bench(&b, &path, false, 300).await;
        assert!(
            r.correctness.is_pass(),
            "{kind}: {:?}\n{:#?}",
            r.correctness,
            r.stages
        );
        let stages: Vec<Stage> = r.stages.iter().map(|s| s.stage).collect();
        assert_eq!(
            stages,
            [
                Stage::Load,
                Stage::Smoke,
                Stage::ShapeSweep,
                Stage::Stability,
                Stage::Determinism,
                Stage::Edge,
                Stage::Timing,
                Stage::Integrity
            ],
            "{kind}"
        );
        let m = r.metrics.as_ref().expect("timed");
        assert!(m.latency_us > 0.0 && m.reference_latency_us > 0.0, "{m:?}");
        assert!(!r.timing_representative);
        assert_eq!(r.device, "cpu");
    }
}

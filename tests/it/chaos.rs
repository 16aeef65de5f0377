//! The short run of the chaos suite (issue 30): about 50 faults drawn from a fixed seed —
//! SIGKILL of a worker, `pg_terminate_backend`, a crash restart of the suite's own PostgreSQL
//! cluster, model answers stalled past the lease, 429s, 500s, cut streams — against 3 worker
//! processes and the API on a mixed workload; then every invariant must hold. The driver and
//! the invariants are `tests/chaos/` (`agentd bench chaos` runs the same with 1,000 faults and
//! more). `AGENTD_CHAOS_SEED=N` replays seed N; a failing run prints its seed.

#[path = "../chaos/mod.rs"]
mod suite;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_faults_leave_every_invariant_holding() {
    let seed = suite::seed_from_env(suite::DEFAULT_SEED);
    let opts = suite::Opts::short(env!("CARGO_BIN_EXE_agentd").into(), seed);
    let report = suite::run(&opts).await.expect("the chaos suite ran");
    report.print();
    assert!(
        report.total_faults >= 50,
        "faults injected: {}",
        report.total_faults
    );
    // The faults hit work in progress: runs were made, answers streamed, deliveries sent.
    assert!(report.model_answered > 0 && report.deliveries_received > 0);
    assert_eq!(
        report.violations(),
        0,
        "invariant violations with seed {seed}: replay with {}={seed}",
        suite::SEED_ENV
    );
}

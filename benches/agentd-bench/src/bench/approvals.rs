//! Approvals at scale: the expiry sweep over pending `update_document` approvals on real
//! documents (valid, expired, stale: the sweep recomputes every snapshot), and the nightly
//! fan-out of `proactive_suggestion` over many orgs.

use super::{Opts, Report, Row, Server, Target, bench_app};
use agentd::app::App;
use agentd::approvals::snapshot_hash;
use agentd::jobs::approval_expiry::ApprovalExpiry;
use agentd::queue::cron::{Scheduler, enqueue_tick};
use serde_json::{Value, json};
use std::time::Instant;
use uuid::Uuid;

const DB_SWEEP: &str = "agentd_bench_approvals";
const DB_FANOUT: &str = "agentd_bench_fanout";

/// The approvals part.
pub async fn run(
    server: &Server,
    app: &App,
    opts: &Opts,
    report: &mut Report,
) -> anyhow::Result<()> {
    let set_based = sweep(server, app, opts, false, None).await?;
    let one_worker = sweep(server, app, opts, false, Some(1)).await?;
    let row_by_row = sweep(server, app, opts, true, None).await?;
    let size = super::num(opts.size(100_000, 20_000) as f64);
    report.push(
        Row::new(
            "approvals",
            format!("expiry sweep over {size} pending"),
            set_based.0,
            "approvals/s",
        )
        .baseline("row by row", row_by_row.0)
        .target(Target::AtLeast(50_000.0))
        .note(format!(
            "set-based, {} workers (as configured): {}; row by row: {}",
            set_based.2, set_based.1, row_by_row.1
        )),
    );
    report.push(
        Row::new(
            "approvals",
            format!("expiry sweep over {size} pending, 1 worker"),
            one_worker.0,
            "approvals/s",
        )
        .baseline("row by row", row_by_row.0)
        .note(format!("set-based, one batch at a time: {}", one_worker.1)),
    );
    fan_out(server, app, report).await
}

/// `n` pending approvals over 2,000 documents in 10 orgs: 40% valid, 40% past their TTL, 20% on
/// documents changed after the proposal (half of those also past their TTL).
/// Approvals per second and what the sweep did; `row_by_row`: every approval through its tool
/// (the baseline of the set-based re-validation).
async fn sweep(
    server: &Server,
    app: &App,
    opts: &Opts,
    row_by_row: bool,
    workers: Option<u32>,
) -> anyhow::Result<(f64, String, u32)> {
    let n = opts.size(100_000, 20_000);
    let pool = server.agentd_db(DB_SWEEP, 8).await?;
    let bapp = bench_app(app, pool.clone());
    let mut docs: Vec<(Uuid, Uuid)> = Vec::new();
    for o in 0..10 {
        let org = agentd::store::orgs::ensure(&pool, &format!("bench-org-{o}")).await?;
        let ids: Vec<(Uuid, Uuid)> = sqlx::query_as(
            "INSERT INTO documents (id, org_id, name, text, metadata, created_at, updated_at)
             SELECT gen_random_uuid(), $1, 'doc-' || g || '.txt',
                    'Invoice Number: INV-' || g || E'\\nTotal: ' || (g * 7) || '.00 EUR', '{\"source\": \"bench\"}', now(), now()
               FROM generate_series(1, 200) g
             RETURNING id, org_id",
        )
        .bind(org.id)
        .fetch_all(&pool)
        .await?;
        docs.extend(ids);
    }
    // Snapshots as a proposal takes them: through the tool, with the document locked, and the
    // version of the row they were read from.
    let tool = bapp
        .registry
        .get("update_document")
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("no update_document tool"))?;
    let env = bapp.tool_env(bapp.spec("proactive_suggestion"));
    let now = bapp.clock.now();
    let mut snaps: Vec<(Value, Value, String, Option<i64>)> = Vec::new();
    let mut tx = pool.begin().await?;
    for (doc, org) in &docs {
        let args = json!({"document_id": doc, "metadata": {"reviewed": true}});
        let mut ctx = env.ctx(&mut tx, *org, None, "bench".into(), now);
        let snap = tool
            .snapshot(&mut ctx, &args)
            .await
            .ok_or_else(|| anyhow::anyhow!("update_document declares no snapshot"))?
            .map_err(|e| anyhow::anyhow!("snapshot: {e}"))?;
        let hash = snapshot_hash("update_document", &args, &snap);
        let version = agentd::store::documents::version(&mut tx, *org, *doc).await?;
        snaps.push((args, snap, hash, version));
    }
    tx.commit().await?;
    let changed_from = docs.len() * 4 / 5;
    let t_insert = Instant::now();
    let mut i = 0;
    while i < n {
        let k = (n - i).min(10_000);
        let (mut ids, mut orgs, mut args, mut snapshots, mut hashes, mut expires) = (
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
        );
        let mut versions = Vec::new();
        for j in i..i + k {
            let class = j % 10;
            let d = if class >= 8 {
                changed_from + j % (docs.len() - changed_from)
            } else {
                j % changed_from
            };
            let past = (4..=7).contains(&class) || class == 9;
            ids.push(Uuid::now_v7());
            orgs.push(docs[d].1);
            args.push(&snaps[d].0);
            snapshots.push(&snaps[d].1);
            hashes.push(snaps[d].2.as_str());
            versions.push(snaps[d].3);
            expires.push(if past {
                now - chrono::Duration::hours(1)
            } else {
                now + chrono::Duration::hours(4)
            });
        }
        sqlx::query(
            "INSERT INTO pending_approvals (id, org_id, tool, args, snapshot, snapshot_hash, created_at,
                 expires_at, repropose, chain_id, document_version)
             SELECT i, o, 'update_document', a, s, h, $7, e, true, i, v
               FROM unnest($1::uuid[], $2::uuid[], $3::jsonb[], $4::jsonb[], $5::text[], $6::timestamptz[],
                           $8::int8[])
                    AS t(i, o, a, s, h, e, v)",
        )
        .bind(&ids)
        .bind(&orgs)
        .bind(&args)
        .bind(&snapshots)
        .bind(&hashes)
        .bind(&expires)
        .bind(now - chrono::Duration::hours(5))
        .bind(&versions)
        .execute(&pool)
        .await?;
        i += k;
    }
    let changed: Vec<Uuid> = docs[changed_from..].iter().map(|(d, _)| *d).collect();
    sqlx::query(
        "UPDATE documents SET metadata = metadata || '{\"edited\": true}', updated_at = updated_at + interval '1 second'
          WHERE id = ANY($1)",
    )
    .bind(&changed)
    .execute(&pool)
    .await?;
    for table in ["pending_approvals", "documents"] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("VACUUM ANALYZE {table}")))
            .execute(&pool)
            .await?;
    }
    eprintln!(
        "bench:   inserted {n} approvals in {:.1}s",
        t_insert.elapsed().as_secs_f64()
    );

    let mut sweeper = ApprovalExpiry::sweeper(&bapp);
    sweeper.row_by_row = row_by_row;
    if let Some(w) = workers {
        sweeper.workers = w;
    }
    let workers = sweeper.workers;
    let batch = sweeper.batch;
    let t0 = Instant::now();
    let r = sweeper.run_once(None).await?;
    let secs = t0.elapsed().as_secs_f64();
    let left: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pending_approvals WHERE status = 'pending'")
            .fetch_one(&pool)
            .await?;
    pool.close().await;
    server.drop_db(DB_SWEEP).await?;
    Ok((
        r.checked as f64 / secs,
        format!(
            "{secs:.1}s, checked {}, expired {}, stale {}, re-proposals enqueued {}, still pending {left}, batch {batch}",
            r.checked, r.expired, r.stale, r.reproposals_enqueued
        ),
        workers,
    ))
}

async fn fan_out(server: &Server, app: &App, report: &mut Report) -> anyhow::Result<()> {
    let orgs = 10_000;
    let pool = server.agentd_db(DB_FANOUT, 16).await?;
    let bapp = bench_app(app, pool.clone());
    // An org's nightly job is due once its local hour reaches `nightly_hour` (02:00 by
    // default): hour 0 makes tonight's due whatever the time the bench runs.
    sqlx::query("INSERT INTO orgs (id, name, nightly_hour) SELECT gen_random_uuid(), 'bench-org-' || g, 0 FROM generate_series(1, $1) g")
        .bind(orgs as i64)
        .execute(&pool)
        .await?;
    sqlx::raw_sql("VACUUM ANALYZE orgs").execute(&pool).await?;
    let entry = bapp
        .cron_entries()
        .into_iter()
        .find(|e| e.fan_out.is_some())
        .ok_or_else(|| anyhow::anyhow!("no job kind with a fan-out schedule"))?;
    let spread_secs = bapp
        .catalog
        .get(&entry.kind)
        .and_then(|s| s.schedule.as_ref())
        .map_or(0, |s| s.spread_secs);
    let now = bapp.clock.now();
    let tick = Scheduler::latest_tick(&entry.schedule, now).unwrap_or(now);
    let t0 = Instant::now();
    let inserted = enqueue_tick(&pool, &entry, tick).await?;
    let first = t0.elapsed().as_secs_f64();
    anyhow::ensure!(
        inserted as u64 == orgs as u64,
        "the fan-out enqueued {inserted} jobs for {orgs} orgs"
    );
    let t1 = Instant::now();
    let again = enqueue_tick(&pool, &entry, tick).await?;
    let second = t1.elapsed().as_secs_f64();
    // The spread (`[schedule] spread_secs`): the most jobs due in one minute.
    let busiest: i64 = sqlx::query_scalar(
        "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM agentd_jobs
          WHERE kind = $1 GROUP BY date_trunc('minute', run_at)) m",
    )
    .bind(&entry.kind)
    .fetch_one(&pool)
    .await?;
    // The night itself: 100 orgs with a signal (a failed auto-create), every job due now, a
    // worker (offline provider) runs them all; only those 100 run the model.
    sqlx::query(
        "INSERT INTO documents (id, org_id, name, text, metadata, created_at, updated_at,
                                auto_create_status, auto_create_error)
         SELECT gen_random_uuid(), o.id, 'a.txt', 'Total: 1.00', '{}', now(), now(),
                'failed', 'provider down'
           FROM (SELECT id FROM orgs ORDER BY id LIMIT 100) o",
    )
    .execute(&pool)
    .await?;
    sqlx::query("UPDATE agentd_jobs SET run_at = now() WHERE kind = $1")
        .bind(&entry.kind)
        .execute(&pool)
        .await?;
    let stop = tokio_util::sync::CancellationToken::new();
    let t2 = Instant::now();
    let worker = bapp
        .start_worker(
            agentd::app::WorkerArgs::serving(&[entry.kind.as_str()], None),
            stop.clone(),
        )
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    let deadline = Instant::now() + std::time::Duration::from_secs(1800);
    loop {
        let left: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM agentd_jobs WHERE kind = $1 AND state IN ('available', 'running')",
        )
        .bind(&entry.kind)
        .fetch_one(&pool)
        .await?;
        if left == 0 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let night = t2.elapsed().as_secs_f64();
    stop.cancel();
    worker.join().await;
    let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM agent_runs")
        .fetch_one(&pool)
        .await?;
    let finished: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM agentd_jobs WHERE kind = $1 AND state = 'succeeded'",
    )
    .bind(&entry.kind)
    .fetch_one(&pool)
    .await?;
    pool.close().await;
    server.drop_db(DB_FANOUT).await?;
    report.push(
        Row::new(
            "approvals",
            "nightly jobs due in the busiest minute",
            busiest as f64,
            "jobs",
        )
        .note(format!(
            "{} orgs of one time zone, spread over {} s",
            super::num(orgs as f64),
            spread_secs
        )),
    );
    report.push(
        Row::new(
            "approvals",
            format!(
                "nightly run, {} orgs of which 100 with a signal: model runs",
                super::num(orgs as f64)
            ),
            runs as f64,
            "runs",
        )
        .note(format!(
            "{finished} jobs succeeded in {night:.1} s (offline provider); the others end at the overview"
        )),
    );
    report.push(
        Row::new(
            "approvals",
            format!(
                "nightly fan-out, {} orgs ({})",
                super::num(orgs as f64),
                entry.kind
            ),
            first,
            "s",
        )
        .note(format!("{inserted} jobs, one read and one insert")),
    );
    report.push(
        Row::new("approvals", "same tick again (a second node)", second, "s")
            .note(format!("{again} inserted (unique keys)")),
    );
    Ok(())
}

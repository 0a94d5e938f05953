//! The stack figures of BENCHMARKS.md (6–8), on the real release binaries: minato, two hashi
//! workers, aegis, mikado and `kura serve` as separate processes on one SQLite file and a
//! real nats-server. Prints a Markdown table.
//!
//! 6. Turn overhead: scripted provider (no model time), one read tool per turn, durable
//!    writes; turns/s with many sessions in flight, and per-turn p50/p99 one at a time —
//!    beside the storage floor measured in the same run (the same number of durable
//!    single-record commits on the same disk).
//! 7. Recovery: 1 000 turns submitted while NATS is down; time until all complete once NATS
//!    returns, and with NATS never returning (polling alone) — beside the same 1 000 with
//!    NATS up all along.
//! 8. Footprint: peak RSS of each daemon idle and after the load, and release binary sizes.
//! 9. The approval round trip: `aegis approve` started → the parked tool has run.
//! 10. The writ check: one-tool turns under a writ beside the same turns without one.
//! 11. Plans: N independent steps as a plan on two workers beside the same steps in a row.
//!
//! Run it with `./scripts/bench` (which builds the release binaries first), or
//! `cargo build --release --workspace && cargo bench -p kura-e2e --bench stack`.

mod common;

use std::time::{Duration, Instant};

use common::*;
use kura_testkit::bin;
use kura_testkit::wal;

/// One read tool, then the deliverable: the smallest turn that still runs a tool.
const SCRIPT: &str = r#"{"turns": [[
  {"tool": "fs.list", "args": {}},
  {"deliver": "listed: {instruction}"}
]]}"#;

/// p50 turn overhead (ms) of `n` one-tool turns without a writ and `n` under one, submitted
/// alternately to one stack.
fn writ_cost(n: usize) -> (f64, f64) {
    let mut s = kura_testkit::Stack::new(SCRIPT);
    let ana = s.new_approver("ana");
    let key: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&ana).expect("key")).expect("json");
    let public = key["public_key"].as_str().expect("public_key");
    s.extra_env = vec![
        ("KURA_NATS__MODE".into(), "external".into()),
        ("KURA_POLL_INTERVAL_MS".into(), "5000".into()),
        ("KURA_WORKER__LEASE_MS".into(), "30000".into()),
        ("RUST_LOG".into(), "warn".into()),
        (
            "KURA_WRITS__ISSUERS".into(),
            format!("[{{name = \"ana\", public_key = \"{public}\"}}]"),
        ),
    ];
    let out = std::process::Command::new(bin("kura"))
        .args([
            "writ",
            "grant",
            "--holder",
            "user:held",
            "--tool",
            "fs.*",
            "--tokens",
            "1000000000",
        ])
        .arg("--key")
        .arg(&ana)
        .arg("--sealer-key")
        .arg(s.nats.seed(kura_runtime::identity::Role::Operator))
        .arg("--db")
        .arg(&s.db)
        .env("KURA_WRITS__ISSUERS", &s.extra_env[4].1)
        .output()
        .expect("kura writ grant");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for d in DAEMONS {
        s.spawn(kura_testkit::stack::binary(d), d);
    }
    std::thread::sleep(Duration::from_secs(2));
    for i in 0..n {
        for who in ["user:free", "user:held"] {
            let r = s.submit_with(&format!("{who} {i}"), &["--author", who]);
            wait_all(&s, &[r], Duration::from_secs(60));
        }
    }
    let store = s.store();
    let mut stmt = store
        .conn()
        .prepare(
            "SELECT c.author_id, t.created_at, l.sealed_at FROM turns t
               JOIN ledgers l ON l.ledger_id = t.output_ledger_id
               JOIN requests q ON q.request_seq = t.request_seq
               JOIN records c ON c.record_id = q.record_id
              WHERE l.sealed_at IS NOT NULL",
        )
        .expect("prepare");
    let rows: Vec<(String, String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    let (mut free, mut held) = (Vec::new(), Vec::new());
    for (author, a, b) in rows {
        let Some(ms) = micros(&b)
            .zip(micros(&a))
            .map(|(b, a)| (b - a) as f64 / 1000.0)
        else {
            continue;
        };
        if author == "user:held" {
            held.push(ms)
        } else {
            free.push(ms)
        }
    }
    let refused: i64 = store
        .conn()
        .query_row(
            "SELECT count(*) FROM records WHERE record_type = 'sys.error'",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(refused, 0, "no call was refused: the writ allows them all");
    drop(stmt);
    s.shutdown_cleanly();
    (pct(&mut free, 0.5), pct(&mut held, 0.5))
}

fn writ_row((free, held): (f64, f64)) -> String {
    format!(
        "| the writ check: a one-tool turn under a writ (signature chain, scope, ceiling, budget checked and debited before the call) | p50 {held:.2} ms | the same turns interleaved, without a writ: p50 {free:.2} ms | {:.3} | <= 1.05 | {} |",
        held / free,
        if held / free <= 1.05 { "yes" } else { "no" }
    )
}

fn plan_row(reps: usize) -> String {
    let n = 8;
    let (planned, sequential) = common::plan::plan_wall(n, reps);
    let ratio = planned / sequential;
    format!(
        "| a plan of {n} independent one-tool steps on two workers, planning and join turns included ({} ms model time per answer; median of {reps}) | {planned:.0} ms | the same {n} steps as one session's sequential turns: {sequential:.0} ms | {ratio:.2} | <= 0.6 | {} |",
        common::plan::MODEL_MS,
        if ratio <= 0.6 { "yes" } else { "no" }
    )
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse. KURA_BENCH_QUICK=1: small sizes
    // (to check the harness, not to judge speed). KURA_BENCH_ONLY=writ: only the writ row.
    let quick = std::env::var_os("KURA_BENCH_QUICK").is_some();
    let scale = |n: usize| if quick { n / 10 } else { n };
    match std::env::var("KURA_BENCH_ONLY").as_deref() {
        Ok("writ") => {
            println!("{}", writ_row(writ_cost(scale(200))));
            return;
        }
        Ok("plan") => {
            println!("{}", plan_row(if quick { 1 } else { 5 }));
            return;
        }
        _ => {}
    }
    let mut rows: Vec<String> = Vec::new();

    // 6. Turn overhead.
    let mut s = stack(SCRIPT, 5_000);
    let idle: Vec<(String, (u64, u64))> =
        pids(&s).into_iter().map(|(n, p)| (n, rss_kib(p))).collect();
    let sequential = scale(200);
    // Each turn's durable commits, every process's, counted in the WAL (a window in which
    // the WAL restarted after a checkpoint is left out).
    let mut commits = Vec::new();
    for i in 0..sequential {
        let before = wal::mark(&s.db);
        let r = s.submit(&format!("one at a time {i}"));
        wait_all(&s, &[r], Duration::from_secs(60));
        // minato's completion commit follows the seal by a moment.
        std::thread::sleep(Duration::from_millis(30));
        commits.extend(wal::commits_between(before, wal::mark(&s.db)).map(|n| n as f64));
    }
    let commits_per_turn = pct(&mut commits, 0.5);
    let mut lat = turn_latencies_ms(&s);
    let (p50, p99) = (pct(&mut lat, 0.5), pct(&mut lat, 0.99));
    let per_turn_records = records_per_turn(&s, sequential);
    let floor = durable_commit_ms(s.dir.path());
    // Inside dispatch → seal are the worker's commits: all of the turn's but four — `minato
    // submit`, minato's acceptance (which dispatches), its completion and mikado's memory
    // of the turn (both after the seal). `tests/e2e/tests/commits.rs` pins the breakdown.
    let window_commits = (commits_per_turn - 4.0).max(1.0);
    // What a user waits for: `minato submit --wait`, the process started → the deliverable
    // printed (connecting to NATS, the commit, the turn, the answer).
    let mut waited = Vec::new();
    for i in 0..scale(50) {
        let t = Instant::now();
        let (status, _) = s.submit_and_wait(&format!("waited for {i}"));
        assert!(status.success(), "submit --wait failed\n{}", s.logs());
        waited.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let (w50, w99) = (pct(&mut waited, 0.5), pct(&mut waited, 0.99));
    let burst: usize = scale(1_000);
    let t = Instant::now();
    let requests = submit_many(&s, burst, "burst", true);
    wait_all(&s, &requests, Duration::from_secs(600));
    let turns_per_s = burst as f64 / t.elapsed().as_secs_f64();
    let loaded: Vec<(String, (u64, u64))> =
        pids(&s).into_iter().map(|(n, p)| (n, rss_kib(p))).collect();
    s.shutdown_cleanly();
    rows.push(format!(
        "| durable commits per one-tool turn, whole stack (median, counted in the WAL) | {commits_per_turn:.0} commits | records the turn leaves: {per_turn_records:.1} | {:.2} | hashi's share (all but submit, accept, completion, memory) <= 4 | {} |",
        commits_per_turn / per_turn_records,
        if window_commits <= 4.0 { "yes" } else { "no" }
    ));
    rows.push(format!(
        "| turn overhead, one at a time ({sequential} turns; dispatch → output sealed) | p50 {p50:.2} ms · p99 {p99:.2} ms | the {window_commits:.0} commits inside it × one durable commit ({floor:.2} ms) = {:.2} ms | {:.2} | - (held to 0.35 × LangGraph's fair turn in `--peers`; the commits are context) | - |",
        window_commits * floor,
        p50 / (window_commits * floor),
    ));
    rows.push(format!(
        "| `minato submit --wait`, process start → deliverable printed | p50 {w50:.1} ms · p99 {w99:.1} ms | the turn itself (dispatch → sealed): p50 {p50:.2} ms | {:.2} | - | - |",
        w50 / p50
    ));
    rows.push(format!(
        "| turn throughput, {burst} sessions in flight, 2 hashi workers | {turns_per_s:.0} turns/s | one process doing only the turn's durable commits one by one: {:.0} turns/s | {:.2} | - | - |",
        1000.0 / (commits_per_turn * floor),
        turns_per_s / (1000.0 / (commits_per_turn * floor))
    ));

    // The same turns without an fsync per commit (synchronous=normal: survives kill -9, not
    // a power cut): what the orchestration itself costs once the disk is out of the way.
    let mut s = stack_with(SCRIPT, 5_000, "normal");
    for i in 0..sequential {
        let r = s.submit(&format!("normal sync {i}"));
        wait_all(&s, &[r], Duration::from_secs(60));
    }
    let mut lat = turn_latencies_ms(&s);
    let (n50, n99) = (pct(&mut lat, 0.5), pct(&mut lat, 0.99));
    s.shutdown_cleanly();
    rows.push(format!(
        "| turn overhead with synchronous=normal (no fsync per commit; survives kill -9, not power loss) | p50 {n50:.2} ms · p99 {n99:.2} ms | the same turns with synchronous=full: p50 {p50:.2} ms | {:.2} | p50 <= 2 ms | {} |",
        n50 / p50,
        if n50 <= 2.0 { "yes" } else { "no" }
    ));

    // 10. The writ check: the same one-tool turns, alternately submitted by a holder of a
    // writ (every call checked against it and debited) and by someone without one.
    rows.push(writ_row(writ_cost(sequential)));

    // 11. Plans: eight independent steps on two workers against the same steps in a row.
    rows.push(plan_row(if quick { 1 } else { 5 }));

    // 9. The approval round trip (before recovery, which leaves NATS restarted).
    let ap = approval_round_trip(scale(30).max(5));
    let ((a50, a99), look, (c50, c99)) = (ap.cli, ap.look, ap.console);
    rows.push(format!(
        "| approval round trip: `aegis approve` started → the parked tool has run | p50 {a50:.1} ms · p99 {a99:.1} ms | the same CLI doing only `aegis pending` (start, TLS, login, one signed reply): p50 {look:.1} ms | {:.2} | - (context: a fresh process pays its start and login; the console figure below is held) | - |",
        a50 / look,
    ));
    rows.push(format!(
        "| approval round trip from the console: a logged-in page's signed decision posted → the parked tool has run | p50 {c50:.1} ms · p99 {c99:.1} ms | `aegis approve` from a fresh process, same turns interleaved: p50 {a50:.1} ms | {:.2} | p50 <= 5 ms | {} |",
        c50 / a50,
        if c50 <= 5.0 { "yes" } else { "no" }
    ));

    // 7. Recovery. Healthy baseline first, then NATS down while the work arrives.
    let n = scale(1_000);
    let mut s = stack(SCRIPT, 5_000);
    let t = Instant::now();
    let reqs = submit_many(&s, n, "healthy", true);
    wait_all(&s, &reqs, Duration::from_secs(600));
    let healthy = t.elapsed();
    s.nats.kill();
    let reqs = submit_many(&s, n, "outage", false);
    let down_for = Duration::from_secs(3);
    std::thread::sleep(down_for);
    s.nats.restart();
    let t = Instant::now();
    wait_all(&s, &reqs, Duration::from_secs(600));
    let after_return = t.elapsed();
    s.nats.kill();
    let t = Instant::now();
    let reqs = submit_many(&s, n, "no nats", false);
    wait_all(&s, &reqs, Duration::from_secs(900));
    let polling = t.elapsed();
    s.nats.restart();
    s.shutdown_cleanly();
    rows.push(format!(
        "| recovery: {n} turns submitted while NATS is down ({}s), time to all complete after it returns | {:.1} s | the same {n} with NATS up all along: {:.1} s | {:.2} | - | - |",
        down_for.as_secs(),
        after_return.as_secs_f64(),
        healthy.as_secs_f64(),
        after_return.as_secs_f64() / healthy.as_secs_f64()
    ));
    rows.push(format!(
        "| recovery: {n} turns with NATS never returning (polling alone, 5 s interval) | {:.1} s | the same {n} with NATS up all along: {:.1} s | {:.2} | all complete | yes |",
        polling.as_secs_f64(),
        healthy.as_secs_f64(),
        polling.as_secs_f64() / healthy.as_secs_f64()
    ));

    // 8. Footprint.
    for ((name, (_, idle_rss)), (_, (peak, _))) in idle.iter().zip(loaded.iter()) {
        let mb = |k: u64| k as f64 / 1024.0;
        rows.push(format!(
            "| peak RSS of {name} (idle → after {} turns) | {:.1} MiB → {:.1} MiB | - | - | <= 20 MiB | {} |",
            sequential + burst,
            mb(*idle_rss),
            mb(*peak),
            if mb(*peak) <= 20.0 { "yes" } else { "no" }
        ));
    }
    let mut sizes = Vec::new();
    for b in ["kura", "minato", "hashi", "aegis", "mikado"] {
        let x86 = std::fs::metadata(bin(b)).map(|m| m.len()).unwrap_or(0);
        let arm = std::fs::metadata(
            bin(b)
                .parent()
                .and_then(|p| p.parent())
                .map(|t| t.join("aarch64-unknown-linux-gnu/release").join(b))
                .unwrap_or_default(),
        )
        .map(|m| format!(", aarch64 {:.1} MiB", m.len() as f64 / 1048576.0))
        .unwrap_or_default();
        sizes.push(format!("{b} {:.1} MiB{arm}", x86 as f64 / 1048576.0));
    }
    rows.push(format!(
        "| release binary sizes (x86-64{}) | {} | - | - | - | - |",
        if sizes.iter().any(|s| s.contains("aarch64")) {
            ", aarch64"
        } else {
            ""
        },
        sizes.join("; ")
    ));
    println!("| figure | Kura | baseline (same run) | ratio | target | met |");
    println!("|---|---|---|---|---|---|");
    for r in rows {
        println!("{r}");
    }
}

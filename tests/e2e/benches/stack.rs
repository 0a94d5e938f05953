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
//!
//! Run it with `./scripts/bench` (which builds the release binaries first), or
//! `cargo build --release --workspace && cargo bench -p kura-e2e --bench stack`.

use std::time::{Duration, Instant};

use kura_runtime::identity::Role;
use kura_store::work::request_status;
use kura_testkit::bin;
use kura_testkit::stack::{self, Stack};
use kura_testkit::wal;

/// One read tool, then the deliverable: the smallest turn that still runs a tool.
const SCRIPT: &str = r#"{"turns": [[
  {"tool": "fs.list", "args": {}},
  {"deliver": "listed: {instruction}"}
]]}"#;

const DAEMONS: [&str; 6] = ["minato", "hashi-1", "hashi-2", "aegis", "mikado", "serve"];

/// A stack of the six daemons; `poll_ms` is their polling interval.
fn stack(poll_ms: u64) -> Stack {
    stack_with(poll_ms, "full")
}

/// [`stack`] with a chosen `synchronous` setting for every daemon.
fn stack_with(poll_ms: u64, synchronous: &str) -> Stack {
    let mut s = Stack::new(SCRIPT);
    s.extra_env = vec![
        ("KURA_SYNCHRONOUS".into(), synchronous.into()),
        ("KURA_NATS__MODE".into(), "external".into()),
        ("KURA_POLL_INTERVAL_MS".into(), poll_ms.to_string()),
        ("KURA_WORKER__LEASE_MS".into(), "30000".into()),
        ("RUST_LOG".into(), "warn".into()),
    ];
    for d in DAEMONS {
        s.spawn(stack::binary(d), d);
    }
    // The logs are at warn level: give the daemons a moment to connect instead.
    std::thread::sleep(Duration::from_secs(2));
    s
}

/// Unix microseconds of a stored RFC 3339 time (`2026-11-22T01:02:03.456789Z`).
fn micros(t: &str) -> Option<i64> {
    let secs = kura_store::time::unix_seconds(t)?;
    let frac: i64 = t.get(20..26)?.parse().ok()?;
    Some(i64::try_from(secs).ok()? * 1_000_000 + frac)
}

/// Per-turn latency: turn row created (dispatch) → its output ledger sealed.
fn turn_latencies_ms(s: &Stack) -> Vec<f64> {
    let store = s.store();
    let mut stmt = store
        .conn()
        .prepare(
            "SELECT t.created_at, l.sealed_at FROM turns t
             JOIN ledgers l ON l.ledger_id = t.output_ledger_id WHERE l.sealed_at IS NOT NULL",
        )
        .expect("prepare");
    let rows: Vec<(String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    rows.iter()
        .filter_map(|(a, b)| Some((micros(b)? - micros(a)?) as f64 / 1000.0))
        .collect()
}

fn pct(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v.get(i).copied().unwrap_or(f64::NAN)
}

/// Submits `n` requests in this process (one durable transaction each, as `minato submit`
/// does) and, if NATS is up, rings minato once: a doorbell only wakes it, and it takes every
/// pending request from SQLite.
fn submit_many(s: &Stack, n: usize, prefix: &str, ring: bool) -> Vec<i64> {
    let mut store = s.store();
    let mut last = None;
    let out = (0..n)
        .map(|i| {
            let r =
                kura_store::work::submit(&mut store, &format!("{prefix} {i}"), "user:bench", None)
                    .expect("submit");
            last = Some(r.record_id);
            r.request_seq
        })
        .collect();
    if let (true, Some(record_id)) = (ring, last) {
        let nats = &s.nats;
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(async {
            let c = nats
                .client(kura_runtime::identity::Role::Submit)
                .await
                .expect("connect");
            let msg = proto::doorbell::SessionCreate {
                record_id,
                session_id: None,
            };
            c.publish(
                "oclaw.v1.minato.cmd.session.create",
                serde_json::to_vec(&msg).expect("json").into(),
            )
            .await
            .expect("publish");
            c.flush().await.expect("flush");
        });
    }
    out
}

fn wait_all(s: &Stack, requests: &[i64], timeout: Duration) -> Duration {
    let store = s.store();
    let start = Instant::now();
    let mut pending: Vec<i64> = requests.to_vec();
    while !pending.is_empty() {
        pending.retain(|r| {
            !request_status(store.conn(), *r)
                .map(|st| st.complete)
                .unwrap_or(false)
        });
        assert!(
            start.elapsed() < timeout,
            "{} requests did not complete\n{}",
            pending.len(),
            s.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    start.elapsed()
}

/// Peak and current RSS (KiB) of a process, from /proc.
fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

fn pids(s: &Stack) -> Vec<(String, u32)> {
    s.children
        .iter()
        .map(|(n, c)| (n.clone(), c.id()))
        .collect()
}

/// The storage floor: one durable single-record commit on the same disk, in ms.
fn durable_commit_ms(dir: &std::path::Path) -> f64 {
    let path = dir.join("floor.db");
    let mut store =
        kura_store::Store::create(&path, &kura_store::StoreOptions::default()).expect("db");
    let session = store.create_session("floor").expect("session");
    let ledger = store
        .open_ledger(session.session_id, "floor", &[])
        .expect("ledger")
        .ledger_id;
    let n = 300;
    let t = Instant::now();
    for i in 0..n {
        let r = proto::record::NewRecord::new(
            proto::record::RecordType::AgentThought,
            proto::record::Content::text(format!("floor {i}")),
            "agent:bench",
        );
        store.append(ledger, &r).expect("append");
    }
    t.elapsed().as_secs_f64() * 1000.0 / f64::from(n)
}

/// Durable transactions one turn costs, counted from what it left in the store: the turn's
/// records (context and output) plus a handful of row updates (claim, approval, completion).
fn records_per_turn(s: &Stack, turns: usize) -> f64 {
    let n: i64 = s
        .store()
        .conn()
        .query_row("SELECT count(*) FROM ledger_records", [], |r| r.get(0))
        .expect("count");
    n as f64 / turns.max(1) as f64
}

/// A write policy sends to a person; the deliverable follows the write.
const ASK_SCRIPT: &str = r#"{"turns": [[
  {"tool": "fs.write", "args": {"path": "notes/plan.md", "content": "approved"}},
  {"deliver": "wrote the plan"}
]]}"#;

/// `aegis <args>` as the approver `oles` on a laptop would run it; returns its exit code.
fn aegis_as(s: &Stack, args: &[&str]) -> i32 {
    std::process::Command::new(bin("aegis"))
        .args(args)
        .env("KURA_NATS_URL", s.nats.url())
        .env("KURA_NATS_CA", s.nats.ca())
        .env("KURA_AEGIS__REPLY_KEY", s.nats.nkey(Role::Aegis))
        .env("KURA_AEGIS_KEY", s.path("oles.key"))
        .output()
        .map(|o| o.status.code().unwrap_or(-1))
        .unwrap_or(-1)
}

/// Polls SQLite every millisecond until `f` answers.
fn poll<T>(s: &Stack, mut f: impl FnMut(&rusqlite::Connection) -> Option<T>) -> T {
    let store = s.store();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = f(store.conn()) {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out\n{}", s.logs());
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Figure 9, the human-approval round trip: a parked `fs.write`, then `aegis approve`
/// started → the tool has run (its result committed). Beside it, the same CLI doing only a
/// round trip (`aegis pending`: process start, TLS, nkey login, one signed reply).
fn approval_round_trip(turns: usize) -> (f64, f64, f64) {
    let mut s = Stack::new(ASK_SCRIPT);
    std::fs::write(
        s.path("policy.toml"),
        "[[rules]]\nname = \"a-person-decides\"\ntool = \"fs.write\"\ndecision = \"ask\"\n",
    )
    .expect("policy");
    let key = s.path("oles.key");
    let made = std::process::Command::new(bin("aegis"))
        .args(["keygen", "--name", "oles", "--key"])
        .arg(&key)
        .output()
        .expect("keygen");
    assert!(made.status.success());
    s.add_approver("oles", &key);
    let k: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&key).expect("key")).expect("json");
    s.extra_env = vec![
        (
            "KURA_AEGIS__APPROVERS".into(),
            format!(
                "[{{ name = \"oles\", public_key = \"{}\" }}]",
                k["public_key"].as_str().expect("public key")
            ),
        ),
        ("KURA_WORKER__LEASE_MS".into(), "30000".into()),
        ("RUST_LOG".into(), "warn".into()),
    ];
    for d in ["aegis", "minato", "hashi"] {
        s.spawn(stack::binary(d), d);
    }
    std::thread::sleep(Duration::from_secs(2));
    let (mut approve, mut look) = (Vec::new(), Vec::new());
    for i in 0..turns {
        let r = s.submit(&format!("plan {i}"));
        let (request, call) = poll(&s, |c| {
            c.query_row(
                "SELECT request_id, call_id FROM approvals WHERE state = 'asked'",
                [],
                |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)),
            )
            .ok()
        });
        let t = Instant::now();
        assert_eq!(aegis_as(&s, &["pending", "--json"]), 0);
        look.push(t.elapsed().as_secs_f64() * 1000.0);
        let t = Instant::now();
        assert_eq!(aegis_as(&s, &["approve", &request]), 0, "{}", s.logs());
        poll(&s, |c| {
            c.query_row(
                "SELECT 1 FROM records WHERE record_type = 'tool.result'
                   AND json_extract(content, '$.call_id') = ?1",
                [&call],
                |_| Ok(()),
            )
            .ok()
        });
        approve.push(t.elapsed().as_secs_f64() * 1000.0);
        wait_all(&s, &[r], Duration::from_secs(60));
    }
    s.shutdown_cleanly();
    let (a50, a99) = (pct(&mut approve, 0.5), pct(&mut approve, 0.99));
    (a50, a99, pct(&mut look, 0.5))
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse. KURA_BENCH_QUICK=1: small sizes
    // (to check the harness, not to judge speed).
    let quick = std::env::var_os("KURA_BENCH_QUICK").is_some();
    let scale = |n: usize| if quick { n / 10 } else { n };
    let mut rows: Vec<String> = Vec::new();

    // 6. Turn overhead.
    let mut s = stack(5_000);
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
        "| turn overhead, one at a time ({sequential} turns; dispatch → output sealed) | p50 {p50:.2} ms · p99 {p99:.2} ms | the {window_commits:.0} commits inside it × one durable commit ({floor:.2} ms) = {:.2} ms | {:.2} | <= 1.2 | {} |",
        window_commits * floor,
        p50 / (window_commits * floor),
        if p50 <= 1.2 * window_commits * floor { "yes" } else { "no" }
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
    let mut s = stack_with(5_000, "normal");
    for i in 0..sequential {
        let r = s.submit(&format!("normal sync {i}"));
        wait_all(&s, &[r], Duration::from_secs(60));
    }
    let mut lat = turn_latencies_ms(&s);
    let (n50, n99) = (pct(&mut lat, 0.5), pct(&mut lat, 0.99));
    s.shutdown_cleanly();
    rows.push(format!(
        "| turn overhead with synchronous=normal (no fsync per commit; survives kill -9, not power loss) | p50 {n50:.2} ms · p99 {n99:.2} ms | the same turns with synchronous=full: p50 {p50:.2} ms | {:.2} | p50 <= 3 ms | {} |",
        n50 / p50,
        if n50 <= 3.0 { "yes" } else { "no" }
    ));

    // 9. The approval round trip (before recovery, which leaves NATS restarted).
    let (a50, a99, look) = approval_round_trip(scale(30).max(5));
    rows.push(format!(
        "| approval round trip: `aegis approve` started → the parked tool has run | p50 {a50:.1} ms · p99 {a99:.1} ms | the same CLI doing only `aegis pending` (start, TLS, login, one signed reply): p50 {look:.1} ms | {:.2} | p50 <= 5 ms | {} |",
        a50 / look,
        if a50 <= 5.0 { "yes" } else { "no" }
    ));

    // 7. Recovery. Healthy baseline first, then NATS down while the work arrives.
    let n = scale(1_000);
    let mut s = stack(5_000);
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

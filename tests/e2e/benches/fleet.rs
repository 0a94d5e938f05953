//! The fleet figures of BENCHMARKS.md, on the release binaries, through a real 3-node
//! JetStream hub with each Pi's bus joined as a leaf node:
//! - replication lag, from a ledger sealed on Pi A to it verified in B's replica, beside a
//!   bare JetStream publish → consume of a body of the same size over the same path (two
//!   leaf-node buses and the R3 hub), measured in the same run;
//! - restore throughput (records ingested and verified per second) beside a local group
//!   commit of the same records;
//! - the hub nodes' memory, and many simulated Pis publishing at once: the hub's CPU,
//!   memory and disk per Pi, from which BENCHMARKS.md works out how many Pis one hub holds.
//!
//! Run it with `./scripts/bench`, or `cargo build --release --workspace && cargo bench -p
//! kura-e2e --bench fleet`.

mod common;

use std::time::{Duration, Instant};

use async_nats::jetstream;
use common::{pct, rss_kib};
use futures::StreamExt;
use kura_runtime::identity::Role;
use kura_store::{Store, StoreOptions};
use kura_testkit::NatsServer;
use kura_testkit::hub::{FleetPi, Hub};
use proto::fleet::{self, ReplMessage, ReplRecord};
use proto::record::{NewRecord, RecordType};

/// Records per ledger and bytes per record: an agent turn's output (thoughts, a call, its
/// result, the deliverable).
const RECORDS: usize = 10;
const BYTES: usize = 300;

fn record(i: usize, j: usize) -> NewRecord {
    NewRecord {
        record_type: RecordType::AgentThought,
        content: serde_json::json!({"text": format!("step {j} of ledger {i}: {}", "x".repeat(BYTES))}),
        author_id: "agent:bench".into(),
        metadata: Default::default(),
    }
}

/// Appends and seals one ledger of [`RECORDS`] records in its own transaction.
fn seal_one(store: &mut Store, session: proto::SessionId, i: usize) {
    let l = store
        .open_ledger(session, &format!("l{i}"), &[])
        .expect("open");
    let batch: Vec<NewRecord> = (0..RECORDS).map(|j| record(i, j)).collect();
    store.append_batch(l.ledger_id, &batch).expect("append");
    store.seal_ledger(l.ledger_id).expect("seal");
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Bare JetStream: a body the size of a ledger's records and ledger published on one Pi's
/// bus, consumed on another's, through the hub (ms per message, publish to arrival).
fn bare(hub: &Hub, n: usize) -> Vec<f64> {
    let mut x = NatsServer::start();
    x.set_hub(Some(hub.link("pi-x")));
    x.restart();
    let mut y = NatsServer::start();
    y.set_hub(Some(hub.link("pi-y")));
    y.restart();
    let body = vec![b'x'; RECORDS * (BYTES + 150)];
    rt().block_on(async {
        let js_x = jetstream::with_domain(x.client(Role::Serve).await.expect("x"), fleet::DOMAIN);
        let js_y = jetstream::with_domain(y.client(Role::Serve).await.expect("y"), fleet::DOMAIN);
        let stream = js_y
            .get_stream(fleet::stream("pi-x"))
            .await
            .expect("stream");
        let consumer = stream
            .create_consumer(jetstream::consumer::pull::OrderedConfig {
                filter_subject: fleet::record_subject("pi-x"),
                deliver_policy: jetstream::consumer::DeliverPolicy::New,
                ..Default::default()
            })
            .await
            .expect("consumer");
        let mut messages = consumer.messages().await.expect("messages");
        let mut out = Vec::new();
        for i in 0..n + 10 {
            let t = Instant::now();
            js_x.publish(fleet::record_subject("pi-x"), body.clone().into())
                .await
                .expect("publish")
                .await
                .expect("ack");
            messages.next().await.expect("message").expect("ok");
            if i >= 10 {
                out.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        out
    })
}

/// Seal on A → verified on B, one ledger at a time (ms).
fn lag(a: &FleetPi, b: &FleetPi, n: usize) -> Vec<f64> {
    let mut store = a.s.store();
    let session = store.create_session("lag").expect("session").session_id;
    let replica = b.replica_path("pi-a");
    let mut out = Vec::new();
    // The first ledger makes the replica; after it, one open handle polls it (each poll is a
    // fresh read of the seal log's last leaf, a few microseconds).
    let mut r: Option<Store> = None;
    for i in 0..n + 10 {
        let want = a.size() + 1;
        seal_one(&mut store, session, i);
        // From the moment the seal is committed on A.
        let t = Instant::now();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if r.is_none() && replica.exists() {
                r = Store::open(&replica, &StoreOptions::default()).ok();
            }
            if r.as_ref()
                .is_some_and(|r| kura_tlog::seallog::size(&r.seal_log()).unwrap_or(0) >= want)
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "ledger {i} never reached B\n{}",
                b.s.log("serve")
            );
            std::thread::sleep(Duration::from_micros(100));
        }
        if i >= 10 {
            out.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    out
}

/// The same `ledgers` ledgers written locally, 256 per transaction (records/s).
fn local_group_commit(ledgers: usize) -> f64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store =
        Store::create(dir.path().join("g.db"), &StoreOptions::default()).expect("create");
    let session = store.create_session("group").expect("session").session_id;
    let t = Instant::now();
    for chunk in (0..ledgers).collect::<Vec<_>>().chunks(256) {
        store
            .write(|tx| {
                for &i in chunk {
                    let l = tx.open_ledger(session, &format!("l{i}"), &[])?;
                    for j in 0..RECORDS {
                        tx.append(l.ledger_id, &record(i, j))?;
                    }
                    tx.seal(l.ledger_id, None)?;
                }
                Ok(())
            })
            .expect("group");
    }
    (ledgers * RECORDS) as f64 / t.elapsed().as_secs_f64()
}

/// CPU seconds a process has used (user + system).
fn cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // Fields 14 and 15 (utime, stime) are the 12th and 13th after the command.
    (ticks(11) + ticks(12)) / 100.0
}

fn du(path: &std::path::Path) -> u64 {
    walk(path)
}

fn walk(p: &std::path::Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(p) else {
        return 0;
    };
    if meta.is_dir() {
        std::fs::read_dir(p)
            .map(|d| d.flatten().map(|e| walk(&e.path())).sum())
            .unwrap_or(0)
    } else {
        meta.len()
    }
}

/// `pis` simulated Pis, each sealing one ledger of [`RECORDS`] records every `every`, for
/// `secs`: the hub's CPU (s/s), memory (KiB) and disk (bytes/s) while they run.
fn simulate(hub: &Hub, pis: usize, every: Duration, secs: u64) -> Sim {
    let pids: Vec<u32> = (0..hub.nodes).filter_map(|n| hub.pid(n)).collect();
    let cpu0: f64 = pids.iter().map(|&p| cpu_s(p)).sum();
    let disk0 = du(hub.dir.path());
    let stored0 = stored_bytes(hub);
    rt().block_on(async {
        let js = jetstream::with_domain(hub.admin(0).await, fleet::DOMAIN);
        let names: Vec<String> = (0..pis).map(|p| format!("sim-{p}")).collect();
        let quota = kura_fleet::hub::Quota {
            replicas: usize::from(hub.nodes),
            bytes_per_pi: 16 << 20,
        };
        kura_fleet::hub::setup(&js, &names, quota)
            .await
            .expect("simulated Pis' streams");
    });
    let t = Instant::now();
    let sent = rt().block_on(async {
        let mut tasks = Vec::new();
        for p in 0..pis {
            let client = hub.admin((p % hub.nodes as usize) as u16).await;
            tasks.push(tokio::spawn(async move {
                let name = format!("sim-{p}");
                let js = jetstream::with_domain(client, fleet::DOMAIN);
                let kv = js
                    .get_key_value(fleet::CHECKPOINTS_BUCKET)
                    .await
                    .expect("kv");
                let mut tick = tokio::time::interval(every);
                let deadline = Instant::now() + Duration::from_secs(secs);
                let mut n = 0u64;
                // Spread the Pis over the interval.
                tokio::time::sleep(every.mul_f64(p as f64 / pis.max(1) as f64)).await;
                while Instant::now() < deadline {
                    tick.tick().await;
                    let mut acks = Vec::new();
                    for j in 0..RECORDS {
                        let body = serde_json::to_vec(&ReplMessage::Record(ReplRecord {
                            columns: proto::OwnedColumns {
                                record_id: uuid::Uuid::now_v7().to_string(),
                                hash: format!("{:064x}", n * 100 + j as u64),
                                record_type: "agent.thought".into(),
                                content: format!("{{\"text\":\"{}\"}}", "x".repeat(BYTES)),
                                author_id: "agent:sim".into(),
                                metadata: "{}".into(),
                                created_at: "2026-11-26T00:00:00.000000Z".into(),
                            },
                            redacted: None,
                        }))
                        .expect("json");
                        acks.push(
                            js.publish(fleet::record_subject(&name), body.into())
                                .await
                                .expect("publish"),
                        );
                    }
                    for a in acks {
                        a.await.expect("ack");
                    }
                    let ledger = vec![b'l'; 1100];
                    js.publish(fleet::ledger_subject(&name), ledger.into())
                        .await
                        .expect("publish")
                        .await
                        .expect("ack");
                    kv.put(&name, vec![b'c'; 300].into())
                        .await
                        .expect("checkpoint");
                    n += 1;
                }
                n
            }));
        }
        let mut total = 0;
        for t in tasks {
            total += t.await.expect("task");
        }
        total
    });
    let elapsed = t.elapsed().as_secs_f64();
    let cpu: f64 = pids.iter().map(|&p| cpu_s(p)).sum::<f64>() - cpu0;
    let rss: u64 = pids.iter().map(|&p| rss_kib(p).1).sum();
    Sim {
        pis,
        cpu: cpu / elapsed,
        rss_kib: rss,
        disk: du(hub.dir.path()).saturating_sub(disk0) as f64 / elapsed,
        stored: stored_bytes(hub).saturating_sub(stored0) as f64 / elapsed,
        sent,
    }
}

/// What one run of simulated Pis cost the hub.
struct Sim {
    pis: usize,
    /// CPU seconds per second, all nodes.
    cpu: f64,
    /// RSS of all nodes after the run.
    rss_kib: u64,
    /// Bytes per second the nodes' directories grew (every copy, files as allocated).
    disk: f64,
    /// Bytes per second the stream and buckets grew (one copy, as JetStream counts them).
    stored: f64,
    sent: u64,
}

/// Bytes in the stream and both buckets (one copy).
fn stored_bytes(hub: &Hub) -> u64 {
    rt().block_on(async {
        let js = jetstream::with_domain(hub.admin(0).await, fleet::DOMAIN);
        let mut names = js.stream_names();
        let mut total = 0;
        while let Some(Ok(name)) = names.next().await {
            if let Ok(mut s) = js.get_stream(&name).await
                && let Ok(info) = s.info().await
            {
                total += info.state.bytes;
            }
        }
        total
    })
}

fn main() {
    let quick = std::env::var_os("KURA_BENCH_QUICK").is_some();
    let (n, ledgers) = if quick { (40, 200) } else { (200, 2000) };
    let hub = Hub::start(3, &["pi-a", "pi-b", "pi-x", "pi-y"]);
    let hub_base: u64 = (0..3)
        .filter_map(|n| hub.pid(n))
        .map(|p| rss_kib(p).1)
        .sum();

    let mut bare_ms = bare(&hub, n);

    let mut a = FleetPi::new("pi-a", &hub, r#"{"turns": [[{"deliver": "unused"}]]}"#);
    let mut b = FleetPi::new("pi-b", &hub, r#"{"turns": [[{"deliver": "unused"}]]}"#);
    a.configure(&[]);
    b.configure(&[&a]);
    for p in [&mut a, &mut b] {
        p.s.extra_env.push((
            "RUST_LOG".into(),
            std::env::var("KURA_BENCH_FLEET_LOG").unwrap_or_else(|_| "warn".into()),
        ));
        p.s.keep_files = std::env::var_os("KURA_BENCH_FLEET_LOG").is_some();
        p.s.spawn("kura", "serve");
    }
    std::thread::sleep(Duration::from_secs(2));
    let mut lag_ms = lag(&a, &b, n);

    // A backlog of `ledgers` sealed at once: replicated, then restored from the hub.
    let mut store = a.s.store();
    let session = store.create_session("backlog").expect("session").session_id;
    let t = Instant::now();
    for i in 0..ledgers {
        seal_one(&mut store, session, i);
    }
    b.wait_replica(&a, "the backlog");
    let replicated = (ledgers * RECORDS) as f64 / t.elapsed().as_secs_f64();
    let total_records: i64 = store
        .conn()
        .query_row("SELECT count(*) FROM records", [], |r| r.get(0))
        .expect("count");
    let fresh = tempfile::tempdir().expect("tempdir");
    let to = fresh.path().join("restored.db");
    let t = Instant::now();
    let out = a.kura(&[
        "fleet",
        "restore",
        "pi-a",
        "--log-verifier",
        &a.log_vkey,
        "--to",
        to.to_str().expect("utf8"),
        "--url",
        &hub.url(),
        "--seed",
        hub.admin_seed().to_str().expect("utf8"),
        "--ca",
        hub.ca().to_str().expect("utf8"),
    ]);
    assert!(
        out.status.success(),
        "restore: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let restore = total_records as f64 / t.elapsed().as_secs_f64();
    let group = local_group_commit(ledgers);
    let hub_after: Vec<(u64, u64)> = (0..3).filter_map(|n| hub.pid(n)).map(rss_kib).collect();
    if a.s.keep_files {
        eprintln!(
            "logs kept: {} {}",
            a.s.dir.path().display(),
            b.s.dir.path().display()
        );
    }
    drop(a);
    drop(b);

    // Simulated Pis: one ledger of 10 records every 2 s each (a busy agent).
    let every = Duration::from_secs(2);
    let secs = if quick { 6 } else { 20 };
    let sizes: &[usize] = if quick { &[20] } else { &[25, 100, 200] };
    let sims: Vec<Sim> = sizes
        .iter()
        .map(|&pis| simulate(&hub, pis, every, secs))
        .collect();

    let p50b = pct(&mut bare_ms, 0.5);
    let p99b = pct(&mut bare_ms, 0.99);
    let p50 = pct(&mut lag_ms, 0.5);
    let p99 = pct(&mut lag_ms, 0.99);
    println!("| figure | Kura | baseline (same run) | ratio | target |");
    println!("|---|---|---|---|---|");
    println!(
        "| replication lag, seal on A → verified on B, p50 ({n} ledgers of {RECORDS} records) | {p50:.2} ms | {p50b:.2} ms bare JetStream publish → consume | {:.1}× | ≤ 3× |",
        p50 / p50b
    );
    println!(
        "| replication lag p99 | {p99:.2} ms | {p99b:.2} ms | {:.1}× | ≤ 50 ms |",
        p99 / p99b
    );
    println!(
        "| a backlog of {ledgers} ledgers replicated (records/s, sealed → verified on B) | {replicated:.0}/s | — | — | — |"
    );
    println!(
        "| restore from the hub ({total_records} records ingested and verified) | {restore:.0}/s | {group:.0}/s local group commit (256 ledgers a transaction) | {:.2}× | ≥ 0.5× |",
        restore / group
    );
    let (hwm, rss): (u64, u64) = hub_after
        .iter()
        .fold((0, 0), |(h, r), (a, b)| (h.max(*a), r + b));
    println!(
        "| hub: 3 nodes' RSS at start / after the runs (peak of one node) | {} MiB / {} MiB ({} MiB) | — | — | — |",
        hub_base / 1024,
        rss / 1024,
        hwm / 1024
    );
    for m in &sims {
        println!(
            "| {} simulated Pis, a ledger of {RECORDS} records every {}s each ({} ledgers) | hub CPU {:.1}% of a core ({:.2} ms/s per Pi), RSS {} MiB, stored {:.1} KiB/s ({:.0} B/s per Pi, one copy), node directories +{:.0} KiB/s | — | — | — |",
            m.pis,
            every.as_secs(),
            m.sent,
            m.cpu * 100.0,
            m.cpu * 1000.0 / m.pis as f64,
            m.rss_kib / 1024,
            m.stored / 1024.0,
            m.stored / m.pis as f64,
            m.disk / 1024.0
        );
    }
    // How many Pis one hub holds, from the largest run.
    if let Some(m) = sims.last() {
        let nodes = f64::from(hub.nodes);
        let cpu_per_pi_node = m.cpu / m.pis as f64 / nodes; // s/s on one node
        let by_cpu = 0.5 / cpu_per_pi_node;
        let rss_per_pi =
            (m.rss_kib.saturating_sub(hub_base) as f64 / m.pis as f64 / nodes).max(1.0); // KiB on one node
        let by_mem = (1024.0 * 1024.0 - hub_base as f64 / nodes) / rss_per_pi;
        let per_day = m.stored / m.pis as f64 * 86_400.0; // bytes a Pi adds to each node a day
        let years_1tb = 1e12 / (per_day * 365.0);
        println!(
            "> From the {}-Pi run, per Pi and per node: {:.3} ms of CPU a second, {:.0} KiB of memory, {:.1} MB of history a day (each node keeps a full copy).",
            m.pis,
            cpu_per_pi_node * 1000.0,
            rss_per_pi,
            per_day / 1e6
        );
        println!(
            "> - CPU: at half a core per node for the hub, 0.5 s/s ÷ {:.5} s/s = about {:.0} Pis.",
            cpu_per_pi_node, by_cpu
        );
        println!(
            "> - Memory: at 1 GiB per node, (1 GiB − {:.0} MiB at start) ÷ {:.0} KiB = about {:.0} Pis.",
            hub_base as f64 / nodes / 1024.0,
            rss_per_pi,
            by_mem
        );
        let all = years_1tb / m.pis as f64;
        let all = if all >= 1.0 {
            format!("{all:.1} years")
        } else {
            format!("{:.0} days", all * 365.0)
        };
        println!(
            "> - Disk: history is kept forever, so disk sets the horizon, not the count: one Pi this busy fills 1 TB in {years_1tb:.0} years; {} of them in {all}.",
            m.pis
        );
        println!(
            "> - So one 3-node hub of such machines holds about {:.0} Pis this busy (the smaller of CPU and memory), around the clock. These Pis only publish: every Pi that keeps a replica of every other multiplies what the hub sends by the fleet's size (N Pis × (N − 1) replicas), which is the limit to plan for beyond a few dozen — replicate to a few witnesses, not to all.",
            by_cpu.min(by_mem)
        );
    }
}

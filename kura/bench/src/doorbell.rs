//! The doorbell figure: a record committed in this process → a second process (`kura
//! bench-peer`), woken over NATS, has read it from SQLite. Timed against a bare NATS
//! publish → receive between the same two processes on the same connection.
//!
//! Both processes stamp times with the system clock (the same clock on one machine): the
//! sender right after the commit (or right before the bare publish), the peer right after
//! its SQLite read (or right on receipt).

use proto::{LedgerId, RecordId};
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt as _;
use proto::record::{Content, NewRecord, RecordType};
use serde::{Deserialize, Serialize};

use super::Figure;
use super::Sizes;
use super::storage::remove_db;
use kura_runtime::bus::Credentials;
use kura_runtime::identity::Role;
use kura_runtime::natsbin::NatsServer;
use kura_store::{Store, StoreOptions};

/// Subject of the timed doorbells (not a daemon subject: nothing else listens).
const DOORBELL: &str = "kura.bench.doorbell";
/// Subject of the bare baseline messages.
const BARE: &str = "kura.bench.bare";

/// What the sender puts on the wire: the pointer, plus when it was committed.
#[derive(Serialize, Deserialize)]
struct Ring {
    /// The committed record (absent for bare messages).
    record_id: Option<RecordId>,
    /// Unix nanoseconds right after the commit (or right before a bare publish).
    t0: u128,
}

/// Arguments of the hidden `kura bench-peer` subcommand.
#[derive(Debug, Clone)]
pub struct PeerArgs {
    /// The NATS server.
    pub nats_url: String,
    /// The database the records are committed to.
    pub db: PathBuf,
    /// Events of each kind to wait for.
    pub count: usize,
    /// The nkey seed to connect with.
    pub seed: Option<PathBuf>,
    /// The bus CA to pin.
    pub ca: Option<PathBuf>,
}

/// Credentials from a seed and CA file (either may be absent).
fn credentials(seed: Option<&Path>, ca: Option<&Path>) -> anyhow::Result<Credentials> {
    let common = kura_runtime::Common {
        nats_seed: seed.map(Path::to_path_buf),
        nats_ca: ca.map(Path::to_path_buf),
        ..kura_runtime::Common::default()
    };
    Credentials::from_common(&common)
}

/// What the peer prints when done: latencies in nanoseconds.
#[derive(Serialize, Deserialize)]
struct PeerResult {
    /// Bare publish → receive.
    bare: Vec<u64>,
    /// Commit → woken → record read from SQLite.
    doorbell: Vec<u64>,
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// The peer process: subscribes, says `ready`, times every message, prints the result.
pub fn peer(args: &PeerArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let store = Store::open(&args.db, &StoreOptions::default())?;
    let result = rt.block_on(async {
        let client = credentials(args.seed.as_deref(), args.ca.as_deref())?
            .connect_once("bench-peer", &args.nats_url)
            .await?;
        let mut bare_sub = client.subscribe(BARE).await?;
        let mut bell_sub = client.subscribe(DOORBELL).await?;
        client.flush().await?;
        println!("ready");
        let mut out = PeerResult {
            bare: Vec::with_capacity(args.count),
            doorbell: Vec::with_capacity(args.count),
        };
        while out.bare.len() < args.count {
            let Some(msg) = bare_sub.next().await else {
                anyhow::bail!("subscription ended");
            };
            let t1 = now_ns();
            let ring: Ring = serde_json::from_slice(&msg.payload)?;
            out.bare
                .push(u64::try_from(t1.saturating_sub(ring.t0)).unwrap_or(u64::MAX));
        }
        while out.doorbell.len() < args.count {
            let Some(msg) = bell_sub.next().await else {
                anyhow::bail!("subscription ended");
            };
            let ring: Ring = serde_json::from_slice(&msg.payload)?;
            let id = ring
                .record_id
                .ok_or_else(|| anyhow::anyhow!("doorbell without a record id"))?;
            let record = store.read_record(id)?;
            std::hint::black_box(&record);
            let t1 = now_ns();
            out.doorbell
                .push(u64::try_from(t1.saturating_sub(ring.t0)).unwrap_or(u64::MAX));
        }
        anyhow::Ok(out)
    })?;
    println!("{}", serde_json::to_string(&result)?);
    Ok(())
}

/// p50, p99 and max of nanosecond samples, in milliseconds.
fn percentiles(mut v: Vec<u64>) -> (f64, f64, f64) {
    v.sort_unstable();
    let at = |q: f64| {
        let i = ((v.len() as f64 - 1.0) * q).round() as usize;
        v.get(i).copied().unwrap_or(0) as f64 / 1e6
    };
    (at(0.5), at(0.99), at(1.0))
}

/// Where the bench's bus is: the bundled server started here, or another one.
struct BenchBus {
    /// Kept alive for the runs; `None` for a server given by URL.
    _server: Option<NatsServer>,
    url: String,
    seed: Option<PathBuf>,
    ca: Option<PathBuf>,
}

/// The bundled server authenticates like an installed Pi: the bench is its operator.
/// Another server: whatever $KURA_NATS_SEED and $KURA_NATS_CA say.
fn bench_bus(nats_url: Option<&str>) -> anyhow::Result<BenchBus> {
    if let Some(url) = nats_url {
        let env_path = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        return Ok(BenchBus {
            _server: None,
            url: url.to_owned(),
            seed: env_path("KURA_NATS_SEED"),
            ca: env_path("KURA_NATS_CA"),
        });
    }
    let server = NatsServer::try_start().map_err(anyhow::Error::msg)?;
    Ok(BenchBus {
        url: server.url(),
        seed: Some(server.seed(Role::Operator)),
        ca: Some(server.ca()),
        _server: Some(server),
    })
}

/// Starts `kura bench-peer` and waits for its `ready`.
fn spawn_peer(
    bus: &BenchBus,
    db: &Path,
    count: usize,
) -> anyhow::Result<(
    std::process::Child,
    std::io::Lines<BufReader<std::process::ChildStdout>>,
)> {
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .arg("bench-peer")
        .args(["--nats", &bus.url, "--count", &count.to_string()])
        .arg("--db")
        .arg(db)
        .args(
            bus.seed
                .iter()
                .flat_map(|p| [std::ffi::OsStr::new("--seed"), p.as_os_str()]),
        )
        .args(
            bus.ca
                .iter()
                .flat_map(|p| [std::ffi::OsStr::new("--ca"), p.as_os_str()]),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no peer stdout"))?;
    let mut lines = BufReader::new(stdout).lines();
    match lines.next() {
        Some(Ok(l)) if l == "ready" => Ok((child, lines)),
        other => anyhow::bail!("bench peer did not start: {other:?}"),
    }
}

/// Sends `events` bare messages, then `events` committed records with their doorbells.
fn send(bus: &BenchBus, store: &mut Store, ledger: LedgerId, events: usize) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    // A pause between events, so each is timed alone rather than queued behind the last.
    let gap = Duration::from_micros(300);
    rt.block_on(async {
        let client = credentials(bus.seed.as_deref(), bus.ca.as_deref())?
            .connect_once("bench", &bus.url)
            .await?;
        for _ in 0..events {
            let ring = Ring {
                record_id: None,
                t0: now_ns(),
            };
            client
                .publish(BARE, serde_json::to_vec(&ring)?.into())
                .await?;
            client.flush().await?;
            std::thread::sleep(gap);
        }
        for i in 0..events {
            let rec = NewRecord::new(
                RecordType::AgentThought,
                Content::text(format!("doorbell event {i}")),
                "agent:bench",
            );
            let appended = store.append(ledger, &rec)?;
            let ring = Ring {
                record_id: Some(appended.record.record_id),
                t0: now_ns(),
            };
            client
                .publish(DOORBELL, serde_json::to_vec(&ring)?.into())
                .await?;
            client.flush().await?;
            std::thread::sleep(gap);
        }
        anyhow::Ok(())
    })
}

/// One run on a fresh database and a fresh peer: the peer's latencies.
fn one_run(dir: &Path, bus: &BenchBus, events: usize) -> anyhow::Result<PeerResult> {
    let db = dir.join("doorbell.db");
    remove_db(&db);
    let mut store = Store::create(&db, &StoreOptions::default())?;
    let session = store.create_session("bench")?;
    let ledger = store
        .open_ledger(session.session_id, "bench", &[])?
        .ledger_id;
    let (mut child, mut lines) = spawn_peer(bus, &db, events)?;
    send(bus, &mut store, ledger, events)?;
    let result = lines
        .next()
        .ok_or_else(|| anyhow::anyhow!("bench peer printed no result"))??;
    let _ = child.wait();
    Ok(serde_json::from_str(&result)?)
}

/// The median of three runs' (p50, p99, max): one noisy run moves a p99 of a few hundred
/// events by itself, the median of three does not.
fn median3(runs: &[(f64, f64, f64)]) -> (f64, f64, f64) {
    let mid = |f: fn(&(f64, f64, f64)) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    (mid(|r| r.0), mid(|r| r.1), mid(|r| r.2))
}

/// Figure 5: doorbell latency, the median of three runs.
pub fn latency(dir: &Path, sizes: &Sizes, nats_url: Option<&str>) -> anyhow::Result<Figure> {
    const RUNS: usize = 3;
    let bus = bench_bus(nats_url)?;
    let (mut bare, mut bell, mut n) = (Vec::new(), Vec::new(), 0);
    for _ in 0..RUNS {
        let result = one_run(dir, &bus, sizes.events)?;
        n = result.doorbell.len();
        bare.push(percentiles(result.bare));
        bell.push(percentiles(result.doorbell));
    }
    let (b50, b99, bmax) = median3(&bare);
    let (d50, d99, dmax) = median3(&bell);
    let fmt = |p50: f64, p99: f64, max: f64| {
        format!("p50 {p50:.3} ms · p99 {p99:.3} ms · max {max:.2} ms")
    };
    Ok(Figure {
        name: format!(
            "doorbell: commit → other process woken over NATS → read from SQLite (median of {RUNS} runs of {} events)",
            super::thousands(n)
        ),
        result: fmt(d50, d99, dmax),
        value: d50,
        baseline_name: "bare NATS publish → receive, same processes".into(),
        baseline: fmt(b50, b99, bmax),
        baseline_value: b50,
        ratio: d50 / b50.max(1e-9),
        target: "p50 <= 0.3 ms, p99 <= 1 ms (ratio: p50 over bare p50)".into(),
        met: d50 <= 0.3 && d99 <= 1.0,
    })
}

//! Operations: `kura serve` (integrity sweeps, WAL checkpoints, backups) and `kura status`
//! (what is up, what is waiting, when the data was last checked).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::{OptionalExtension, params};
use serde::{Deserialize, Serialize};

use crate::runtime::heartbeat::{Heartbeat, INTERVAL};
use crate::runtime::{Common, Stop};
use crate::verify::{Scope, verify};
use crate::{Result, Store};

/// `kura serve`'s configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServeConfig {
    /// Settings shared by every daemon.
    pub common: Common,
    /// Maintenance schedule.
    pub serve: Maintenance,
}

/// What `kura serve` does, and how often.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Maintenance {
    /// Full `verify --all` plus `PRAGMA integrity_check`, this often (the first soon after start).
    pub sweep_interval_ms: u64,
    /// Passive WAL checkpoint, this often (keeps the WAL file small on an SD card).
    pub checkpoint_interval_ms: u64,
    /// Where backups go; empty: no backups.
    pub backup_dir: String,
    /// A consistent online backup, this often.
    pub backup_interval_ms: u64,
    /// How many backups to keep.
    pub backups_kept: usize,
}

impl Default for Maintenance {
    fn default() -> Self {
        Maintenance {
            sweep_interval_ms: 3_600_000,
            checkpoint_interval_ms: 300_000,
            backup_dir: String::new(),
            backup_interval_ms: 86_400_000,
            backups_kept: 7,
        }
    }
}

fn record_sweep(store: &mut Store, kind: &str, ok: bool, ms: u128, summary: &str) -> Result<()> {
    store.write(|tx| {
        tx.execute(
            "INSERT INTO sweeps (kind, at, ok, duration_ms, summary) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![kind, crate::time::now(), ok, ms as i64, summary],
        )?;
        Ok(())
    })
}

/// Verifies everything and runs SQLite's integrity check; records the outcome.
pub fn sweep(store: &mut Store) -> Result<bool> {
    let t = Instant::now();
    let report = verify(store, &Scope::All, None)?;
    let integrity = store.integrity_check()?;
    let ok = report.ok() && integrity == ["ok"];
    let mut summary = format!(
        "{} records, {} ledgers, {} sessions; {} problems; integrity_check: {}",
        report.records_checked,
        report.ledgers_checked,
        report.sessions_checked,
        report.problems.len(),
        integrity.join("; ")
    );
    for p in report.problems.iter().take(3) {
        summary.push_str(&format!("; {p}"));
    }
    if !ok {
        tracing::error!(%summary, "integrity sweep found problems");
    } else {
        tracing::info!(%summary, "integrity sweep ok");
    }
    record_sweep(store, "integrity", ok, t.elapsed().as_millis(), &summary)?;
    Ok(ok)
}

/// Writes a consistent online backup into `dir` and keeps the newest `keep`.
pub fn backup(store: &mut Store, dir: &Path, keep: usize) -> Result<PathBuf> {
    let t = Instant::now();
    std::fs::create_dir_all(dir)
        .map_err(|e| crate::StoreError::Invalid(format!("backup dir {}: {e}", dir.display())))?;
    let stamp = crate::time::now().replace([':', '.'], "");
    let path = dir.join(format!("kura-{stamp}.db"));
    store.conn().backup(rusqlite::MAIN_DB, &path, None)?;
    let mut old: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    old.retain(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("kura-") && n.ends_with(".db"))
    });
    old.sort();
    while old.len() > keep.max(1) {
        let _ = std::fs::remove_file(old.remove(0));
    }
    record_sweep(
        store,
        "backup",
        true,
        t.elapsed().as_millis(),
        &path.display().to_string(),
    )?;
    Ok(path)
}

/// Runs `kura serve` until `shutdown` resolves.
pub async fn serve(config: ServeConfig, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let common = config.common.clone();
    let mut store = Store::open(&common.db, &common.store_options()?)?;
    let name = common.instance_name("kura");
    let heartbeat = Heartbeat::start(&common, "kura", &name, None);
    let stop = Stop::new();
    let s = stop.clone();
    let m = config.serve.clone();
    let worker = std::thread::Builder::new()
        .name("kura-serve".into())
        .spawn(move || {
            let ms = |v: u64| Duration::from_millis(v.max(1000));
            let now = Instant::now();
            // The first sweep soon after start, so `kura status` has something to show.
            let (mut next_sweep, mut next_ckpt, mut next_backup) = (
                now + Duration::from_secs(5).min(ms(m.sweep_interval_ms)),
                now + ms(m.checkpoint_interval_ms),
                now + ms(m.backup_interval_ms),
            );
            while !s.is_set() {
                let now = Instant::now();
                if now >= next_ckpt {
                    if let Err(e) =
                        store
                            .conn()
                            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                    {
                        tracing::warn!(error = %e, "WAL checkpoint failed");
                    }
                    next_ckpt = now + ms(m.checkpoint_interval_ms);
                }
                if now >= next_sweep {
                    if let Err(e) = sweep(&mut store) {
                        tracing::error!(error = %e, "integrity sweep could not run");
                    }
                    next_sweep = now + ms(m.sweep_interval_ms);
                }
                if !m.backup_dir.is_empty() && now >= next_backup {
                    match backup(&mut store, Path::new(&m.backup_dir), m.backups_kept) {
                        Ok(p) => tracing::info!(path = %p.display(), "backup written"),
                        Err(e) => tracing::error!(error = %e, "backup failed"),
                    }
                    next_backup = now + ms(m.backup_interval_ms);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })?;
    tracing::info!(db = %common.db.display(), "kura serve running");
    shutdown.await;
    stop.set();
    tokio::task::spawn_blocking(move || {
        let _ = worker.join();
        heartbeat.stop();
    })
    .await?;
    tracing::info!("kura serve stopped");
    Ok(())
}

/// One daemon as `kura status` sees it.
#[derive(Debug, Clone, Serialize)]
pub struct DaemonStatus {
    /// Instance name.
    pub instance: String,
    /// kura, mikado, minato, hashi or aegis.
    pub kind: String,
    /// Process id.
    pub pid: i64,
    /// Beat within the last three intervals and not stopped.
    pub up: bool,
    /// Seconds since its last beat.
    pub last_beat_s: i64,
    /// Whether it reached NATS at its last beat.
    pub nats_connected: bool,
}

/// Work waiting.
#[derive(Debug, Clone, Serialize)]
pub struct Backlog {
    /// Requests minato has not accepted yet.
    pub queued_requests: i64,
    /// Turns waiting for a worker.
    pub pending_turns: i64,
    /// Turns being worked.
    pub running_turns: i64,
    /// Turns waiting for people.
    pub waiting_turns: i64,
    /// Approval requests not yet decided.
    pub open_approvals: i64,
    /// Completed turns mikado has not read for memory yet.
    pub unextracted_outputs: i64,
}

/// The last sweep or backup.
#[derive(Debug, Clone, Serialize)]
pub struct Sweep {
    /// When.
    pub at: String,
    /// Whether it passed.
    pub ok: bool,
    /// What it found.
    pub summary: String,
}

/// What a Pi owner looks at first.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// Every daemon that ever beat.
    pub daemons: Vec<DaemonStatus>,
    /// Work waiting.
    pub backlog: Backlog,
    /// The last integrity sweep.
    pub last_sweep: Option<Sweep>,
    /// The last backup.
    pub last_backup: Option<Sweep>,
    /// Database file size (bytes).
    pub db_bytes: u64,
    /// WAL file size (bytes).
    pub wal_bytes: u64,
}

/// Reads the status.
pub fn status(store: &Store) -> Result<Status> {
    let c = store.conn();
    let now = crate::work::now_ms();
    let stale = INTERVAL.as_millis() as i64 * 3;
    let mut stmt = c.prepare("SELECT instance, kind, pid, heartbeat_ms, nats_connected, stopped FROM daemons ORDER BY kind, instance")?;
    let daemons = stmt
        .query_map([], |r| {
            let beat: i64 = r.get(3)?;
            let stopped: bool = r.get(5)?;
            Ok(DaemonStatus {
                instance: r.get(0)?,
                kind: r.get(1)?,
                pid: r.get(2)?,
                up: !stopped && now - beat <= stale,
                last_beat_s: (now - beat) / 1000,
                nats_connected: r.get(4)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let n = |sql: &str| -> Result<i64> { Ok(c.query_row(sql, [], |r| r.get(0))?) };
    let backlog = Backlog {
        queued_requests: n(
            "SELECT count(*) FROM requests WHERE request_seq > COALESCE((SELECT position FROM cursors WHERE consumer = 'minato.requests'), 0)",
        )?,
        pending_turns: n("SELECT count(*) FROM turns WHERE state = 'pending'")?,
        running_turns: n("SELECT count(*) FROM turns WHERE state = 'running'")?,
        waiting_turns: n("SELECT count(*) FROM turns WHERE state = 'waiting'")?,
        open_approvals: n("SELECT count(*) FROM approvals WHERE state IN ('pending', 'asked')")?,
        unextracted_outputs: n(
            "SELECT count(*) FROM turns WHERE done_seq > COALESCE((SELECT position FROM cursors WHERE consumer = 'mikado.memory'), 0)",
        )?,
    };
    let last = |kind: &str| -> Result<Option<Sweep>> {
        Ok(c.query_row(
            "SELECT at, ok, summary FROM sweeps WHERE kind = ?1 ORDER BY seq DESC LIMIT 1",
            [kind],
            |r| {
                Ok(Sweep {
                    at: r.get(0)?,
                    ok: r.get(1)?,
                    summary: r.get(2)?,
                })
            },
        )
        .optional()?)
    };
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let mut wal = store.path().as_os_str().to_owned();
    wal.push("-wal");
    Ok(Status {
        daemons,
        backlog,
        last_sweep: last("integrity")?,
        last_backup: last("backup")?,
        db_bytes: size(store.path()),
        wal_bytes: size(Path::new(&wal)),
    })
}

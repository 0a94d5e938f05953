//! Operations on the store: integrity sweeps, online backups, and the status a Pi owner
//! reads first (daemons' heartbeats, backlog, last sweep, sizes).

use std::path::{Path, PathBuf};
use std::time::Instant;

use proto::consumers::{MIKADO_MEMORY, MINATO_REQUESTS};
use rusqlite::{OptionalExtension, params};
use serde::Serialize;

use kura_store::verify::Scope;
use kura_store::{Cached, Db, Result, Store, StoreError};

/// How often a daemon beats; `kura status` calls it down after three missed beats.
pub const HEARTBEAT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// Records that daemon `instance` (of `kind`) is alive, whether it reaches NATS, and
/// whether it has stopped.
pub fn heartbeat(
    store: &mut Store,
    instance: &str,
    kind: &str,
    started: &str,
    connected: bool,
    stopped: bool,
    detail: Option<&Detail>,
) -> Result<()> {
    store.write(|tx| {
        tx.sql().execute_cached(
"INSERT INTO daemons (instance, kind, pid, started_at, heartbeat_ms, nats_connected, stopped, detail, alarm)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT (instance) DO UPDATE SET kind = excluded.kind, pid = excluded.pid,
               started_at = excluded.started_at, heartbeat_ms = excluded.heartbeat_ms,
               nats_connected = excluded.nats_connected, stopped = excluded.stopped,
               detail = excluded.detail, alarm = excluded.alarm",
            params![instance, kind, std::process::id(), started, crate::now_ms(), connected, stopped,
                detail.map(|d| d.text.as_str()), detail.is_some_and(|d| d.alarm)],
        )?;
        Ok(())
    })
}

fn record_sweep(store: &mut Store, kind: &str, ok: bool, ms: u128, summary: &str) -> Result<()> {
    store.write(|tx| {
        tx.sql().execute_cached(
            "INSERT INTO sweeps (kind, at, ok, duration_ms, summary) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![kind, kura_store::time::now(), ok, ms as i64, summary],
        )?;
        Ok(())
    })
}

/// Verifies everything and runs SQLite's integrity check; records the outcome and returns
/// whether it passed, with a one-line summary.
pub fn sweep(
    store: &mut Store,
    keyring: Option<&kura_tlog::sealer::Keyring>,
    people: &[kura_policy::writ::Issuer],
) -> Result<(bool, String)> {
    let t = Instant::now();
    let report = kura_store::verify::verify_with(store, &Scope::All, None, keyring, people)?;
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
    record_sweep(store, "integrity", ok, t.elapsed().as_millis(), &summary)?;
    Ok((ok, summary))
}

/// Writes a consistent online backup into `dir` and keeps the newest `keep`.
pub fn backup(store: &mut Store, dir: &Path, keep: usize) -> Result<PathBuf> {
    let t = Instant::now();
    std::fs::create_dir_all(dir).map_err(|e| StoreError::Io {
        path: dir.to_path_buf(),
        source: e,
    })?;
    let stamp = kura_store::time::now().replace([':', '.'], "");
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
    /// What it reports about itself (hashi: its tool sandbox).
    pub detail: Option<String>,
    /// Whether that is an ALARM: something a person must look at before it goes on.
    pub alarm: bool,
}

/// What a daemon reports about itself beside its heartbeat: a note, or an ALARM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detail {
    /// The text people read (an ALARM's begins `ALARM: `).
    pub text: String,
    /// Whether it is an ALARM.
    pub alarm: bool,
}

impl Detail {
    /// An ALARM, saying why.
    pub fn alarm(why: impl std::fmt::Display) -> Detail {
        Detail {
            text: format!("ALARM: {why}"),
            alarm: true,
        }
    }
}

impl From<String> for Detail {
    fn from(text: String) -> Detail {
        Detail { text, alarm: false }
    }
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
    let now = crate::now_ms();
    let stale = HEARTBEAT_INTERVAL.as_millis() as i64 * 3;
    let mut stmt = c.prepare("SELECT instance, kind, pid, heartbeat_ms, nats_connected, stopped, detail, alarm FROM daemons ORDER BY kind, instance")?;
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
                detail: r.get(6)?,
                alarm: r.get(7)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let n = |sql: &str| -> Result<i64> { Ok(c.query_row(sql, [], |r| r.get(0))?) };
    let after_cursor = |sql: &str, consumer: &str| -> Result<i64> {
        Ok(c.query_row(sql, [consumer], |r| r.get(0))?)
    };
    let backlog = Backlog {
        queued_requests: after_cursor(
            "SELECT count(*) FROM requests WHERE request_seq > COALESCE((SELECT position FROM cursors WHERE consumer = ?1), 0)",
            MINATO_REQUESTS,
        )?,
        pending_turns: n("SELECT count(*) FROM turns WHERE state = 'pending'")?,
        running_turns: n("SELECT count(*) FROM turns WHERE state = 'running'")?,
        waiting_turns: n("SELECT count(*) FROM turns WHERE state = 'waiting'")?,
        open_approvals: n("SELECT count(*) FROM approvals WHERE state IN ('pending', 'asked')")?,
        unextracted_outputs: after_cursor(
            "SELECT count(*) FROM turns WHERE done_seq > COALESCE((SELECT position FROM cursors WHERE consumer = ?1), 0)",
            MIKADO_MEMORY,
        )?,
    };
    let last = |kind: &str| -> Result<Option<Sweep>> {
        Ok(c.query_row_cached(
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

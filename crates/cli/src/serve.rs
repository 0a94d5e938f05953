//! `kura serve`: the fifth daemon — integrity sweeps, WAL checkpoints and backups on a
//! schedule, woken only by its next deadline or by shutdown.

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use kura_runtime::heartbeat::Heartbeat;
use kura_runtime::{Common, Stop};
use kura_store::Store;
use kura_store::ops::{backup, sweep};
use serde::{Deserialize, Serialize};

/// `kura serve`'s configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServeConfig {
    /// Settings shared by every daemon.
    pub common: Common,
    /// Maintenance schedule.
    pub serve: Maintenance,
}

/// What `kura serve` does, and how often.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Maintenance {
    /// Full `verify --all` plus `PRAGMA integrity_check`, this often (the first soon after start).
    pub sweep_interval_ms: u64,
    /// Passive WAL checkpoint, this often (keeps the WAL file small on an SD card).
    pub checkpoint_interval_ms: u64,
    /// Where backups go; unset: no backups.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backup_dir: Option<PathBuf>,
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
            backup_dir: None,
            backup_interval_ms: 86_400_000,
            backups_kept: 7,
        }
    }
}

/// Runs `kura serve` until `shutdown` resolves.
pub async fn serve(config: ServeConfig, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let common = config.common.clone();
    let mut store = Store::open(&common.db, &common.store_options())?;
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
            loop {
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
                    match sweep(&mut store) {
                        Ok((true, summary)) => tracing::info!(%summary, "integrity sweep ok"),
                        Ok((false, summary)) => {
                            tracing::error!(%summary, "integrity sweep found problems")
                        }
                        Err(e) => tracing::error!(error = %e, "integrity sweep could not run"),
                    }
                    next_sweep = now + ms(m.sweep_interval_ms);
                }
                if let Some(dir) = &m.backup_dir
                    && now >= next_backup
                {
                    match backup(&mut store, dir, m.backups_kept) {
                        Ok(p) => tracing::info!(path = %p.display(), "backup written"),
                        Err(e) => tracing::error!(error = %e, "backup failed"),
                    }
                    next_backup = now + ms(m.backup_interval_ms);
                }
                // Park until the next deadline; a stop wakes it at once.
                let mut next = next_sweep.min(next_ckpt);
                if m.backup_dir.is_some() {
                    next = next.min(next_backup);
                }
                if s.sleep(next.saturating_duration_since(Instant::now())) {
                    break;
                }
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

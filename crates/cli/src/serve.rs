//! `kura serve`: the fifth daemon — integrity sweeps, WAL checkpoints and backups on a
//! schedule, woken only by its next deadline or by shutdown.

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use kura_runtime::heartbeat::Heartbeat;
use kura_runtime::{Common, Stop};
use kura_store::Store;
use kura_store::checkpoint::LogKey;
use kura_store::ops::{backup, sweep};
use kura_store::witness;
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
    /// The log key that signs checkpoints; unset: `$CREDENTIALS_DIRECTORY/log.key` when
    /// systemd hands one over, else no signing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_key: Option<PathBuf>,
    /// The log's verifier key, pinned: `kura verify` checks checkpoints with it, and
    /// `kura serve` refuses a log key that is not this one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_verifier: Option<String>,
    /// A new checkpoint this often (when the log grew).
    pub sign_interval_ms: u64,
    /// The signer's last checkpoint, outside the database; unset: `<db>.checkpoint`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint_file: Option<PathBuf>,
    /// Directories that receive every checkpoint and a copy of the leaves (a USB stick, a
    /// mounted backup); each refuses a checkpoint its last one is not extended by.
    pub witness_dirs: Vec<PathBuf>,
}

impl Default for Maintenance {
    fn default() -> Self {
        Maintenance {
            sweep_interval_ms: 3_600_000,
            checkpoint_interval_ms: 300_000,
            backup_dir: None,
            backup_interval_ms: 86_400_000,
            backups_kept: 7,
            log_key: None,
            log_verifier: None,
            sign_interval_ms: 60_000,
            checkpoint_file: None,
            witness_dirs: Vec::new(),
        }
    }
}

/// The checkpoint signer: the log key, where its last checkpoint lives, its witnesses.
struct Signer {
    key: LogKey,
    state: PathBuf,
    witnesses: Vec<PathBuf>,
}

impl Signer {
    /// The configured key (or systemd's `log.key` credential); none means no signing. A key
    /// other than the pinned `log_verifier` is refused.
    fn load(config: &ServeConfig) -> anyhow::Result<Option<Signer>> {
        let path = config.serve.log_key.clone().or_else(|| {
            std::env::var_os("CREDENTIALS_DIRECTORY")
                .map(|d| PathBuf::from(d).join("log.key"))
                .filter(|p| p.exists())
        });
        let Some(path) = path else {
            return Ok(None);
        };
        let key = LogKey::load(&path)?;
        if let Some(pinned) = &config.serve.log_verifier
            && pinned.trim() != key.verifier()
        {
            anyhow::bail!(
                "the log key {} is not the pinned [serve] log_verifier ({pinned})",
                path.display()
            );
        }
        Ok(Some(Signer {
            key,
            state: crate::tlog::state_file(
                config.serve.checkpoint_file.as_deref(),
                &config.common.db,
            ),
            witnesses: config.serve.witness_dirs.clone(),
        }))
    }

    /// Signs the log as it is now unless it does not extend the last checkpoint, then hands
    /// the checkpoint to every witness. Returns what `kura status` should show.
    fn round(&self, store: &Store) -> String {
        let last = std::fs::read_to_string(&self.state).ok();
        match witness::sign_next(store.conn(), &self.key, last.as_deref()) {
            Ok(Ok((note, cp))) => {
                if let Err(e) = witness::save_last(&self.state, &note) {
                    tracing::error!(error = %e, "cannot keep the checkpoint");
                }
                let mut refused = Vec::new();
                for dir in &self.witnesses {
                    match witness::publish(dir, store.conn(), &note, &cp, self.key.verifier()) {
                        Ok(Ok(())) => {}
                        Ok(Err(why)) => {
                            tracing::error!(witness = %dir.display(), %why, "ALARM: a witness refused the checkpoint");
                            refused.push(why);
                        }
                        Err(e) => {
                            tracing::warn!(witness = %dir.display(), error = %e, "witness not reachable")
                        }
                    }
                }
                tracing::info!(size = cp.size, "checkpoint signed");
                match refused.first() {
                    Some(why) => format!("ALARM: {why}"),
                    None => format!("checkpoint {}", cp.size),
                }
            }
            Ok(Err(why)) => {
                tracing::error!(%why, "ALARM: the seal log was rewritten; not signing");
                format!("ALARM: {why}")
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot sign a checkpoint");
                format!("checkpoint failed: {e}")
            }
        }
    }
}

/// Runs `kura serve` until `shutdown` resolves.
pub async fn serve(config: ServeConfig, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let common = config.common.clone();
    let mut store = Store::open(&common.db, &common.store_options())?;
    let signer = Signer::load(&config)?;
    let name = common.instance_name("kura");
    let heartbeat = std::sync::Arc::new(Heartbeat::start(&common, "kura", &name, None));
    let beat = heartbeat.clone();
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
            // The first checkpoint at once: a rewrite made while serve was down shows now.
            let mut next_sign = now;
            loop {
                let now = Instant::now();
                if let Some(signer) = &signer
                    && now >= next_sign
                {
                    beat.set_detail(signer.round(&store));
                    next_sign = now + ms(m.sign_interval_ms);
                }
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
                if signer.is_some() {
                    next = next.min(next_sign);
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
        if let Ok(h) = std::sync::Arc::try_unwrap(heartbeat) {
            h.stop();
        }
    })
    .await?;
    tracing::info!("kura serve stopped");
    Ok(())
}

//! `kura serve`'s scheduled duties, on one thread: sign a checkpoint, checkpoint the WAL,
//! sweep, back up — each on its own interval, woken only by the next deadline or a stop.

use std::time::{Duration, Instant};

use kura_runtime::Stop;
use kura_store::Store;
use kura_work::ops::{Detail, backup, sweep};

use crate::config::Maintenance;
use crate::signer::Signer;

/// What the scheduler thread does, each on its own interval: sign a checkpoint, checkpoint
/// the WAL, sweep, back up.
pub(crate) struct Duties {
    pub(crate) store: Store,
    pub(crate) signer: Option<std::sync::Arc<Signer>>,
    pub(crate) keyring: Option<kura_tlog::sealer::Keyring>,
    /// Whose redactions the sweep accepts (`[writs] issuers`).
    pub(crate) people: Vec<kura_policy::writ::Issuer>,
    pub(crate) m: Maintenance,
    /// Sets what `kura status` shows beside this daemon.
    pub(crate) detail: Box<dyn Fn(Detail) + Send>,
}

/// When each duty is next due.
struct Due {
    sweep: Instant,
    ckpt: Instant,
    backup: Instant,
    sign: Instant,
}

/// An interval from the config, at least a second.
fn ms(v: u64) -> Duration {
    Duration::from_millis(v.max(1000))
}

impl Duties {
    /// Does what is due, then parks until the next deadline; a stop wakes it at once.
    pub(crate) fn run(mut self, stop: &Stop) {
        let now = Instant::now();
        let m = &self.m;
        let mut due = Due {
            // The first sweep soon after start, so `kura status` has something to show.
            sweep: now + Duration::from_secs(5).min(ms(m.sweep_interval_ms)),
            ckpt: now + ms(m.checkpoint_interval_ms),
            backup: now + ms(m.backup_interval_ms),
            // The first checkpoint at once: a rewrite made while serve was down shows now.
            sign: now,
        };
        loop {
            self.step(&mut due, Instant::now());
            if stop.sleep(self.next(&due).saturating_duration_since(Instant::now())) {
                break;
            }
        }
    }

    /// Each duty whose time has come, in the order sign, WAL, sweep, backup.
    fn step(&mut self, due: &mut Due, now: Instant) {
        let (store, m) = (&mut self.store, &self.m);
        if let Some(signer) = &self.signer
            && now >= due.sign
        {
            (self.detail)(signer.round(store).detail());
            due.sign = now + ms(m.sign_interval_ms);
        }
        if now >= due.ckpt {
            if let Err(e) = store
                .conn()
                .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
            {
                tracing::warn!(error = %e, "WAL checkpoint failed");
            }
            due.ckpt = now + ms(m.checkpoint_interval_ms);
        }
        if now >= due.sweep {
            match sweep(store, self.keyring.as_ref(), &self.people) {
                Ok((true, summary)) => tracing::info!(%summary, "integrity sweep ok"),
                Ok((false, summary)) => {
                    tracing::error!(%summary, "integrity sweep found problems")
                }
                Err(e) => tracing::error!(error = %e, "integrity sweep could not run"),
            }
            due.sweep = now + ms(m.sweep_interval_ms);
        }
        if let Some(dir) = &m.backup_dir
            && now >= due.backup
        {
            match backup(store, dir, m.backups_kept) {
                Ok(p) => tracing::info!(path = %p.display(), "backup written"),
                Err(e) => tracing::error!(error = %e, "backup failed"),
            }
            due.backup = now + ms(m.backup_interval_ms);
        }
    }

    /// The nearest deadline of the duties configured.
    fn next(&self, due: &Due) -> Instant {
        let mut next = due.sweep.min(due.ckpt);
        if self.m.backup_dir.is_some() {
            next = next.min(due.backup);
        }
        if self.signer.is_some() {
            next = next.min(due.sign);
        }
        next
    }
}

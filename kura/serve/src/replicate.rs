//! `kura serve`'s part in a fleet: the publisher thread (this Pi's seal log to the hub, each
//! batch followed by a checkpoint the signer made) and one receiver task per peer Pi (its
//! verified replica). Both go through this Pi's own bus, which reaches the hub as a leaf node.

use std::sync::Arc;

use kura_work::ops::Detail;
use std::time::Duration;

use kura_fleet::FleetError;
use kura_fleet::publish::Publisher;
use kura_fleet::receive::Receiver;
use kura_runtime::{Bus, Stop};
use kura_store::Store;
use kura_tlog::cosign::Witness;

use crate::commits::Waited;
use crate::config::ServeConfig;

/// Signs checkpoints for the publisher: the signer's round (which refuses a log that does
/// not extend its last checkpoint), then the checkpoint at the size asked for.
pub(crate) trait SignAt: Send + Sync {
    /// A signed checkpoint of the log at `size`, if the log may be signed.
    fn note_at(&self, store: &Store, size: u64) -> Option<String>;
}

/// Starts the publisher (when `[fleet] name` is set and `publish`) and the receivers.
/// Receivers stop when `stop_rx` changes; the publisher when the daemon stops.
pub(crate) fn start(
    config: &ServeConfig,
    bus: &Bus,
    signer: Option<Arc<dyn SignAt>>,
    witness: Option<Arc<Witness>>,
    daemon: &mut kura_runtime::Daemon<Option<Bus>>,
    stop_rx: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let fleet = &config.fleet;
    fleet.check()?;
    if let (Some(name), true) = (&fleet.name, fleet.publish) {
        let Some(signer) = signer else {
            anyhow::bail!(
                "[fleet] publish needs the log key: receivers check every batch against a signed \
                 checkpoint (set [serve] log_key, `kura checkpoint init`)"
            );
        };
        let name = name.clone();
        let db = config.common.db.clone();
        let options = config.common.store_options()?;
        let client = bus.client.clone();
        let poll = Duration::from_millis(fleet.poll_ms.max(1));
        let commits = crate::commits::Commits::watch(&config.common.db);
        let detail = daemon.detail_setter();
        let rt = tokio::runtime::Handle::current();
        let alarm = kura_fleet::publish::alarm_path(&fleet.replicas_dir(&config.common.db), &name);
        daemon.thread("kura-fleet-publish", move |stop| {
            if let Ok(why) = std::fs::read_to_string(&alarm) {
                let why = format!(
                    "halted by an earlier ALARM ({}): {}; once the hub's operator removed what it names, remove that file and restart kura serve to resume",
                    alarm.display(),
                    why.trim()
                );
                tracing::error!(%why, "ALARM: fleet publisher not started");
                return detail(Detail::alarm(format!("fleet: {why}")));
            }
            let store = match Store::open(&db, &options) {
                Ok(s) => s,
                Err(e) => {
                    return tracing::error!(error = %e, "fleet publisher cannot open the store");
                }
            };
            let halted = publish_loop(&rt, client, &name, store, &*signer, (&commits, poll), &stop);
            if let Some(e) = halted {
                tracing::error!(error = %e, "ALARM: fleet publisher stopped");
                detail(Detail::alarm(format!("fleet: {e}")));
                // Kept for `kura fleet status`, and so a restart does not publish past it.
                let kept = alarm
                    .parent()
                    .map_or(Ok(()), std::fs::create_dir_all)
                    .and_then(|()| std::fs::write(&alarm, format!("{e}\n")));
                if let Err(io) = kept {
                    tracing::error!(error = %io, path = %alarm.display(), "the ALARM could not be kept in its file");
                }
            }
        })?;
    }
    let dir = fleet.replicas_dir(&config.common.db);
    // This Pi cosigns each checkpoint a replica verified, as itself, with serve's witness.
    let witness = match (&fleet.name, witness) {
        (Some(me), Some(w)) => Some((me.clone(), w)),
        _ => None,
    };
    for peer in &fleet.peers {
        let keyring = match &peer.keyring {
            Some(k) => crate::anchor::keyring(Some(k.clone()))?,
            None => None,
        };
        let (client, peer, dir, max) = (
            bus.client.clone(),
            peer.clone(),
            dir.clone(),
            fleet.max_pending_bytes,
        );
        let witness = witness.clone();
        let people = config.writs.issuers.clone();
        let mut stop = stop_rx.clone();
        let rt = tokio::runtime::Handle::current();
        // A thread of its own: the replica's SQLite handle lives across awaits, and a
        // receiver's transaction must not stall the runtime's workers.
        let name = format!("kura-fleet-{}", peer.name);
        std::thread::Builder::new().name(name).spawn(move || rt.block_on(async move {
            loop {
                let made = Receiver::new(client.clone(), &peer, keyring.clone(), &dir, max, witness.clone())
                    .await
                    .map(|r| r.with_people(people.clone()));
                let stopped = async {
                    let _ = stop.wait_for(|s| *s).await;
                };
                match made {
                    Ok(r) => {
                        if let Err(e) = r.run(stopped).await {
                            tracing::error!(origin = %peer.name, error = %e, "ALARM: this replica is halted");
                        }
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(origin = %peer.name, error = %e, "replica waits for the hub");
                        tokio::select! {
                            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                            _ = stopped => return,
                        }
                    }
                }
            }
        }))?;
    }
    Ok(())
}

/// After the database's files were written, look again every `SETTLE` for `SETTLE_TRIES`
/// looks: a commit writes the WAL before its WAL index (in `-shm`, written through a
/// mapping, which raises no inotify event), with its fsync between, and the kernel merges a
/// write's event into one not yet read — so the write that woke us may be a commit not yet
/// visible, or an earlier one whose later sibling raises no event of its own. A look is a
/// `PRAGMA data_version`, microseconds. Measured before: lag p50 256 ms (the fallback
/// timer) in a run that lost this race every time, then 3 commits in 50 missed with looks
/// only while the version had not moved.
const SETTLE: Duration = Duration::from_millis(1);
const SETTLE_TRIES: u32 = 50;

/// Publishes whenever the database changed — woken by its commits (every seal is one), with
/// `poll` the fallback timer; `PRAGMA data_version` says whether anything changed —
/// reconnecting to the hub's stream as needed; a divergence stops it and is returned (the
/// ALARM), a stop returns `None`.
fn publish_loop(
    rt: &tokio::runtime::Handle,
    client: async_nats::Client,
    name: &str,
    mut store: Store,
    signer: &dyn SignAt,
    (commits, poll): (&crate::commits::Commits, Duration),
    stop: &Stop,
) -> Option<FleetError> {
    let mut publisher: Option<Publisher> = None;
    let mut seen: Option<i64> = None;
    let mut backoff = Duration::ZERO;
    // Looks left after the last write ([`SETTLE_TRIES`]).
    let mut settling = 0u32;
    loop {
        let waited = if !backoff.is_zero() {
            match stop.sleep(backoff) {
                true => Waited::Stopped,
                false => Waited::Timeout,
            }
        } else {
            commits.wait(if settling > 0 { SETTLE } else { poll }, stop)
        };
        settling = match waited {
            Waited::Stopped => return None,
            Waited::Written => SETTLE_TRIES,
            Waited::Timeout => settling.saturating_sub(1),
        };
        let version = store.data_version().ok();
        if version.is_some() && version == seen && backoff.is_zero() {
            continue;
        }
        let p = match &publisher {
            Some(p) => p,
            None => match rt.block_on(Publisher::connect(client.clone(), name)) {
                Ok(p) => publisher.insert(p),
                Err(e) => {
                    tracing::warn!(error = %e, "fleet publisher waits for the hub");
                    backoff = Duration::from_secs(2);
                    continue;
                }
            },
        };
        let mut sign = |s: &Store, size: u64| signer.note_at(s, size);
        match rt.block_on(p.round(&mut store, &mut sign)) {
            Ok(r) => {
                seen = version;
                backoff = Duration::ZERO;
                if r.new > 0 {
                    tracing::info!(
                        published = r.published,
                        new = r.new,
                        "fleet: published to the hub"
                    );
                }
            }
            Err(e @ FleetError::Diverged(_)) => return Some(e),
            Err(e) => {
                tracing::warn!(error = %e, "fleet publish failed; retrying");
                publisher = None;
                backoff = Duration::from_secs(1);
            }
        }
    }
}

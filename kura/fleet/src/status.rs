//! What `kura fleet status` and the console show of the fleet, read from SQLite and the
//! replicas' files alone: this Pi's publisher cursor, and for each replica its size, the
//! checkpoint it was verified against and who cosigned it, and any ALARM.

use std::path::Path;

use kura_store::replica::{inbox, outbox};
use kura_store::{Store, StoreOptions};
use serde::Serialize;

use crate::{FleetConfig, Result, receive};

/// One Pi as this one sees it.
#[derive(Debug, Clone, Serialize)]
pub struct PiStatus {
    /// Its fleet name.
    pub name: String,
    /// `self` for this Pi, `replica` for the others.
    pub role: &'static str,
    /// Seal-log leaves: sealed here (this Pi) or verified (a replica).
    pub leaves: u64,
    /// This Pi: leaves the hub acknowledged. A replica: the checkpoint size it verified.
    pub published: u64,
    /// When its last ledger was sealed.
    pub last_seal: Option<String>,
    /// A replica: when it last verified a checkpoint.
    pub verified_at: Option<String>,
    /// A replica: the origin's checkpoint it holds.
    pub checkpoint: Option<String>,
    /// Why it is halted: a replica that refused its origin's history, or this Pi's
    /// publisher that found on the hub what it never published.
    pub alarm: Option<String>,
}

fn last_seal(store: &Store) -> Result<Option<String>> {
    Ok(kura_store::replica::last_sealed_at(store)?)
}

fn leaves(store: &Store) -> Result<u64> {
    Ok(kura_tlog::seallog::size(&store.seal_log()).map_err(kura_store::StoreError::from)?)
}

/// Every Pi of `config` as seen from the database at `db`.
pub fn read(config: &FleetConfig, db: &Path) -> Result<Vec<PiStatus>> {
    let mut out = Vec::new();
    let options = StoreOptions::default();
    let dir = config.replicas_dir(db);
    if let Some(name) = &config.name {
        let store = Store::open(db, &options)?;
        let alarm = std::fs::read_to_string(crate::publish::alarm_path(&dir, name))
            .ok()
            .map(|a| a.trim().to_owned());
        out.push(PiStatus {
            name: name.clone(),
            role: "self",
            leaves: leaves(&store)?,
            published: outbox(&store, name)?.0,
            last_seal: last_seal(&store)?,
            verified_at: None,
            checkpoint: None,
            alarm,
        });
    }
    for peer in &config.peers {
        let path = receive::replica_path(&dir, &peer.name);
        let alarm = std::fs::read_to_string(receive::alarm_path(&dir, &peer.name))
            .ok()
            .map(|a| a.trim().to_owned());
        let mut s = PiStatus {
            name: peer.name.clone(),
            role: "replica",
            leaves: 0,
            published: 0,
            last_seal: None,
            verified_at: None,
            checkpoint: None,
            alarm,
        };
        if path.exists() {
            let store = Store::open(&path, &options)?;
            s.leaves = leaves(&store)?;
            s.last_seal = last_seal(&store)?;
            if let Some((_, note, verified_at)) = inbox(&store, &peer.name)? {
                s.published =
                    kura_tlog::checkpoint::open(&note, &peer.log_verifier).map_or(0, |c| c.size);
                s.verified_at = Some(verified_at);
                s.checkpoint = Some(note);
            }
        }
        out.push(s);
    }
    Ok(out)
}

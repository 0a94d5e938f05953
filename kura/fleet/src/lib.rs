//! Kura across a fleet of Pis: each Pi publishes its sealed history from its seal log to a
//! NATS JetStream hub (SQLite is the outbox, [`publish`]), and keeps read-only replicas of
//! the others that are written only after every hash, seal signature and the origin's
//! signed checkpoint is checked ([`receive`]). The hub can delay or withhold, never forge.
//!
//! What to publish next, what the hub's answers mean and when to raise an ALARM are
//! decided with no I/O ([`decide`], and `pending` for what a received batch must verify
//! against); JetStream is an adapter beside them ([`port`]).
//!
//! Each Pi's stream and object store and the checkpoints bucket ([`hub`]) are made by the hub's operator; a Pi may only
//! publish under its own name (the hub's leaf-node permissions, made by `kura fleet add-pi`).

pub mod decide;
pub mod files;
pub mod hub;
#[cfg(test)]
mod memory;
pub mod operator;
mod pending;
pub mod port;
pub mod publish;
pub mod receive;
pub mod status;
mod wire;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `[fleet]` in `serve.toml`: this Pi's name, whether it publishes, and the Pis it keeps
/// replicas of (each pinned by its log's verifier key).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FleetConfig {
    /// This Pi's name in the fleet (a subject token); unset: not in a fleet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Publish this Pi's sealed history to the hub.
    pub publish: bool,
    /// Where replicas live (`<pi>.db`, and `<pi>.alarm` when one was refused); unset:
    /// `replicas/` beside the database.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas_dir: Option<PathBuf>,
    /// The other Pis this one keeps verified replicas of.
    pub peers: Vec<FleetPeer>,
    /// The publisher wakes on the database's commits (inotify on its directory: a seal in
    /// any process is a commit); this is how often it looks anyway, in case a wake was
    /// missed or inotify is unavailable (then this is its only timer).
    pub poll_ms: u64,
    /// Most bytes a receiver holds of an origin's history not yet covered by a checkpoint.
    pub max_pending_bytes: u64,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            name: None,
            publish: true,
            replicas_dir: None,
            peers: Vec::new(),
            poll_ms: 250,
            max_pending_bytes: 64 * 1024 * 1024,
        }
    }
}

/// Another Pi whose history this one replicates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetPeer {
    /// Its fleet name.
    pub name: String,
    /// Its log's verifier key (that Pi's `[serve] log_verifier`; `kura log-key show --key FILE` prints it): its checkpoints
    /// are checked with this key and no other.
    pub log_verifier: String,
    /// Its install's identities (public keys only): when set, every ledger must be sealed by
    /// one of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keyring: Option<PathBuf>,
}

impl FleetConfig {
    /// Where replicas live for the database at `db`.
    pub fn replicas_dir(&self, db: &std::path::Path) -> PathBuf {
        self.replicas_dir.clone().unwrap_or_else(|| {
            db.parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."))
                .join("replicas")
        })
    }

    /// Checks the names and keys, so a bad config fails at start with what to fix.
    pub fn check(&self) -> Result<(), FleetError> {
        let mut names = Vec::new();
        if let Some(n) = &self.name {
            proto::fleet::check_pi_name(n).map_err(|e| FleetError::Config(e.to_string()))?;
            names.push(n.as_str());
        }
        for p in &self.peers {
            proto::fleet::check_pi_name(&p.name).map_err(|e| FleetError::Config(e.to_string()))?;
            if names.contains(&p.name.as_str()) {
                return Err(FleetError::Config(format!(
                    "[fleet] names {:?} twice (this Pi and each peer need their own name)",
                    p.name
                )));
            }
            names.push(&p.name);
            kura_tlog::checkpoint::open_verifier(&p.log_verifier).map_err(|e| {
                FleetError::Config(format!(
                    "[[fleet.peers]] {}: log_verifier: {e} (that Pi's [serve] log_verifier: `kura log-key show --key FILE` there)",
                    p.name
                ))
            })?;
        }
        if self.name.is_none() && self.publish && !self.peers.is_empty() {
            return Err(FleetError::Config(
                "[fleet] has peers but no name: set [fleet] name (this Pi's name in the fleet)"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// Why a fleet operation did not happen.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FleetError {
    /// The hub could not be reached or refused a request (not the data's fault).
    #[error("hub: {0}")]
    Hub(String),
    /// The hub has no room for what was asked (JetStream reserves each quota up front).
    #[error("hub full: {0}")]
    HubFull(String),
    /// An object a message points at is not on the hub (not a delay: it is not there).
    #[error("hub: {0}")]
    Missing(String),
    /// What an origin sent does not verify: nothing of it is written (an ALARM).
    #[error("refused {origin}'s history: {why}")]
    Refused {
        /// The Pi whose history it is.
        origin: String,
        /// What did not hold.
        why: String,
    },
    /// This Pi's own history and what the hub holds under its name differ (an ALARM).
    #[error("{0}")]
    Diverged(String),
    /// The local store failed.
    #[error(transparent)]
    Store(#[from] kura_store::StoreError),
    /// The configuration is wrong.
    #[error("{0}")]
    Config(String),
}

impl FleetError {
    /// An error from the hub's client, with its message.
    pub(crate) fn hub(e: impl std::fmt::Display) -> FleetError {
        FleetError::Hub(e.to_string())
    }
}

/// Shorthand.
pub type Result<T, E = FleetError> = std::result::Result<T, E>;

//! What `kura serve` reads from its config file (`serve.toml`): the schedule, the signer, the
//! witnesses, the keyring and the console. Apart from the daemon so the CLI's checkpoint and
//! verify commands read the same settings without depending on the daemon's code.

use std::path::PathBuf;

use kura_runtime::Common;
use serde::{Deserialize, Serialize};

use crate::witnessing::{GitWitness, WitnessPeer};

/// `kura serve`'s configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServeConfig {
    /// Settings shared by every daemon.
    pub common: Common,
    /// Maintenance schedule.
    pub serve: Maintenance,
    /// The web console.
    pub console: kura_console::ConsoleConfig,
    /// Outside agents (MCP at `/mcp`, JSON routes under `/agent/v1/`), served beside the
    /// console when `registry` is set.
    pub agents: kura_agents::AgentsConfig,
    /// A fleet of Pis: this Pi's name, publishing its sealed history to the hub, and the
    /// verified replicas it keeps of the others.
    pub fleet: kura_fleet::FleetConfig,
    /// Who may grant writs (checked by `kura writ grant` and `revoke`).
    pub writs: kura_policy::writ::WritsConfig,
    /// Sessions exported as OpenTelemetry traces (`[traces] endpoint`; off unless set).
    pub traces: kura_traces::TracesConfig,
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
    /// Git repositories that receive every checkpoint as a commit (and push it).
    pub witness_git: Vec<GitWitness>,
    /// Other Kuras that cosign this log's checkpoints over their bus.
    pub witness_peers: Vec<WitnessPeer>,
    /// The logs (their verifier keys) this Kura witnesses for others over its own bus.
    pub witness_logs: Vec<String>,
    /// The key this Kura cosigns others' checkpoints with; unset:
    /// `$CREDENTIALS_DIRECTORY/witness.key`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub witness_key: Option<PathBuf>,
    /// The install's identities (`identities.toml`, public keys only): `kura verify` checks
    /// that every ledger was sealed by one of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keyring: Option<PathBuf>,
    /// Where it keeps the last checkpoint it cosigned for each log; unset: `<db>.witnessed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub witness_state: Option<PathBuf>,
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
            witness_git: Vec::new(),
            witness_peers: Vec::new(),
            witness_logs: Vec::new(),
            witness_key: None,
            keyring: None,
            witness_state: None,
        }
    }
}

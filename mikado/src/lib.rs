//! Mikado: starts and supervises the bundled `nats-server` (generated config, loopback by
//! default, restarted with backoff if it dies, stopped on exit). With an external NATS
//! configured it leaves the server alone. Memory extraction arrives in a later issue.

mod supervisor;

use std::future::Future;

use serde::{Deserialize, Serialize};

pub use supervisor::supervise;

/// Mikado's configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Settings shared by every daemon (`nats_url` says where the server listens).
    pub common: kura::runtime::Common,
    /// The bundled server.
    pub nats: NatsConfig,
}

/// How the bundled nats-server runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NatsConfig {
    /// `embedded`: mikado runs the bundled server at `common.nats_url`; `external`: someone
    /// else runs NATS and mikado leaves it alone.
    pub mode: String,
    /// Path of the nats-server binary; empty means `$NATS_SERVER_BIN`, then next to our own
    /// binaries, then `$PATH`.
    pub binary: String,
    /// Longest wait between restarts of a server that keeps dying.
    pub max_backoff_ms: u64,
    /// Where the generated server config is written; empty means the system temp dir.
    pub config_dir: String,
}

impl Default for NatsConfig {
    fn default() -> Self {
        NatsConfig {
            mode: "embedded".into(),
            binary: String::new(),
            max_backoff_ms: 5000,
            config_dir: String::new(),
        }
    }
}

/// Runs mikado until `shutdown` resolves.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    match config.nats.mode.as_str() {
        "embedded" => supervise(&config, shutdown).await,
        "external" => {
            tracing::info!(url = %config.common.nats_url, "external NATS configured; not starting nats-server");
            shutdown.await;
            Ok(())
        }
        other => anyhow::bail!("nats.mode must be \"embedded\" or \"external\", not {other:?}"),
    }
}

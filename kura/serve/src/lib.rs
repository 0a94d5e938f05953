//! `kura serve`: the fifth daemon — the checkpoint signer and its witnesses, the integrity
//! sweeps, WAL checkpoints and backups on a schedule, the console and the outside agents'
//! surface, and this Pi's part in a fleet. It runs on the daemons' shared [`Daemon`]
//! lifecycle (`run(config, shutdown)`); each part owns its loop, and one shutdown stops them.
//! The `kura` command line is its thin `main` (`kura serve`); the settings and the
//! checkpoint files it shares with `kura verify` and `kura checkpoint` are [`config`] and
//! [`anchor`].

pub mod anchor;
mod commits;
pub mod config;
mod duties;
mod replicate;
mod signer;
mod surfaces;
pub mod witnessing;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use kura_runtime::Daemon;
use kura_store::Store;
use kura_tlog::checkpoint::LogKey;
use kura_tlog::cosign::Witness;

pub use config::ServeConfig;

// The parts' own vocabularies, which [`ServeConfig`] carries: what the command line reaches
// through this daemon when it manages a part (an agent's token, a fleet's replica, a bus key,
// the log's checkpoints).
pub use {
    kura_agents as agents, kura_client as client, kura_fleet as fleet, kura_history as history,
    kura_memory as memory, kura_runtime as runtime, kura_tlog as tlog, kura_up as up,
};

use crate::duties::Duties;
use crate::signer::Signer;

/// This Kura as a witness for other Kuras' logs — those in `witness_logs` and its fleet
/// peers' — when it has a witness key: one witness, one state directory, so one key never
/// cosigns two inconsistent checkpoints of a log.
fn load_witness(config: &ServeConfig) -> anyhow::Result<Option<Witness>> {
    let mut logs = config.serve.witness_logs.clone();
    for p in &config.fleet.peers {
        if !logs.iter().any(|l| l.trim() == p.log_verifier.trim()) {
            logs.push(p.log_verifier.clone());
        }
    }
    if logs.is_empty() {
        return Ok(None);
    }
    let path = config.serve.witness_key.clone().or_else(|| {
        std::env::var_os("CREDENTIALS_DIRECTORY")
            .map(|d| PathBuf::from(d).join("witness.key"))
            .filter(|p| p.exists())
    });
    let path = match path {
        Some(p) => p,
        None if config.serve.witness_logs.is_empty() => {
            tracing::info!("fleet: no witness key, so replicas verify but do not cosign");
            return Ok(None);
        }
        None => anyhow::bail!("[serve] witness_logs is set but no witness_key"),
    };
    let key = LogKey::load(&path)?;
    let state = config.serve.witness_state.clone().unwrap_or_else(|| {
        let mut p = config.common.db.as_os_str().to_owned();
        p.push(".witnessed");
        PathBuf::from(p)
    });
    Ok(Some(Witness::new(key, logs, &state)?))
}

/// Runs `kura serve` until `shutdown` resolves, on the daemons' shared lifecycle
/// ([`Daemon`]): heartbeat, an optional bus, one scheduler thread, an ordered stop.
pub async fn run(config: ServeConfig, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let common = config.common.clone();
    let store = Store::open(&common.db, &common.store_options()?)?;
    let signer = Signer::load(&config)?.map(Arc::new);
    // The bus only when this Kura witnesses others (it answers their requests there) or
    // serves the console (which relays people's signed decisions to aegis).
    let witness = load_witness(&config)?.map(Arc::new);
    let fleet = config.fleet.name.is_some() || !config.fleet.peers.is_empty();
    let wants_bus = witness.is_some() || config.console.listen.is_some() || fleet;
    let mut daemon = Daemon::start_bus_optional("kura", &common, wants_bus).await?;
    if let (Some(w), Some(bus)) = (&witness, daemon.bus())
        && !config.serve.witness_logs.is_empty()
    {
        tracing::info!(verifier = %w.verifier(), logs = ?config.serve.witness_logs, "witnessing other logs");
        witnessing::answer(bus, w.clone()).await?;
    }
    let (fleet_stop, fleet_stopped) = tokio::sync::watch::channel(false);
    if let (true, Some(bus)) = (fleet, daemon.bus().cloned()) {
        let sign = signer
            .clone()
            .map(|s| s as Arc<dyn crate::replicate::SignAt>);
        crate::replicate::start(
            &config,
            &bus,
            sign,
            witness.clone(),
            &mut daemon,
            fleet_stopped,
        )?;
    }
    let (console_stop, console) = surfaces::start_console(&config, daemon.bus().cloned()).await?;
    // Traces from their own cursor over the seal log, on this runtime: a receiver away or
    // slow holds up nobody's turn.
    let (traces_stop, traces_stopped) = tokio::sync::watch::channel(false);
    let traces = config.traces.endpoint.is_some().then(|| {
        let (t, db, options) = (
            config.traces.clone(),
            common.db.clone(),
            common.store_options(),
        );
        tokio::spawn(async move {
            let options = options.map_err(|e| anyhow::anyhow!("{e}"))?;
            kura_traces::run(t, db, options, traces_stopped).await
        })
    });
    let duties = Duties {
        store,
        signer,
        keyring: sweep_keyring(&config),
        people: config.writs.issuers.clone(),
        m: config.serve.clone(),
        detail: Box::new(daemon.detail_setter()),
    };
    daemon.thread("kura-serve", move |stop| duties.run(&stop))?;
    daemon
        .run(async move {
            shutdown.await;
            let _ = fleet_stop.send(true);
            let _ = traces_stop.send(true);
            if let Some(t) = traces
                && let Ok(Err(e)) = t.await
            {
                tracing::error!(error = %format!("{e:#}"), "traces stopped");
            }
            drop(console_stop);
            if let Some(c) = console {
                let _ = c.await;
            }
        })
        .await
}

/// The sweep checks who sealed each ledger too, against the keyring (retired keys included,
/// each up to where its successor began).
fn sweep_keyring(config: &ServeConfig) -> Option<kura_tlog::sealer::Keyring> {
    match anchor::keyring(config.serve.keyring.clone()) {
        Ok(k) => k,
        // The signer and the sweep's hash checks matter more than naming sealers.
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "[serve] keyring cannot be read; the sweep checks seal signatures but not who made them");
            None
        }
    }
}

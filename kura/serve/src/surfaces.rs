//! What `kura serve` serves over HTTP: the console and, beside it, the outside agents' MCP
//! and JSON routes — one listener, one stop.

use kura_runtime::Bus;
use kura_store::Store;

use crate::anchor;
use crate::config::ServeConfig;

/// The outside agents' MCP and HTTP routes when `[agents] registry` is set: a store handle of
/// their own (sealed with this daemon's key) and the bus to ring aegis, minato and mikado.
fn agent_routes(config: &ServeConfig, bus: Option<Bus>) -> anyhow::Result<Option<axum::Router>> {
    let Some(registry) = config.agents.registry.clone() else {
        return Ok(None);
    };
    let common = &config.common;
    let store = Store::open(&common.db, &common.store_options()?)?;
    // Only `Host` names it knows are answered (DNS rebinding), and only the console's own
    // browser origins: loopback's by default; on a LAN address, the configured names and the
    // address itself.
    let hosts = match config.console.listen {
        Some(addr) if !addr.ip().is_loopback() => {
            let mut h = config.agents.hosts.clone();
            h.extend([
                "localhost".to_owned(),
                "127.0.0.1".to_owned(),
                addr.ip().to_string(),
            ]);
            h
        }
        _ => Vec::new(),
    };
    tracing::info!(registry = %registry.display(), "outside agents: MCP at /mcp, HTTP under /agent/v1/");
    let surface = std::sync::Arc::new(kura_agents::Surface {
        gateway: kura_agents::Gateway::new(config.agents.clone(), store, bus)
            .with_people(config.writs.issuers.clone()),
        registry: kura_agents::registry::Registry::new(registry),
    });
    // A waiting agent is woken by the decision and completion doorbells.
    let listening = surface.clone();
    tokio::spawn(async move {
        if let Err(e) = listening.gateway.listen().await {
            tracing::warn!(error = %e, "outside agents: no doorbells; their waits poll SQLite");
        }
    });
    let port = config.console.listen.map_or(0, |a| a.port());
    let guard = kura_agents::guard::Guard::new(hosts, port);
    Ok(Some(kura_agents::router(surface, guard)))
}

/// Starts the console when `[console] listen` is set: its own read connection, the bus to
/// relay decisions, aegis's key from the keyring to check verdicts. Dropping the returned
/// sender stops it.
#[allow(clippy::type_complexity)]
pub(crate) async fn start_console(
    config: &ServeConfig,
    bus: Option<Bus>,
) -> anyhow::Result<(
    tokio::sync::oneshot::Sender<()>,
    Option<tokio::task::JoinHandle<()>>,
)> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    if config.console.listen.is_none() {
        return Ok((tx, None));
    }
    let common = &config.common;
    let store = Store::open(&common.db, &common.store_options()?)?;
    let aegis_key = match &config.console.aegis_key {
        Some(k) => Some(k.clone()),
        None => match &config.serve.keyring {
            Some(ring) => {
                kura_runtime::identity::Identities::load_file(&anchor::readable_keyring(ring))?
                    .list
                    .into_iter()
                    .find(|i| i.name == "aegis")
                    .and_then(|i| i.signer)
            }
            None => None,
        },
    };
    if aegis_key.is_none() {
        tracing::warn!(
            "console: aegis's key is unknown ([serve] keyring or [console] aegis_key); approvals cannot be relayed"
        );
    }
    let m = &config.serve;
    let trust = kura_console::Trust {
        checkpoint_file: Some(kura_tlog::witness::head_file(
            m.checkpoint_file.as_deref(),
            &common.db,
        )),
        witnesses: m
            .witness_dirs
            .iter()
            .chain(m.witness_git.iter().map(|g| &g.path))
            .map(|p| p.display().to_string())
            .collect(),
        peers: m.witness_peers.iter().map(|p| p.name.clone()).collect(),
        log_verifier: m.log_verifier.clone(),
        sealers: match &m.keyring {
            Some(ring) => anchor::keyring(Some(ring.clone()))?,
            None => None,
        },
        fleet: (config.fleet.name.is_some() || !config.fleet.peers.is_empty())
            .then(|| (config.fleet.clone(), common.db.clone())),
        objects: Some(kura_history::objects::Objects::beside(&common.db)),
        issuers: config.writs.issuers.clone(),
    };
    let agents = agent_routes(config, bus.clone())?;
    let console = kura_console::Console::new(config.console.clone(), store, bus, aegis_key, trust)?;
    let Some(listening) = kura_console::bind(console, agents).await? else {
        return Ok((tx, None));
    };
    let task = tokio::spawn(listening.serve(async move {
        let _ = rx.await;
    }));
    Ok((tx, Some(task)))
}

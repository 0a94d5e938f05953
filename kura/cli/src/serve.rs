//! `kura serve`: the fifth daemon — integrity sweeps, WAL checkpoints, backups and signed
//! checkpoints on a schedule, woken only by its next deadline or by shutdown. It runs on the
//! daemons' shared [`Daemon`] lifecycle; its bus is connected only when it needs one.

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use kura_runtime::bus::Credentials;
use kura_runtime::{Bus, Daemon, Stop};
use kura_store::Store;
use kura_tlog::checkpoint::LogKey;
use kura_tlog::cosign::Witness;
use kura_tlog::witness;
use kura_work::ops::{backup, sweep};

use crate::serve_config::{Maintenance, ServeConfig};
use crate::witnessing::{self, Asked, GitWitness, Handed, WitnessPeer};

/// The checkpoint signer: the log key, where its last checkpoint lives, its witnesses.
struct Signer {
    key: LogKey,
    /// The key's file when configured (a person signs with it by hand).
    key_path: Option<PathBuf>,
    state: PathBuf,
    /// Rounds refused since start (an ALARM each).
    refused: std::sync::atomic::AtomicU64,
    witnesses: Vec<PathBuf>,
    git: Vec<GitWitness>,
    peers: Vec<WitnessPeer>,
    /// This daemon's bus identity (peers list it) and the subjects' prefix.
    own: Credentials,
    subject: String,
    runtime: tokio::runtime::Handle,
    /// One round at a time (the scheduler and the fleet publisher both sign).
    lock: std::sync::Mutex<()>,
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
            key_path: config.serve.log_key.clone(),
            refused: std::sync::atomic::AtomicU64::new(0),
            state: crate::tlog::state_file(
                config.serve.checkpoint_file.as_deref(),
                &config.common.db,
            ),
            witnesses: config.serve.witness_dirs.clone(),
            git: config.serve.witness_git.clone(),
            peers: config.serve.witness_peers.clone(),
            own: if config.serve.witness_peers.iter().any(|p| p.seed.is_none()) {
                Credentials::from_common(&config.common)?
            } else {
                Credentials::default()
            },
            subject: config.common.subjects()?.witness_add_checkpoint(),
            runtime: tokio::runtime::Handle::current(),
            lock: std::sync::Mutex::new(()),
        }))
    }

    /// Logs and counts a refusal to sign; what `kura status` shows until it is resolved.
    fn alarm(&self, why: String) -> String {
        let n = self
            .refused
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        tracing::error!(%why, refused_rounds = n, "ALARM: not signing a checkpoint");
        format!("ALARM: {why} ({n} rounds refused since start)")
    }

    /// Signs the log as it is now unless it does not extend the last checkpoint, has peers
    /// cosign it, then hands it to every witness. Returns what `kura status` should show.
    fn round(&self, store: &Store) -> String {
        let _one = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let last = match crate::tlog::read_head(&self.state) {
            Ok(last) => last,
            Err(e) => return self.alarm(format!("{e:#}; not signing")),
        };
        let (mut note, cp) =
            match witness::sign_next(&store.seal_log(), &self.key, last.as_deref(), false) {
                Ok(Ok(signed)) => signed,
                Ok(Err(why @ witness::Refusal::NoHead { .. })) => {
                    let help = crate::tlog::no_head_help(&self.state, self.key_path.as_deref());
                    return self.alarm(format!("{why}: {help}"));
                }
                Ok(Err(why)) => return self.alarm(why.to_string()),
                Err(e) => {
                    tracing::error!(error = %e, "cannot sign a checkpoint");
                    return format!("checkpoint failed: {e}");
                }
            };
        let mut alarms = Vec::new();
        let mut cosigned = Vec::new();
        for peer in &self.peers {
            let asked = self.runtime.block_on(witnessing::ask(
                peer,
                &self.own,
                &self.subject,
                &store.seal_log(),
                &note,
            ));
            match asked {
                Asked::Cosigned(with) => {
                    note = with;
                    cosigned.push(peer.name.clone());
                }
                Asked::Refused(why) => {
                    tracing::error!(witness = %peer.name, %why, "ALARM: a witness refused the checkpoint");
                    alarms.push(why);
                }
                Asked::Unreachable(why) => {
                    tracing::warn!(witness = %peer.name, %why, "witness not reachable")
                }
            }
        }
        // Unchanged (the log did not grow and no peer cosigned anew): no write.
        if last.as_deref() != Some(note.as_str())
            && let Err(e) = witness::save_last(&self.state, &note)
        {
            tracing::error!(error = %e, "cannot keep the checkpoint");
        }
        let vkey = self.key.verifier();
        let dirs = self.witnesses.iter().map(|d| {
            (
                d.display().to_string(),
                witness::publish(d, &store.seal_log(), &note, &cp, vkey)
                    .map(|answer| match answer {
                        Ok(()) => Handed::Kept,
                        Err(why) => Handed::Refused(why.to_string()),
                    })
                    .map_err(anyhow::Error::from),
            )
        });
        let gits = self.git.iter().map(|g| {
            (
                g.path.display().to_string(),
                witnessing::publish_git(g, &store.seal_log(), &note, &cp, vkey),
            )
        });
        for (name, outcome) in dirs.chain(gits) {
            match outcome {
                Ok(Handed::Kept) => {}
                Ok(Handed::Refused(why)) => {
                    tracing::error!(witness = %name, %why, "ALARM: a witness refused the checkpoint");
                    alarms.push(why);
                }
                Err(e) => tracing::warn!(witness = %name, error = %e, "witness not reachable"),
            }
        }
        tracing::info!(size = cp.size, cosigned_by = ?cosigned, "checkpoint signed");
        match alarms.first() {
            Some(why) => format!("ALARM: {why}"),
            None if cosigned.is_empty() => format!("checkpoint {}", cp.size),
            None => format!("checkpoint {} cosigned by {}", cp.size, cosigned.join(", ")),
        }
    }
}

impl crate::fleet_serve::SignAt for Signer {
    /// The signer's last checkpoint when it is at `size` (after a round when the log grew
    /// past it); for a smaller size, a checkpoint of that prefix, signed only while the log
    /// still extends the last checkpoint (so it is consistent with everything signed).
    fn note_at(&self, store: &Store, size: u64) -> Option<String> {
        let head = |s: &Signer| {
            let note = crate::tlog::read_head(&s.state).ok()??;
            let cp = kura_tlog::checkpoint::open(&note, s.key.verifier()).ok()?;
            Some((note, cp))
        };
        let mut last = head(self);
        if last.as_ref().is_none_or(|(_, cp)| cp.size < size) {
            let outcome = self.round(store);
            if outcome.starts_with("ALARM") {
                return None;
            }
            last = head(self);
        }
        let (note, cp) = last?;
        if cp.size == size {
            return Some(note);
        }
        let _one = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        if !matches!(
            kura_tlog::checkpoint::extends(&store.seal_log(), &cp),
            Ok(Ok(()))
        ) || size > cp.size
        {
            return None;
        }
        let root = kura_tlog::seallog::root(&store.seal_log(), size).ok()?;
        self.key.sign(size, root).ok()
    }
}

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

/// The outside agents' MCP and HTTP routes when `[agents] registry` is set: a store handle of
/// their own (sealed with this daemon's key) and the bus to ring aegis, minato and mikado.
fn agent_routes(config: &ServeConfig, bus: Option<Bus>) -> anyhow::Result<Option<axum::Router>> {
    let Some(registry) = config.agents.registry.clone() else {
        return Ok(None);
    };
    let common = &config.common;
    let store = Store::open(&common.db, &common.store_options()?)?;
    // rmcp answers only `Host` headers it knows (DNS rebinding): loopback's by default; on a
    // LAN address, the configured names and the address itself.
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
    Ok(Some(kura_agents::router(surface, hosts)))
}

/// Starts the console when `[console] listen` is set: its own read connection, the bus to
/// relay decisions, aegis's key from the keyring to check verdicts. Dropping the returned
/// sender stops it.
#[allow(clippy::type_complexity)]
async fn start_console(
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
                kura_runtime::identity::Identities::load_file(&crate::tlog::readable_keyring(ring))?
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
        checkpoint_file: Some(crate::tlog::state_file(
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
            Some(ring) => crate::tlog::keyring(Some(ring.clone()))?,
            None => None,
        },
        fleet: (config.fleet.name.is_some() || !config.fleet.peers.is_empty())
            .then(|| (config.fleet.clone(), common.db.clone())),
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

/// Runs `kura serve` until `shutdown` resolves, on the daemons' shared lifecycle
/// ([`Daemon`]): heartbeat, an optional bus, one scheduler thread, an ordered stop.
pub async fn serve(config: ServeConfig, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let common = config.common.clone();
    let store = Store::open(&common.db, &common.store_options()?)?;
    let signer = Signer::load(&config)?.map(std::sync::Arc::new);
    // The bus only when this Kura witnesses others (it answers their requests there) or
    // serves the console (which relays people's signed decisions to aegis).
    let witness = load_witness(&config)?.map(std::sync::Arc::new);
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
            .map(|s| s as std::sync::Arc<dyn crate::fleet_serve::SignAt>);
        crate::fleet_serve::start(
            &config,
            &bus,
            sign,
            witness.clone(),
            &mut daemon,
            fleet_stopped,
        )?;
    }
    let (console_stop, console) = start_console(&config, daemon.bus().cloned()).await?;
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
    match crate::tlog::keyring(config.serve.keyring.clone()) {
        Ok(k) => k,
        // The signer and the sweep's hash checks matter more than naming sealers.
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "[serve] keyring cannot be read; the sweep checks seal signatures but not who made them");
            None
        }
    }
}

/// What the scheduler thread does, each on its own interval: sign a checkpoint, checkpoint
/// the WAL, sweep, back up.
struct Duties {
    store: Store,
    signer: Option<std::sync::Arc<Signer>>,
    keyring: Option<kura_tlog::sealer::Keyring>,
    /// Whose redactions the sweep accepts (`[writs] issuers`).
    people: Vec<kura_policy::writ::Issuer>,
    m: Maintenance,
    /// Sets what `kura status` shows beside this daemon.
    detail: Box<dyn Fn(String) + Send>,
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
    fn run(mut self, stop: &Stop) {
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
            (self.detail)(signer.round(store));
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

//! `kura fleet …`: a fleet of Pis — the hub's configs and keys (`init-hub`, `add-pi`), its
//! stream and buckets (`setup-hub`), what each Pi sees of the others (`status`) and a dead
//! Pi rebuilt from the hub (`restore`).

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Subcommand;
use kura_fleet::status::PiStatus;
use kura_runtime::bus::Credentials;

use super::{Ctx, Outcome};

/// A fleet of Pis replicating through a JetStream hub.
#[derive(Debug, Subcommand)]
pub enum FleetCmd {
    /// Each Pi as this one sees it: last seal, what the hub holds, the checkpoint each
    /// replica verified and who cosigned it, alarms.
    Status,
    /// Write the configs and keys of a hub of 1 or 3 JetStream nodes into a directory.
    InitHub(crate::fleet_hub::InitHub),
    /// Let a Pi join the hub as a leaf node: its leaf key, and the hub's configs rewritten.
    AddPi(crate::fleet_hub::AddPi),
    /// Make the hub's streams and buckets for every Pi `add-pi` let in (with the hub's
    /// operator key; run again after each `add-pi`).
    SetupHub(crate::fleet_hub::SetupHub),
    /// Rebuild a Pi's database from the hub, verified against its last checkpoint.
    Restore(Restore),
}

/// Where the hub is and who connects to it.
#[derive(Debug, clap::Args)]
pub struct HubConn {
    /// A hub node's client URL (`tls://hub.lan:4222`).
    #[arg(long)]
    pub url: String,
    /// The identity's seed file: the hub operator's `hub-admin.seed`, or on the Pi its
    /// `serve` seed when its bus is joined to the hub.
    #[arg(long)]
    pub seed: PathBuf,
    /// The CA of the server at `--url` (`hub-ca.pem`, or the Pi's `nats-ca.pem`).
    #[arg(long)]
    pub ca: Option<PathBuf>,
}

/// `kura fleet restore`.
#[derive(Debug, clap::Args)]
pub struct Restore {
    /// The Pi to restore (its fleet name).
    pub pi: String,
    /// Its log's verifier key (kept off the Pi: the fleet's config, a witness, a note).
    #[arg(long)]
    pub log_verifier: String,
    /// The new database (must not exist).
    #[arg(long)]
    pub to: PathBuf,
    /// Where the signer's head goes (`[serve] checkpoint_file`; on an installed Pi
    /// `/var/lib/kura-serve/checkpoint`); default: `<to>.checkpoint`. Must not exist.
    #[arg(long)]
    pub checkpoint_file: Option<PathBuf>,
    #[command(flatten)]
    pub hub: HubConn,
}

impl FleetCmd {
    /// Runs the subcommand.
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        match self {
            FleetCmd::Status => status(ctx),
            FleetCmd::InitHub(c) => c.run(ctx),
            FleetCmd::AddPi(c) => c.run(ctx),
            FleetCmd::SetupHub(c) => c.run(ctx),
            FleetCmd::Restore(r) => r.run(ctx),
        }
    }
}

/// A small runtime for one command.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

impl HubConn {
    /// Connects with the seed and CA given.
    pub(crate) async fn connect(&self) -> anyhow::Result<async_nats::Client> {
        let creds = Credentials {
            key: Some(std::sync::Arc::new(kura_runtime::identity::read_seed(
                &self.seed,
            )?)),
            ca: self.ca.clone(),
        };
        creds.connect_once("kura-fleet", &self.url).await
    }
}

impl Restore {
    fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        proto::fleet::check_pi_name(&self.pi)?;
        anyhow::ensure!(
            !self.to.exists(),
            "{} exists: restore builds a new database (move the old one away first)",
            self.to.display()
        );
        let head = crate::tlog::state_file(self.checkpoint_file.as_deref(), &self.to);
        anyhow::ensure!(
            !head.exists(),
            "{} exists: it is an older signer's head; move it away so the restored log's own checkpoint takes its place",
            head.display()
        );
        let dir = self
            .to
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(std::path::Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        let peer = kura_fleet::FleetPeer {
            name: self.pi.clone(),
            log_verifier: self.log_verifier.clone(),
            keyring: None,
        };
        let rt = runtime()?;
        let built = tempfile::Builder::new()
            .prefix(".kura-restore-")
            .tempdir_in(&dir)
            .with_context(|| format!("cannot write in {}", dir.display()))?;
        let (size, note) = rt.block_on(async {
            let client = self.hub.connect().await?;
            // A restore holds at most one checkpoint's batch at a time, like a receiver.
            let r = kura_fleet::receive::Receiver::new(
                client,
                &peer,
                None,
                built.path(),
                256 << 20,
                None,
            )
            .await?
            .with_people(super::people()?);
            anyhow::Ok(r.catch_up().await?)
        })?;
        let db = kura_fleet::receive::replica_path(built.path(), &self.pi);
        std::fs::rename(&db, &self.to).with_context(|| {
            format!("cannot move the restored database to {}", self.to.display())
        })?;
        kura_tlog::witness::save_last(&head, &note)?;
        ctx.out.line(format!(
            "restored {}: {size} sealed ledgers verified against its checkpoint at size {size}; \
             {} holds that checkpoint, so its signer continues the same log (restore the log key and \
             the bus keys from their backup; work in flight is not replicated)",
            self.to.display(),
            head.display()
        ))?;
        Ok(Outcome::Ok)
    }
}

fn status(ctx: &mut Ctx) -> anyhow::Result<Outcome> {
    let config = crate::tlog::serve_config()?
        .context("no serve.toml: `kura fleet status` reads [fleet] from kura serve's config (KURA_SERVE_CONFIG)")?;
    anyhow::ensure!(
        config.fleet.name.is_some() || !config.fleet.peers.is_empty(),
        "this Pi is not in a fleet: set [fleet] in serve.toml (README: A fleet of Pis)"
    );
    let pis = kura_fleet::status::read(&config.fleet, &ctx.db)?;
    if ctx.json {
        ctx.out.json_sorted(&pis)?;
        return Ok(Outcome::Ok);
    }
    let mut alarm = false;
    for p in &pis {
        ctx.out.line(line(p))?;
        alarm |= p.alarm.is_some();
    }
    Ok(if alarm {
        Outcome::VerifyFailed
    } else {
        Outcome::Ok
    })
}

/// One Pi in a line (also under `kura status`).
pub(crate) fn line(p: &PiStatus) -> String {
    let seal = p.last_seal.as_deref().unwrap_or("never");
    match (p.role, &p.alarm) {
        (_, Some(a)) => format!("{}: ALARM: {}", p.name, proto::text::escape_controls(a)),
        ("self", _) => format!(
            "{} (this Pi): {} sealed, {} on the hub (lag {}), last seal {seal}",
            p.name,
            p.leaves,
            p.published,
            p.leaves.saturating_sub(p.published)
        ),
        _ => format!(
            "{}: replica verified to its checkpoint at size {}, last seal {seal}, verified {}",
            p.name,
            p.published,
            p.verified_at.as_deref().unwrap_or("never")
        ),
    }
}

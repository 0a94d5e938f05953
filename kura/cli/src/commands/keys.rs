//! `kura keys …`: the bus identities an install runs with (seeds never printed, only public
//! keys). One function per subcommand below [`KeysCmd::run`].

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use kura_serve::runtime::identity::{self, Identities, Identity};
use serde::Serialize;

use super::Ctx;
use super::Outcome;
use crate::output::Out;

/// `kura keys ...` (the directory: --dir, $KURA_KEYS_DIR, or /etc/kura/keys).
#[derive(Debug, clap::Subcommand)]
pub enum KeysCmd {
    /// Make a seed per service, the identity list, a local CA and a server certificate.
    Init {
        /// The keys directory (created 0700; refused if it already holds identities).
        #[arg(long, env = "KURA_KEYS_DIR", default_value = "/etc/kura/keys")]
        dir: PathBuf,
        /// Another name or address the bus is reached at (repeatable), e.g. the Pi's LAN
        /// address; localhost and 127.0.0.1 are always in the certificate.
        #[arg(long = "host", value_name = "NAME|ADDR")]
        hosts: Vec<String>,
    },
    /// List who may connect and as what (public keys only).
    List {
        /// The keys directory.
        #[arg(long, env = "KURA_KEYS_DIR", default_value = "/etc/kura/keys")]
        dir: PathBuf,
    },
    /// Let an approver onto the bus with the bus nkey `aegis keygen` printed for them.
    AddApprover {
        /// The keys directory.
        #[arg(long, env = "KURA_KEYS_DIR", default_value = "/etc/kura/keys")]
        dir: PathBuf,
        /// Their name (as in aegis's approvers).
        #[arg(long)]
        name: String,
        /// Their public nkey (U…).
        #[arg(long)]
        nkey: String,
    },
    /// List another Kura that may ask this one to witness (cosign) its seal log.
    AddPeer {
        /// The keys directory.
        #[arg(long, env = "KURA_KEYS_DIR", default_value = "/etc/kura/keys")]
        dir: PathBuf,
        /// A name for it (e.g. its host name).
        #[arg(long)]
        name: String,
        /// Its `serve` identity's bus nkey (U…), from `kura keys list` on that machine.
        #[arg(long)]
        nkey: String,
    },
    /// Take an approver or a peer off the bus.
    Remove {
        /// The keys directory.
        #[arg(long, env = "KURA_KEYS_DIR", default_value = "/etc/kura/keys")]
        dir: PathBuf,
        /// The approver's name.
        name: String,
    },
    /// Give a service a new seed (restart mikado, then the service).
    Rotate {
        /// The keys directory.
        #[arg(long, env = "KURA_KEYS_DIR", default_value = "/etc/kura/keys")]
        dir: PathBuf,
        /// The service: minato, hashi, aegis, mikado, serve, submit or operator.
        name: String,
    },
    /// Issue a bearer token for an outside agent (MCP or HTTP), shown once; its records are
    /// authored `agent:<name>`.
    AddAgent {
        /// The keys directory (the token's hash goes to its agents.toml).
        #[arg(long, env = "KURA_KEYS_DIR", default_value = "/etc/kura/keys")]
        dir: PathBuf,
        /// The agent's name: 1-64 of a-z, 0-9, '.', '_', '-'.
        #[arg(long)]
        name: String,
    },
    /// List the outside agents (names, when their tokens were issued; never a token).
    ListAgents {
        /// The keys directory.
        #[arg(long, env = "KURA_KEYS_DIR", default_value = "/etc/kura/keys")]
        dir: PathBuf,
    },
    /// Remove an outside agent: kura serve refuses its token from its next call.
    RemoveAgent {
        /// The keys directory.
        #[arg(long, env = "KURA_KEYS_DIR", default_value = "/etc/kura/keys")]
        dir: PathBuf,
        /// The agent's name.
        #[arg(long)]
        name: String,
    },
    /// Give an outside agent a new token (the old one is refused from its next call).
    RotateAgent {
        /// The keys directory.
        #[arg(long, env = "KURA_KEYS_DIR", default_value = "/etc/kura/keys")]
        dir: PathBuf,
        /// The agent's name.
        #[arg(long)]
        name: String,
    },
    /// Split an older list's keys: each service logs in with a key derived from its seed and
    /// signs with the seed's own (one key, one purpose). Approvers and peers re-add theirs.
    Upgrade {
        /// The keys directory.
        #[arg(long, env = "KURA_KEYS_DIR", default_value = "/etc/kura/keys")]
        dir: PathBuf,
        /// A name or address the console is reached at (repeatable), for its certificate
        /// when the directory has none yet.
        #[arg(long = "host", value_name = "NAME|ADDR")]
        hosts: Vec<String>,
    },
    /// Write the bus (NATS login) seed derived from a Kura seed, for standard NATS tools: a
    /// Kura seed (a service's, `hub-admin.seed`) is a root secret, and the server admits only
    /// the key derived from it, so `nats --nkey` with the Kura seed itself is refused.
    BusSeed {
        /// The Kura seed file.
        #[arg(long)]
        seed: PathBuf,
        /// Where to write the derived seed (created 0600; refused if it exists).
        #[arg(long)]
        out: PathBuf,
    },
}

/// `kura keys init --json`.
#[derive(Serialize)]
struct Made<'a> {
    /// The keys directory.
    dir: &'a Path,
    /// The names and addresses in the server certificate.
    hosts: &'a [String],
    /// Who may connect, and as what.
    identities: &'a [Identity],
}

/// `kura keys remove --json`.
#[derive(Serialize)]
struct Removed<'a> {
    /// Their bus identity, if they had one.
    bus_identity: Option<&'a Identity>,
    /// The name removed.
    name: &'a str,
}

/// `kura keys upgrade --json`.
#[derive(Serialize)]
struct Upgraded<'a> {
    /// Whether the console got its own certificate.
    console_certificate: bool,
    /// The keys directory.
    dir: &'a Path,
    /// Approvers and peers to list again with their new bus keys.
    relist: &'a [Identity],
}

impl KeysCmd {
    /// Runs one `kura keys` subcommand (the store, if any, is only read by `rotate`).
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        let (out, json) = (&mut ctx.out, ctx.json);
        match self {
            KeysCmd::Init { dir, hosts } => init(out, json, &dir, &hosts)?,
            KeysCmd::List { dir } => list(out, json, &dir)?,
            KeysCmd::AddApprover { dir, name, nkey } => {
                add_approver(out, json, &dir, &name, &nkey)?
            }
            KeysCmd::AddPeer { dir, name, nkey } => add_peer(out, json, &dir, &name, &nkey)?,
            KeysCmd::Remove { dir, name } => remove(out, json, &dir, &name)?,
            KeysCmd::Rotate { dir, name } => {
                rotate(out, json, ctx.db_given.as_deref(), &dir, &name)?
            }
            KeysCmd::Upgrade { dir, hosts } => upgrade(out, json, &dir, &hosts)?,
            KeysCmd::AddAgent { dir, name } => super::agents::add(out, json, &dir, &name)?,
            KeysCmd::ListAgents { dir } => super::agents::list(out, json, &dir)?,
            KeysCmd::RemoveAgent { dir, name } => super::agents::remove(out, json, &dir, &name)?,
            KeysCmd::RotateAgent { dir, name } => super::agents::rotate(out, json, &dir, &name)?,
            KeysCmd::BusSeed { seed, out: file } => bus_seed(out, &seed, &file)?,
        }
        Ok(Outcome::Ok)
    }
}

fn show(out: &mut Out, id: &Identity) -> std::io::Result<()> {
    out.line(format!(
        "{:<10} {:<9} bus {}{}",
        id.name,
        id.role.name(),
        id.nkey,
        id.signer
            .as_ref()
            .map(|s| format!("  signs {s}"))
            .unwrap_or_default()
    ))
}

/// The seal log's size in the store at `db` (else the serve config's), if there is one: where
/// a rotated key stops.
fn seal_log_size(db: Option<&std::path::Path>) -> anyhow::Result<Option<u64>> {
    let path = match db {
        Some(p) => Some(p.to_path_buf()),
        None => kura_serve::anchor::serve_config()?.map(|c| c.common.db),
    };
    let Some(path) = path.filter(|p| p.exists()) else {
        return Ok(None);
    };
    // Read only, and no migration: this may run as root on a file the daemons can write.
    let size = kura_store::seal_log_size_read_only(&path)
        .with_context(|| format!("cannot read the store {}", path.display()))?;
    Ok(Some(size))
}

fn init(out: &mut Out, json: bool, dir: &Path, hosts: &[String]) -> anyhow::Result<()> {
    let made = identity::init(dir, hosts)?;
    if json {
        return out.json_sorted(&Made {
            dir,
            hosts: &made.hosts,
            identities: &made.identities.list,
        });
    }
    out.line(format!(
        "Bus keys written to {} (seeds 0600; never commit or copy them off this machine).",
        dir.display()
    ))?;
    for id in &made.identities.list {
        show(out, id)?;
    }
    out.line(format!(
        "TLS certificate for: {} (clients pin {})",
        made.hosts.join(", "),
        dir.join(identity::CA_FILE).display()
    ))?;
    Ok(())
}

fn list(out: &mut Out, json: bool, dir: &Path) -> anyhow::Result<()> {
    let ids = Identities::load(dir)?;
    if json {
        out.json(&ids.list)?;
    } else {
        for id in &ids.list {
            show(out, id)?;
        }
    }
    Ok(())
}

fn add_approver(
    out: &mut Out,
    json: bool,
    dir: &Path,
    name: &str,
    nkey: &str,
) -> anyhow::Result<()> {
    let id = identity::add_approver(dir, name, nkey)?;
    if json {
        return out.json(&id);
    }
    out.line(format!(
        "{} may now ask aegis and send decisions once mikado restarts \
         (systemctl restart kura-mikado). Give them {} and aegis's statement key:",
        id.name,
        dir.join(identity::CA_FILE).display()
    ))?;
    if let Some(signer) = Identities::load(dir)?
        .get("aegis")
        .and_then(|a| a.signer.clone())
    {
        out.line(format!("  reply_key = \"{signer}\""))?;
    }
    Ok(())
}

fn add_peer(out: &mut Out, json: bool, dir: &Path, name: &str, nkey: &str) -> anyhow::Result<()> {
    let id = identity::add_peer(dir, name, nkey)?;
    if json {
        return out.json(&id);
    }
    out.line(format!(
        "{} may now ask this Kura to cosign its checkpoints once mikado restarts \
         (systemctl restart kura-mikado). Give it {} and this witness's key \
         (kura witness-key).",
        id.name,
        dir.join(identity::CA_FILE).display()
    ))?;
    Ok(())
}

fn remove(out: &mut Out, json: bool, dir: &Path, name: &str) -> anyhow::Result<()> {
    let gone = identity::remove(dir, name)?;
    if json {
        return out.json_sorted(&Removed {
            bus_identity: gone.as_ref(),
            name,
        });
    }
    let bus = match &gone {
        Some(_) => "taken off the bus, and ",
        None => "(not on the bus) ",
    };
    out.line(format!(
        "{name} {bus}recorded as removed in identities.toml: aegis refuses their \
         decisions however they arrive (the console's relay included) once mikado \
         and aegis restart: sudo systemctl restart kura-mikado kura-aegis"
    ))?;
    Ok(())
}

fn rotate(
    out: &mut Out,
    json: bool,
    db: Option<&Path>,
    dir: &Path,
    name: &str,
) -> anyhow::Result<()> {
    let size = seal_log_size(db)?;
    let id = identity::rotate(dir, name, size)?;
    if json {
        return out.json(&id);
    }
    // kura-serve reads the keyring at start: restarted, it knows the new key.
    let mut units = vec!["kura-mikado".to_owned()];
    if matches!(id.name.as_str(), "minato" | "hashi" | "aegis") {
        units.push(format!("kura-{}", id.name));
    }
    units.push("kura-serve".into());
    out.line(format!(
        "{} has a new key (bus {}); restart the bus, the service and kura-serve: \
         sudo systemctl restart {}",
        id.name,
        id.nkey,
        units.join(" ")
    ))?;
    match size {
        Some(n) => out.line(format!(
            "The old key stays in the keyring for the {n} seals before this rotation \
             and nothing after; stop the service before rotating so it seals nothing \
             in between"
        ))?,
        None => out.line(
            "No store found (--db, or the serve config's db): the old key stays valid \
             until the new key's first seal only",
        )?,
    }
    Ok(())
}

fn upgrade(out: &mut Out, json: bool, dir: &Path, hosts: &[String]) -> anyhow::Result<()> {
    let done = identity::upgrade(dir, hosts)?;
    if json {
        return out.json_sorted(&Upgraded {
            console_certificate: done.console_certificate,
            dir,
            relist: &done.relist,
        });
    }
    out.line(format!(
        "{}: services log in with keys derived from their seeds; restart mikado, then \
         every service",
        dir.display()
    ))?;
    if done.console_certificate {
        out.line(format!(
            "The console has its own certificate now ({} and {}, under a CA of its own: \
             browsers trust {}); set [console] tls_cert and tls_key to them",
            identity::CONSOLE_CERT_FILE,
            identity::CONSOLE_KEY_FILE,
            dir.join(identity::CONSOLE_CA_FILE).display()
        ))?;
    }
    for id in &done.relist {
        out.line(format!(
            "{} ({}) is listed by a key from before the split: `kura keys remove {}`, \
             then add the bus key their side now shows (aegis refuses an approver whose \
             decision key logs in)",
            id.name,
            id.role.name(),
            id.name
        ))?;
    }
    Ok(())
}

/// `kura keys bus-seed`: the derived login seed, written 0600 where asked (never printed).
fn bus_seed(out: &mut Out, seed: &Path, file: &Path) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let bus = identity::bus_key(&identity::read_seed(seed)?)?;
    let text = bus.seed().context("cannot encode the derived seed")?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
        .with_context(|| format!("cannot create {} (it must not exist yet)", file.display()))?;
    f.write_all(format!("{text}\n").as_bytes())?;
    out.line(format!(
        "wrote the bus seed of {} to {} (a secret: standard NATS tools log in with it, e.g. `nats --nkey {}`)",
        bus.public_key(),
        file.display(),
        file.display()
    ))?;
    Ok(())
}

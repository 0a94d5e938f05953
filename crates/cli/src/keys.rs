//! `kura keys`: the bus identities an install runs with (seeds never printed, only public keys).

use anyhow::Context as _;
use kura_runtime::identity::{self, Identities, Identity};
use serde_json::json;

use crate::args::{KeysCmd, Outcome};
use crate::output::Out;

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
        None => crate::tlog::serve_config()?.map(|c| c.common.db),
    };
    let Some(path) = path.filter(|p| p.exists()) else {
        return Ok(None);
    };
    // Read only, and no migration: this may run as root on a file the daemons can write.
    let conn = rusqlite::Connection::open_with_flags(
        &path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("cannot read the store {}", path.display()))?;
    Ok(Some(kura_tlog::seallog::size_in(&conn)?))
}

/// Runs one `kura keys` subcommand.
pub fn run(
    out: &mut Out,
    json: bool,
    db: Option<&std::path::Path>,
    cmd: KeysCmd,
) -> anyhow::Result<Outcome> {
    match cmd {
        KeysCmd::Init { dir, hosts } => {
            let made = identity::init(&dir, &hosts)?;
            if json {
                out.json(
                    &json!({"dir": dir, "identities": made.identities.list, "hosts": made.hosts}),
                )?;
                return Ok(Outcome::Ok);
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
        }
        KeysCmd::List { dir } => {
            let ids = Identities::load(&dir)?;
            if json {
                out.json(&ids.list)?;
            } else {
                for id in &ids.list {
                    show(out, id)?;
                }
            }
        }
        KeysCmd::AddApprover { dir, name, nkey } => {
            let id = identity::add_approver(&dir, &name, &nkey)?;
            if json {
                out.json(&id)?;
            } else {
                out.line(format!(
                    "{} may now ask aegis and send decisions once mikado restarts \
                     (systemctl restart kura-mikado). Give them {} and aegis's statement key:",
                    id.name,
                    dir.join(identity::CA_FILE).display()
                ))?;
                if let Some(signer) = Identities::load(&dir)?
                    .get("aegis")
                    .and_then(|a| a.signer.clone())
                {
                    out.line(format!("  reply_key = \"{signer}\""))?;
                }
            }
        }
        KeysCmd::AddPeer { dir, name, nkey } => {
            let id = identity::add_peer(&dir, &name, &nkey)?;
            if json {
                out.json(&id)?;
            } else {
                out.line(format!(
                    "{} may now ask this Kura to cosign its checkpoints once mikado restarts \
                     (systemctl restart kura-mikado). Give it {} and this witness's key \
                     (kura witness-key).",
                    id.name,
                    dir.join(identity::CA_FILE).display()
                ))?;
            }
        }
        KeysCmd::Remove { dir, name } => {
            let gone = identity::remove(&dir, &name)?;
            if json {
                out.json(&json!({"name": name, "bus_identity": gone}))?;
            } else {
                let bus = match &gone {
                    Some(_) => "taken off the bus, and ",
                    None => "(not on the bus) ",
                };
                out.line(format!(
                    "{name} {bus}recorded as removed in identities.toml: aegis refuses their \
                     decisions however they arrive (the console's relay included) once mikado \
                     and aegis restart: sudo systemctl restart kura-mikado kura-aegis"
                ))?;
            }
        }
        KeysCmd::Rotate { dir, name } => {
            let size = seal_log_size(db)?;
            let id = identity::rotate(&dir, &name, size)?;
            if json {
                out.json(&id)?;
            } else {
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
            }
        }
        KeysCmd::Upgrade { dir, hosts } => {
            let done = identity::upgrade(&dir, &hosts)?;
            if json {
                out.json(&json!({"dir": dir, "relist": done.relist,
                    "console_certificate": done.console_certificate}))?;
                return Ok(Outcome::Ok);
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
        }
    }
    Ok(Outcome::Ok)
}

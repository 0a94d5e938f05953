//! `kura fleet …`: a fleet of Pis — the hub's configs and keys (`init-hub`, `add-pi`), its
//! stream and buckets (`setup-hub`), what each Pi sees of the others (`status`) and a dead
//! Pi rebuilt from the hub (`restore`).

use anyhow::Context as _;
use clap::Subcommand;
use kura_serve::fleet::status::PiStatus;

use super::{Ctx, Outcome};

/// A fleet of Pis replicating through a JetStream hub.
#[derive(Debug, Subcommand)]
pub enum FleetCmd {
    /// Each Pi as this one sees it: last seal, what the hub holds, the checkpoint each
    /// replica verified and who cosigned it, alarms.
    Status,
    /// Write the configs and keys of a hub of 1 or 3 JetStream nodes into a directory.
    InitHub(kura_serve::fleet::operator::InitHub),
    /// Let a Pi join the hub as a leaf node: its leaf key, and the hub's configs rewritten.
    AddPi(kura_serve::fleet::operator::AddPi),
    /// Make the hub's streams and buckets for every Pi `add-pi` let in (with the hub's
    /// operator key; run again after each `add-pi`).
    SetupHub(kura_serve::fleet::operator::SetupHub),
    /// Rebuild a Pi's database from the hub, verified against its last checkpoint.
    Restore(kura_serve::fleet::operator::Restore),
    /// After a message a Pi never published halted its publisher (its ALARM names the
    /// stream sequence): put the Pi's own last ledger back on top (the hub's operator key).
    Reseat(kura_serve::fleet::operator::Reseat),
}

impl FleetCmd {
    /// Runs the subcommand.
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        match self {
            FleetCmd::Status => status(ctx),
            FleetCmd::InitHub(c) => said(ctx, c.run()),
            FleetCmd::AddPi(c) => said(ctx, c.run()),
            FleetCmd::SetupHub(c) => said(ctx, c.run()),
            FleetCmd::Reseat(c) => said(ctx, c.run()),
            FleetCmd::Restore(r) => {
                let said = r.run(super::people()?)?;
                ctx.out.line(said)?;
                Ok(Outcome::Ok)
            }
        }
    }
}

/// Prints what a hub command says.
fn said(ctx: &mut Ctx, said: anyhow::Result<String>) -> anyhow::Result<Outcome> {
    ctx.out.line(said?)?;
    Ok(Outcome::Ok)
}

fn status(ctx: &mut Ctx) -> anyhow::Result<Outcome> {
    let config = kura_serve::anchor::serve_config()?
        .context("no serve.toml: `kura fleet status` reads [fleet] from kura serve's config (KURA_SERVE_CONFIG)")?;
    anyhow::ensure!(
        config.fleet.name.is_some() || !config.fleet.peers.is_empty(),
        "this Pi is not in a fleet: set [fleet] in serve.toml (README: A fleet of Pis)"
    );
    let pis = kura_serve::fleet::status::read(&config.fleet, &ctx.db)?;
    let alarm = pis.iter().any(|p| p.alarm.is_some());
    if ctx.json {
        ctx.out.json_sorted(&pis)?;
    } else {
        for p in &pis {
            ctx.out.line(line(p))?;
        }
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
        ("self", Some(a)) => format!(
            "{} (this Pi): ALARM: {} ({} sealed, {} on the hub)",
            p.name,
            proto::text::escape_controls(a),
            p.leaves,
            p.published
        ),
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

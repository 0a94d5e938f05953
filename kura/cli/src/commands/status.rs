//! `kura status`: what is up, what is waiting, when the data was last checked.

use super::Ctx;
use super::Outcome;
use crate::output::Out;

/// What is up, what is waiting, when the data was last checked.
#[derive(Debug, clap::Args)]
pub struct Status {}

impl Status {
    /// Prints the daemons, the backlog, the last sweep and backup, and the anchoring.
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        let store = ctx.open_store()?;
        let (out, json) = (&mut ctx.out, ctx.json);
        let st = kura_work::ops::status(&store)?;
        // A fleet: each Pi, so an ALARM (a replica's, or this Pi's publisher's) shows where
        // people look first.
        let fleet = match kura_serve::anchor::serve_config() {
            Ok(Some(config)) if config.fleet.name.is_some() || !config.fleet.peers.is_empty() => {
                Some(kura_serve::fleet::status::read(
                    &config.fleet,
                    store.path(),
                )?)
            }
            _ => None,
        };
        let ungated = kura_serve::history::ungated::alarm(&store, kura_work::now_ms(), 20)?;
        if json {
            out.json(&WithFleet {
                st: &st,
                fleet,
                ungated,
            })?;
        } else {
            if let Some(line) = kura_serve::history::ungated::alarm_line(&ungated) {
                out.line(line)?;
            }
            print_status(out, &st)?;
            out.line(kura_serve::anchor::anchoring(store.path()))?;
            for p in fleet.iter().flatten() {
                out.line(format!("fleet: {}", super::fleet::line(p)))?;
            }
        }
        Ok(Outcome::Ok)
    }
}
/// `kura status --json`: the status, and each Pi of the fleet (`null` outside one).
#[derive(serde::Serialize)]
struct WithFleet<'a> {
    #[serde(flatten)]
    st: &'a kura_work::ops::Status,
    fleet: Option<Vec<kura_serve::fleet::status::PiStatus>>,
    /// Tool calls that ran without Kura's gate in the last day (newest first, at most 20).
    ungated: kura_serve::history::ungated::Alarm,
}

fn print_status(out: &mut Out, st: &kura_work::ops::Status) -> anyhow::Result<()> {
    out.line("daemons:")?;
    if st.daemons.is_empty() {
        out.line("  (none has started yet)")?;
    }
    for d in &st.daemons {
        let nats = if d.kind == "kura" {
            "-"
        } else if d.nats_connected {
            "nats ok"
        } else {
            "no nats"
        };
        let detail = d
            .detail
            .as_deref()
            .map(|t| format!("  {t}"))
            .unwrap_or_default();
        out.line(format!(
            "  {:<7} {:<22} pid {:<7} {:<5} last beat {}s ago  {nats}{detail}",
            d.kind,
            d.instance,
            d.pid,
            if d.up { "UP" } else { "DOWN" },
            d.last_beat_s
        ))?;
    }
    let b = &st.backlog;
    out.line(format!(
        "backlog: {} queued requests, {} pending / {} running / {} waiting turns, {} open approvals, {} outputs not yet read for memory",
        b.queued_requests, b.pending_turns, b.running_turns, b.waiting_turns, b.open_approvals, b.unextracted_outputs
    ))?;
    match &st.last_sweep {
        Some(s) => out.line(format!(
            "last integrity sweep: {} {} ({})",
            s.at,
            if s.ok { "OK" } else { "FAILED" },
            s.summary
        ))?,
        None => out.line("last integrity sweep: never (is `kura serve` running?)")?,
    }
    match &st.last_backup {
        Some(s) => out.line(format!("last backup: {} {}", s.at, s.summary))?,
        None => out.line("last backup: never")?,
    }
    out.line(format!(
        "database: {} bytes (+ {} bytes WAL)",
        st.db_bytes, st.wal_bytes
    ))?;
    Ok(())
}

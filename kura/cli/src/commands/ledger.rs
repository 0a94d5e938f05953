//! `kura ledger …`: open a ledger in a session, seal it into the chain.

use std::path::PathBuf;

use proto::ledger::Ledger;
use serde::Serialize;

use super::Outcome;
use super::{Ctx, id, use_sealer};

/// `kura ledger ...`
#[derive(Debug, clap::Subcommand)]
pub enum LedgerCmd {
    /// Open a ledger in a session and print its id.
    Open {
        /// The session it belongs to.
        #[arg(long)]
        session: String,
        /// A human-readable label.
        #[arg(long)]
        label: String,
        /// A sealed parent ledger (repeatable).
        #[arg(long = "parent")]
        parents: Vec<String>,
    },
    /// Seal a ledger: fix its Merkle root and chained hash; it becomes the session head.
    Seal {
        /// The ledger id.
        ledger: String,
        /// A seed (nkey) to sign the seal with, e.g. the operator's; without one the seal
        /// is unsigned, which `kura verify --keyring` reports.
        #[arg(long, env = "KURA_SEALER_KEY", value_name = "FILE")]
        sealer_key: Option<PathBuf>,
    },
}

/// `kura ledger seal --json`.
#[derive(Serialize)]
struct Sealed<'a> {
    /// The ledger as sealed.
    ledger: &'a Ledger,
    /// False when it was sealed already.
    newly_sealed: bool,
}

impl LedgerCmd {
    /// Runs one `kura ledger` subcommand.
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        let mut store = ctx.open_store()?;
        let (out, json) = (&mut ctx.out, ctx.json);
        match self {
            LedgerCmd::Open {
                session,
                label,
                parents,
            } => {
                let parents = parents
                    .iter()
                    .map(|p| id(p))
                    .collect::<anyhow::Result<Vec<_>>>()?;
                let l = store.open_ledger(id(&session)?, &label, &parents)?;
                if json {
                    out.json(&l)?;
                } else {
                    out.line(l.ledger_id.to_string())?;
                }
            }
            LedgerCmd::Seal { ledger, sealer_key } => {
                use_sealer(&mut store, sealer_key.as_deref())?;
                let (l, newly) = store.seal_ledger(id(&ledger)?)?;
                if json {
                    out.json_sorted(&Sealed {
                        ledger: &l,
                        newly_sealed: newly,
                    })?;
                } else {
                    let verb = if newly { "sealed" } else { "already sealed" };
                    out.line(format!(
                        "{} {verb}: {} records, root {}, hash {}",
                        l.ledger_id,
                        l.record_count,
                        l.root_hash.as_deref().unwrap_or("-"),
                        l.ledger_hash.as_deref().unwrap_or("-")
                    ))?;
                }
            }
        }
        Ok(Outcome::Ok)
    }
}

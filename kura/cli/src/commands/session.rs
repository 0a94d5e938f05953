//! `kura session …`: create, list, reset and fork sessions (branches of ledgers).

use std::path::PathBuf;

use kura_store::Store;
use proto::ledger::Ledger;
use serde::Serialize;

use super::Outcome;
use super::{Ctx, id, use_sealer};
use crate::output::Out;

/// `kura session ...`
#[derive(Debug, clap::Subcommand)]
pub enum SessionCmd {
    /// Create a session and print its id.
    New {
        /// A human-readable label.
        #[arg(long, default_value = "session")]
        label: String,
    },
    /// List sessions, newest first.
    List,
    /// Move a session's head back to an earlier sealed ledger of its own history. The ref
    /// log records the move and the reason; the ledgers after it stay, shown as unreachable.
    Reset {
        /// The session.
        session: String,
        /// The sealed ledger to move the head back to.
        ledger: String,
        /// Why (one line; recorded in the hash-chained ref log).
        #[arg(long)]
        reason: String,
    },
    /// Start a new session from any sealed ledger (of any session): its first ledger has that
    /// ledger as parent, so the history is shared, not copied. Prints the new session's id.
    Fork {
        /// The sealed ledger to grow from.
        ledger: String,
        /// A label for the new session.
        #[arg(long, default_value = "fork")]
        label: String,
        /// An nkey seed (e.g. /etc/kura/keys/operator.nk) that signs the fork's first seal,
        /// so `kura verify --keyring` knows who sealed it.
        #[arg(long)]
        sealer_key: Option<PathBuf>,
    },
}

/// `kura session fork --json`.
#[derive(Serialize)]
struct Forked<'a> {
    /// The new session's first ledger (its parent is the ledger forked from).
    first_ledger: &'a Ledger,
    /// The new session.
    session: &'a kura_store::store::Session,
}

impl SessionCmd {
    /// Runs one `kura session` subcommand.
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        let mut store = ctx.open_store()?;
        let (out, json) = (&mut ctx.out, ctx.json);
        match self {
            SessionCmd::New { label } => new(&mut store, out, json, &label)?,
            SessionCmd::List => list(&store, out, json)?,
            SessionCmd::Reset {
                session,
                ledger,
                reason,
            } => {
                reset(&mut store, out, json, &session, &ledger, &reason)?;
                // The files go back with the head.
                match super::workspace::rewind(ctx, &store, id(&session)?, id(&ledger)?) {
                    Ok(said) if !json => ctx.out.line(said)?,
                    Ok(_) => {}
                    // The head moved (that is on record); the files did not: say so where
                    // a script sees it, whatever the output format.
                    Err(why) => eprintln!("kura: warning: {why}"),
                }
            }
            SessionCmd::Fork {
                ledger,
                label,
                sealer_key,
            } => fork(&mut store, out, json, &ledger, &label, sealer_key)?,
        }
        Ok(Outcome::Ok)
    }
}

fn new(store: &mut Store, out: &mut Out, json: bool, label: &str) -> anyhow::Result<()> {
    let s = store.create_session(label)?;
    if json {
        out.json(&s)?;
    } else {
        out.line(s.session_id.to_string())?;
    }
    Ok(())
}

fn list(store: &Store, out: &mut Out, json: bool) -> anyhow::Result<()> {
    let sessions = store.sessions()?;
    if json {
        out.json(&sessions)?;
    } else {
        for s in sessions {
            let head = s
                .head_ledger_id
                .map(|h| h.to_string())
                .unwrap_or_else(|| "-".into());
            out.line(format!(
                "{}  {:<8} head {}  {}",
                s.session_id, s.status, head, s.label
            ))?;
        }
    }
    Ok(())
}

fn reset(
    store: &mut Store,
    out: &mut Out,
    json: bool,
    session: &str,
    ledger: &str,
    reason: &str,
) -> anyhow::Result<()> {
    let e = store.reset_head(id(session)?, id(ledger)?, reason)?;
    if json {
        out.json(&e)?;
    } else {
        out.line(format!(
            "session {} reset: head {} -> {} (ref log entry {})",
            e.session_id,
            e.old_head.as_deref().unwrap_or("-"),
            e.new_head,
            e.seq
        ))?;
    }
    Ok(())
}

fn fork(
    store: &mut Store,
    out: &mut Out,
    json: bool,
    ledger: &str,
    label: &str,
    sealer_key: Option<PathBuf>,
) -> anyhow::Result<()> {
    use_sealer(store, sealer_key.as_deref())?;
    let (s, first) = kura_serve::history::fork::fork(store, id(ledger)?, label)?;
    if json {
        out.json_sorted(&Forked {
            first_ledger: &first,
            session: &s,
        })?;
    } else {
        out.line(s.session_id.to_string())?;
    }
    Ok(())
}

//! `kura show`: a record, a ledger or a session, whichever the id names.

use kura_store::Store;
use kura_store::store::{RefLogEntry, Session};
use proto::ledger::Ledger;
use proto::record::Record;
use proto::{LedgerId, RecordId, SessionId};
use serde::Serialize;
use uuid::Uuid;

use super::Outcome;
use super::{Ctx, id};
use crate::output::{self, Out};

/// Show a record, a ledger or a session.
#[derive(Debug, clap::Args)]
pub struct Show {
    /// A record, ledger or session id.
    id: String,
    /// For a `model.prompt` record: print the request body the model was sent, rebuilt from
    /// the store (the turn's context ledger, the records before it, the frame in it), and
    /// check it — its SHA-256 against the recorded one, the records cut, the ledgers
    /// verified (exit 1 when anything differs).
    #[arg(long)]
    prompt: bool,
}

/// `kura show RECORD --json`.
#[derive(Serialize)]
struct RecordJson<'a> {
    /// The ledgers holding it.
    ledgers: &'a [LedgerId],
    /// The record.
    record: &'a Record,
}

/// `kura show LEDGER --json`.
#[derive(Serialize)]
struct LedgerJson<'a> {
    /// It is its session's head.
    head: bool,
    /// The ledger.
    ledger: &'a Ledger,
    /// Its records, in order.
    records: &'a [Record],
}

/// `kura show SESSION --json`.
#[derive(Serialize)]
struct SessionJson<'a, F: Serialize> {
    /// Sessions forked from its ledgers.
    forks: &'a [F],
    /// Its ref log (head moves).
    reflog: &'a [RefLogEntry],
    /// The session.
    session: &'a Session,
}

impl Show {
    /// Prints what the id names.
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        let store = ctx.open_store()?;
        if self.prompt {
            return prompt(&store, &mut ctx.out, id::<RecordId>(&self.id)?);
        }
        // A record, ledger or session id: parsed as a bare `Uuid`, typed once `kind_of` says.
        show(&store, &mut ctx.out, ctx.json, id(&self.id)?)?;
        Ok(Outcome::Ok)
    }
}

fn show(store: &Store, out: &mut Out, json: bool, uid: Uuid) -> anyhow::Result<()> {
    match store.kind_of(uid)? {
        Some("record") => {
            let uid = RecordId::from(uid);
            let r = store.read_record(uid)?;
            let ledgers = store.ledgers_containing(uid)?;
            if json {
                out.json_sorted(&RecordJson {
                    ledgers: &ledgers,
                    record: &r,
                })?;
            } else {
                output::record_block(out, &r, &ledgers)?;
            }
        }
        Some("ledger") => show_ledger(store, out, json, uid.into())?,
        Some(_) => {
            let uid = SessionId::from(uid);
            let s = store.read_session(uid)?;
            let reflog = store.reflog(uid)?;
            let forks = kura_serve::history::fork::forks_of(store.conn(), uid)?;
            if json {
                out.json_sorted(&SessionJson {
                    forks: &forks,
                    reflog: &reflog,
                    session: &s,
                })?;
            } else {
                output::session_block(out, &s, &reflog)?;
                for f in &forks {
                    out.line(format!(
                        "Fork:    session {} grew from ledger {}",
                        f.session_id, f.origin
                    ))?;
                }
            }
        }
        None => anyhow::bail!("no record, ledger or session {uid}"),
    }
    Ok(())
}

fn show_ledger(store: &Store, out: &mut Out, json: bool, uid: LedgerId) -> anyhow::Result<()> {
    let l = store.read_ledger(uid)?;
    let records = store.hydrate(uid)?;
    let head = store.read_session(l.session_id)?.head_ledger_id == Some(uid);
    if json {
        out.json_sorted(&LedgerJson {
            head,
            ledger: &l,
            records: &records,
        })?;
    } else {
        let ring = kura_serve::anchor::keyring(None).unwrap_or_default();
        let sealer = output::sealer_name(store, ring.as_ref(), uid)?;
        output::ledger_block(out, &l, head, sealer.as_deref())?;
        out.line(format!("Session: {}", l.session_id))?;
        for (i, r) in records.iter().enumerate() {
            out.line(output::record_line(i, r))?;
        }
    }
    Ok(())
}

/// `kura show --prompt RECORD`: the request body rebuilt at every turn the prompt record
/// stands in, each checked (its hash, the records cut, the ledgers verified); the body
/// printed once — exactly to a pipe or file, with hidden characters escaped to a terminal.
fn prompt(store: &Store, out: &mut Out, rid: RecordId) -> anyhow::Result<Outcome> {
    if store.kind_of(rid.uuid())? != Some("record") {
        anyhow::bail!(
            "{rid} is not a record; give the id of a model.prompt record (`kura log <session> --records` lists them)"
        );
    }
    let p = kura_serve::history::prompt::prompt_of(store, rid, &super::people()?)?;
    let mut outcome = Outcome::Ok;
    for (i, at) in p.at.iter().enumerate() {
        let proven = kura_model::prompt::prove(&p.content, &at.context, &at.history, &at.problems)?;
        if i == 0 {
            out.body(&proven.body)?;
        }
        if proven.verdict == kura_model::prompt::Verdict::Ok {
            eprintln!(
                "prompt ok: in ledger {}, the rebuilt request's SHA-256 {} is the one record {rid} carries",
                at.ledger, proven.sha256
            );
        } else {
            eprintln!(
                "FAIL prompt: in ledger {}: {} (rebuilt {}, recorded {})",
                at.ledger, proven.verdict, proven.sha256, p.content.sha256
            );
            outcome = Outcome::VerifyFailed;
        }
    }
    Ok(outcome)
}

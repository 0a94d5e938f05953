//! `kura log`: walk a session's ledgers like `git log` (`--graph` draws them, see
//! [`crate::graph`]).

use kura_serve::tlog::storage::LogStorage as _;
use kura_store::Store;
use kura_store::store::Session;
use proto::SessionId;
use proto::ledger::Ledger;
use proto::record::Record;
use serde::Serialize;

use super::Outcome;
use super::{Ctx, id};
use crate::output::{self, Out};

/// Walk a session's ledgers like `git log`.
#[derive(Debug, clap::Args)]
pub struct Log {
    /// The session id.
    session: String,
    /// List each ledger's records too.
    #[arg(long)]
    records: bool,
    /// Draw the ledgers as a graph, like `git log --graph`: rewinds leave side branches,
    /// forks name where they grew from and where they went.
    #[arg(long, conflicts_with = "records")]
    graph: bool,
}

/// `kura log --json`.
#[derive(Serialize)]
struct LogJson<'a> {
    /// The session's ledgers, newest first.
    ledgers: Vec<LedgerJson<'a>>,
    /// The session.
    session: &'a Session,
    /// What its model answers spent, when any reported usage.
    #[serde(skip_serializing_if = "Option::is_none")]
    spent: Option<Spent>,
}

/// A session's model usage in `kura log --json`.
#[derive(Serialize)]
struct Spent {
    /// Model answers.
    answers: u64,
    /// Prompt tokens.
    tokens_in: u64,
    /// Completion tokens.
    tokens_out: u64,
    /// Money by the price table, millionths.
    money_micros: u64,
}

/// What one ledger's model answers spent, summed in SQLite from the usage its records carry
/// (no record is read into memory): answers, models, tokens in, tokens out, money.
fn ledger_usage(store: &Store, ledger: proto::LedgerId) -> anyhow::Result<Option<String>> {
    let u = kura_work::ledger_usage(store, ledger)?;
    let (n, i, o, m) = (u.answers, u.tokens_in, u.tokens_out, u.money_micros);
    Ok((n > 0).then(|| {
        let models = proto::text::escape_controls(&u.models).into_owned();
        format!("Usage:   {n} model answers ({models}), {i}+{o} tokens, {m} millionths")
    }))
}

/// One ledger in `kura log --json`: the ledger's own fields and where it stands.
#[derive(Serialize)]
struct LedgerJson<'a> {
    /// The ledger.
    #[serde(flatten)]
    ledger: &'a Ledger,
    /// It is the session's head.
    head: bool,
    /// A reset left it behind.
    unreachable: bool,
    /// Who signed its seal, if anyone.
    sealer: Option<String>,
    /// Its records, with `--records`.
    #[serde(skip_serializing_if = "Option::is_none")]
    records: Option<Vec<Record>>,
}

impl Log {
    /// Prints the session's ledgers, newest first.
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        let store = ctx.open_store()?;
        let (out, json) = (&mut ctx.out, ctx.json);
        if self.graph {
            crate::graph::draw(&store, out, json, id(&self.session)?)?;
        } else {
            log(&store, out, json, id(&self.session)?, self.records)?;
        }
        Ok(Outcome::Ok)
    }
}

fn log(
    store: &Store,
    out: &mut Out,
    json: bool,
    session_id: SessionId,
    with_records: bool,
) -> anyhow::Result<()> {
    let session = store.read_session(session_id)?;
    let ledgers = store.session_ledgers(session_id)?;
    // Left behind by a reset, like commits only the reflog still names.
    let lost = kura_store::branch::unreachable(store.conn(), session_id)?;
    // A keyring that cannot be read only costs the names, never the log.
    let ring = kura_serve::anchor::keyring(None).unwrap_or_default();
    if json {
        let mut items = Vec::new();
        for l in &ledgers {
            items.push(LedgerJson {
                ledger: l,
                head: session.head_ledger_id == Some(l.ledger_id),
                unreachable: lost.contains(&l.ledger_id),
                sealer: store.seal_log().sealer_of(&l.ledger_id.to_string())?,
                records: match with_records {
                    true => Some(store.hydrate(l.ledger_id)?),
                    false => None,
                },
            });
        }
        let spent = kura_work::writs::session_usage(store, session_id)?.map(|(a, i, o, m)| Spent {
            answers: a,
            tokens_in: i,
            tokens_out: o,
            money_micros: m,
        });
        out.json_sorted(&LogJson {
            ledgers: items,
            session: &session,
            spent,
        })?;
        return Ok(());
    }
    out.line(format!(
        "session {} ({}, {})",
        session.session_id, session.label, session.status
    ))?;
    if let Some((a, i, o, m)) = kura_work::writs::session_usage(store, session_id)? {
        out.line(format!(
            "spent: {a} model answers, {i}+{o} tokens, {m} millionths"
        ))?;
    }
    if ledgers.is_empty() {
        out.line("(no ledgers yet)")?;
    }
    for l in &ledgers {
        out.line("")?;
        let sealer = output::sealer_name(store, ring.as_ref(), l.ledger_id)?;
        output::ledger_block(
            out,
            l,
            session.head_ledger_id == Some(l.ledger_id),
            sealer.as_deref(),
        )?;
        if lost.contains(&l.ledger_id) {
            out.line(
                "Note:    unreachable (the head was reset past it; see `kura show <session>`)",
            )?;
        }
        if let Some(usage) = ledger_usage(store, l.ledger_id)? {
            out.line(usage)?;
        }
        if with_records {
            for (i, r) in store.hydrate(l.ledger_id)?.iter().enumerate() {
                out.line(output::record_line(i, r))?;
            }
        }
    }
    Ok(())
}

//! Sessions and approvals as the console's pages show them, read from the store: sessions with their turns and waiting
//! approvals, a session's ledgers a page of records at a time, and waiting approvals with
//! their request records (the browser re-hashes those before anyone signs).

use kura_store::{Result, Store};
use kura_tlog::storage::LogStorage as _;
use kura_work::approvals::{Approval, asked, votes};
use proto::{LedgerId, SessionId};
use rusqlite::params;

/// A row of the sessions page.
pub struct SessionRow {
    /// The session's id.
    pub id: String,
    /// Its label.
    pub label: String,
    /// Its status.
    pub status: String,
    /// When it was created.
    pub created_at: String,
    /// Its turns.
    pub turns: i64,
    /// Its requests waiting for people.
    pub waiting: i64,
    /// The outside agent driving it (`agent:<name>`), if one is.
    pub agent: Option<String>,
}

/// Sessions, newest first, `limit` from `offset`.
pub fn sessions(store: &Store, offset: i64, limit: i64) -> Result<Vec<SessionRow>> {
    let mut stmt = store.conn().prepare_cached(
        "SELECT s.session_id, s.label, s.status, s.created_at,
                (SELECT count(*) FROM turns t WHERE t.session_id = s.session_id),
                (SELECT count(*) FROM approvals a WHERE a.session_id = s.session_id AND a.state = 'asked'),
                (SELECT q.agent FROM requests q WHERE q.session_id = s.session_id
                   AND q.agent IS NOT NULL ORDER BY q.request_seq LIMIT 1)
           FROM sessions s ORDER BY s.session_id DESC LIMIT ?1 OFFSET ?2",
    )?;
    let rows = stmt.query_map(params![limit, offset], |r| {
        Ok(SessionRow {
            id: r.get(0)?,
            label: r.get(1)?,
            status: r.get(2)?,
            created_at: r.get(3)?,
            turns: r.get(4)?,
            waiting: r.get(5)?,
            agent: r.get(6)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// One ledger on a history page, with a page of its records.
pub struct LedgerView {
    /// The ledger.
    pub ledger: proto::Ledger,
    /// Who sealed it: the keyring's name when the key is known, else the key.
    pub sealer: Option<String>,
    /// A page of its records.
    pub records: Vec<crate::records::RecordView>,
    /// Position of the first record shown.
    pub from: u64,
}

/// A session's history: the session, its ledgers newest first (`ledgers_per_page` from
/// `page`), each with up to `per_ledger` records from position `from` (for the ledger named
/// by `focus`; 0 for the others).
pub struct History {
    /// The session.
    pub session: kura_store::store::Session,
    /// This page's ledgers.
    pub ledgers: Vec<LedgerView>,
    /// Ledgers in all.
    pub total_ledgers: usize,
    /// What its model answers spent: (answers, tokens in, tokens out, money millionths).
    pub spent: Option<(u64, u64, u64, u64)>,
    /// The writs its calls ran under (ids, as the calls name them).
    pub writs: Vec<String>,
}

/// Reads a page of a session's history.
pub fn history(
    store: &Store,
    session: SessionId,
    page: usize,
    ledgers_per_page: usize,
    focus: Option<(LedgerId, u64)>,
    per_ledger: usize,
    keyring: Option<&kura_tlog::sealer::Keyring>,
) -> Result<History> {
    let s = store.read_session(session)?;
    let all = store.session_ledgers(session)?;
    let total_ledgers = all.len();
    let mut ledgers = Vec::new();
    for l in all
        .into_iter()
        .skip(page * ledgers_per_page)
        .take(ledgers_per_page)
    {
        let from = match focus {
            Some((id, from)) if id == l.ledger_id => from,
            _ => 0,
        };
        let records = crate::records::ledger_page(store, l.ledger_id, from, per_ledger)?;
        let sealer = store
            .seal_log()
            .sealer_of(&l.ledger_id.to_string())?
            .map(|key| match keyring.and_then(|k| k.get(&key)) {
                Some(name) => name.to_owned(),
                None => key,
            });
        ledgers.push(LedgerView {
            ledger: l,
            sealer,
            records,
            from,
        });
    }
    // The writs its calls ran under, as their records name them.
    let mut stmt = store.conn().prepare_cached(
        "SELECT DISTINCT json_extract(r.content, '$.writ') FROM ledger_records lr
           JOIN ledgers l ON l.ledger_id = lr.ledger_id
           JOIN records r ON r.record_id = lr.record_id
          WHERE l.session_id = ?1 AND r.record_type = 'tool.call'
            AND json_extract(r.content, '$.writ') IS NOT NULL",
    )?;
    let writs = stmt
        .query_map([session.to_string()], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(History {
        spent: kura_work::writs::session_usage(store, session)?,
        writs,
        session: s,
        ledgers,
        total_ledgers,
    })
}

/// A request waiting for people, as the approvals page shows it.
pub struct Waiting {
    /// The request.
    pub approval: Approval,
    /// The `approval.request` record's canonical content text, exactly as stored.
    pub content: String,
    /// Who filed it.
    pub author_id: String,
    /// Who has voted so far: (author id, vote).
    pub votes: Vec<(String, String)>,
    /// The label of the session it belongs to.
    pub session_label: String,
    /// What the person asked for in the turn that made the request (its start).
    pub instruction: String,
}

/// The instruction text is shown up to this many bytes on an approval card.
const INSTRUCTION_BYTES: i64 = 600;

/// A session's label and the instruction of the turn `turn`, read only as far as shown.
fn task(store: &Store, a: &Approval) -> Result<(String, String)> {
    let (label, raw): (String, Option<Vec<u8>>) = store.conn().query_row(
        "SELECT s.label,
                (SELECT substr(CAST(r.content AS BLOB), 1, ?3) FROM turns t
                   JOIN requests q ON q.request_seq = t.request_seq
                   JOIN records r ON r.record_id = q.record_id
                  WHERE t.turn_id = ?2)
           FROM sessions s WHERE s.session_id = ?1",
        params![
            a.session_id.to_string(),
            a.turn_id.to_string(),
            INSTRUCTION_BYTES
        ],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let raw = String::from_utf8_lossy(&raw.unwrap_or_default()).into_owned();
    // A whole instruction is {"text": ...}; a cut one is shown as stored.
    let text = serde_json::from_str::<serde_json::Value>(&raw)
        .ok()
        .and_then(|v| proto::content::text_of(&v).map(str::to_owned))
        .unwrap_or(raw);
    Ok((label, text))
}

/// Every request waiting for people, oldest first.
pub fn waiting(store: &Store) -> Result<Vec<Waiting>> {
    let mut out = Vec::new();
    for a in asked(store.conn())? {
        let (content, author_id): (String, String) = store.conn().query_row(
            "SELECT content, author_id FROM records WHERE record_id = ?1",
            [a.request_id.to_string()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let votes = votes(store.conn(), a.request_id)?;
        let (session_label, instruction) = task(store, &a)?;
        out.push(Waiting {
            approval: a,
            content,
            author_id,
            votes,
            session_label,
            instruction,
        });
    }
    Ok(out)
}

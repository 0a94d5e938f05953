//! Branches of history, git-style: rewind a session's head to an earlier sealed ledger, and
//! tell which ledgers a head no longer reaches (forks are `kura_history`'s). Nothing is
//! deleted: every move is a ref-log entry.

use std::collections::HashSet;

use proto::ledger::LedgerState;
use proto::{LedgerId, SessionId};
use rusqlite::Connection;

use crate::error::{Result, StoreError};
use crate::store::{RefLogEntry, Store, move_head, parse_id, read_ledger_in, read_session_in};

/// A reason is a short line.
const MAX_REASON: usize = 200;

/// `ledger` and every ledger it descends from.
pub fn ancestors(conn: &impl crate::tx::Db, ledger: LedgerId) -> Result<HashSet<LedgerId>> {
    let conn = crate::tx::conn(conn);
    let mut seen = HashSet::new();
    let mut todo = vec![ledger];
    while let Some(id) = todo.pop() {
        if !seen.insert(id) {
            continue;
        }
        let parents: String = conn
            .prepare_cached("SELECT parent_ids FROM ledgers WHERE ledger_id = ?1")?
            .query_row([id.to_string()], |r| r.get(0))?;
        let parents: Vec<String> =
            serde_json::from_str(&parents).map_err(|e| StoreError::Corrupt {
                what: "ledger",
                id: id.to_string(),
                detail: format!("parent_ids is not a JSON list: {e}"),
            })?;
        for p in parents {
            todo.push(parse_id(&p)?);
        }
    }
    Ok(seen)
}

/// Moves `session_id`'s head back to `target`, a sealed ledger of that session its head
/// descends from; the ref log records `reset: <reason>`. The ledgers after it stay, as
/// unreachable history.
pub(crate) fn reset_head_in(
    conn: &Connection,
    session_id: SessionId,
    target: LedgerId,
    reason: &str,
) -> Result<RefLogEntry> {
    let reason = reason.trim();
    if reason.is_empty() || reason.chars().count() > MAX_REASON || reason.contains('\n') {
        return Err(StoreError::Invalid(format!(
            "a reset needs a reason: one line of at most {MAX_REASON} characters"
        )));
    }
    let session = read_session_in(conn, session_id)?;
    let head = session.head_ledger_id.ok_or_else(|| {
        StoreError::Invalid(format!("session {session_id} has no head to move back"))
    })?;
    let l = read_ledger_in(conn, target)?;
    if l.session_id != session_id {
        return Err(StoreError::Invalid(format!(
            "ledger {target} belongs to session {}; fork it instead (`kura session fork`)",
            l.session_id
        )));
    }
    let hash = match (&l.state, &l.ledger_hash) {
        (LedgerState::Sealed, Some(h)) => h.clone(),
        _ => {
            return Err(StoreError::Invalid(format!(
                "ledger {target} is not sealed"
            )));
        }
    };
    if target == head {
        return Err(StoreError::Invalid(format!(
            "ledger {target} is already the head"
        )));
    }
    if !ancestors(conn, head)?.contains(&target) {
        return Err(StoreError::Invalid(format!(
            "ledger {target} is not in the head's history; a reset only moves back"
        )));
    }
    move_head(conn, session_id, target, &hash, &format!("reset: {reason}"))
}

/// Sealed ledgers of `session_id` its head no longer reaches (left behind by a reset).
pub fn unreachable(conn: &impl crate::tx::Db, session_id: SessionId) -> Result<HashSet<LedgerId>> {
    let conn = crate::tx::conn(conn);
    let session = read_session_in(conn, session_id)?;
    let reach = match session.head_ledger_id {
        Some(h) => ancestors(conn, h)?,
        None => HashSet::new(),
    };
    let mut stmt = conn.prepare_cached(
        "SELECT ledger_id FROM ledgers WHERE session_id = ?1 AND state = 'sealed'",
    )?;
    let rows = stmt.query_map([session_id.to_string()], |r| r.get::<_, String>(0))?;
    let mut out = HashSet::new();
    for row in rows {
        let id = parse_id(&row?)?;
        if !reach.contains(&id) {
            out.insert(id);
        }
    }
    Ok(out)
}

impl Store {
    /// Moves `session_id`'s head back to `target`, a sealed ledger of that session its head
    /// descends from; the ref log records `reset: <reason>`. The ledgers after it stay, as
    /// unreachable history.
    pub fn reset_head(
        &mut self,
        session_id: SessionId,
        target: LedgerId,
        reason: &str,
    ) -> Result<RefLogEntry> {
        self.write_raw(|tx| reset_head_in(tx, session_id, target, reason))
    }
}

//! Sessions: branches of ledgers with a head pointer that moves only through a hash-chained ref log.

use crate::cached::Cached;
use proto::SessionStatus;
use proto::{LedgerId, SessionId};
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::labels::check_label;
use super::{Store, parse_id};
use crate::error::{Result, StoreError};
use crate::time;

/// A session row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// UUIDv7.
    pub session_id: SessionId,
    /// Human-readable label.
    pub label: String,
    /// The latest sealed ledger, if any.
    pub head_ledger_id: Option<LedgerId>,
    /// Whether work may still come.
    pub status: SessionStatus,
    /// When it was created.
    pub created_at: String,
}

/// One move of a session head. Its ids are the stored text the entry's chain hash commits
/// to (verified as stored, like [`proto::LedgerHeader`]'s), not typed ids.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefLogEntry {
    /// The session.
    pub session_id: String,
    /// 1, 2, 3, ... within the session.
    pub seq: i64,
    /// The head before the move.
    pub old_head: Option<String>,
    /// The head after the move.
    pub new_head: String,
    /// The new head's ledger hash at the time of the move.
    pub new_head_hash: String,
    /// Why the head moved (`seal`, ...).
    pub reason: String,
    /// When.
    pub at: String,
    /// Chain hash over this entry and the previous entry's hash.
    pub entry_hash: String,
}

/// What a ref log entry's hash commits to.
#[derive(Serialize)]
struct EntryHashInput<'a> {
    kind: &'static str,
    session_id: &'a str,
    seq: i64,
    old_head: Option<&'a str>,
    new_head: &'a str,
    new_head_hash: &'a str,
    reason: &'a str,
    at: &'a str,
    prev: &'a str,
}

impl RefLogEntry {
    /// Recomputes this entry's chain hash given the previous entry's hash (`""` for the first).
    pub(crate) fn compute_hash(&self, prev: &str) -> String {
        let input = EntryHashInput {
            kind: "kura.reflog.v1",
            session_id: &self.session_id,
            seq: self.seq,
            old_head: self.old_head.as_deref(),
            new_head: &self.new_head,
            new_head_hash: &self.new_head_hash,
            reason: &self.reason,
            at: &self.at,
            prev,
        };
        proto::sha256_hex(&serde_json_canonicalizer_bytes(&input))
    }
}

fn serde_json_canonicalizer_bytes<T: Serialize>(value: &T) -> Vec<u8> {
    proto::canonical_json(value)
        .map(String::into_bytes)
        .unwrap_or_default()
}

/// Reads a session inside the caller's transaction.
pub(crate) fn read_session_in(conn: &Connection, id: SessionId) -> Result<Session> {
    conn.prepare_cached(
        "SELECT session_id, label, head_ledger_id, status, created_at FROM sessions WHERE session_id = ?1",
    )?
    .query_row([id.to_string()], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, Option<String>>(2)?,
            r.get::<_, SessionStatus>(3)?,
            r.get::<_, String>(4)?,
        ))
    })
    .optional()?
    .ok_or_else(|| StoreError::NotFound {
        kind: "session",
        id: id.to_string(),
    })
    .and_then(|(sid, label, head, status, created_at)| {
        Ok(Session {
            session_id: parse_id(&sid)?,
            label,
            head_ledger_id: head.as_deref().map(parse_id).transpose()?,
            status,
            created_at,
        })
    })
}

pub(crate) fn reflog_in(conn: &Connection, session_id: &str) -> Result<Vec<RefLogEntry>> {
    let mut stmt = conn.prepare_cached(
        "SELECT session_id, seq, old_head, new_head, new_head_hash, reason, at, entry_hash
           FROM session_reflog WHERE session_id = ?1 ORDER BY seq",
    )?;
    let rows = stmt.query_map([session_id], |r| {
        Ok(RefLogEntry {
            session_id: r.get(0)?,
            seq: r.get(1)?,
            old_head: r.get(2)?,
            new_head: r.get(3)?,
            new_head_hash: r.get(4)?,
            reason: r.get(5)?,
            at: r.get(6)?,
            entry_hash: r.get(7)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Moves a session head inside the caller's transaction: ref log entry first, then the head
/// (the `sessions_head_logged` trigger refuses the reverse).
pub(crate) fn move_head(
    conn: &Connection,
    session_id: SessionId,
    new_head: LedgerId,
    new_head_hash: &str,
    reason: &str,
) -> Result<RefLogEntry> {
    let session = read_session_in(conn, session_id)?;
    let last: Option<(i64, String)> = conn
        .prepare_cached(
            "SELECT seq, entry_hash FROM session_reflog WHERE session_id = ?1 ORDER BY seq DESC LIMIT 1",
        )?
        .query_row([session_id.to_string()], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let (prev_seq, prev_hash) = last.unwrap_or((0, String::new()));
    let mut entry = RefLogEntry {
        session_id: session_id.to_string(),
        seq: prev_seq + 1,
        old_head: session.head_ledger_id.map(|h| h.to_string()),
        new_head: new_head.to_string(),
        new_head_hash: new_head_hash.to_owned(),
        reason: reason.to_owned(),
        at: time::now(),
        entry_hash: String::new(),
    };
    entry.entry_hash = entry.compute_hash(&prev_hash);
    conn.prepare_cached(
        "INSERT INTO session_reflog (session_id, seq, old_head, new_head, new_head_hash, reason, at, entry_hash)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        entry.session_id,
        entry.seq,
        entry.old_head,
        entry.new_head,
        entry.new_head_hash,
        entry.reason,
        entry.at,
        entry.entry_hash,
    ])?;
    conn.prepare_cached("UPDATE sessions SET head_ledger_id = ?2 WHERE session_id = ?1")?
        .execute(params![session_id.to_string(), entry.new_head])?;
    Ok(entry)
}

/// Sets a session's status inside the caller's transaction.
pub(crate) fn set_session_status_in(
    conn: &Connection,
    id: SessionId,
    status: SessionStatus,
) -> Result<()> {
    conn.execute_cached(
        "UPDATE sessions SET status = ?2 WHERE session_id = ?1",
        params![id.to_string(), status],
    )?;
    Ok(())
}

/// Creates a session inside the caller's transaction.
pub(crate) fn create_session_in(conn: &Connection, label: &str) -> Result<Session> {
    check_label(label)?;
    let session = Session {
        session_id: SessionId::new(),
        label: label.to_owned(),
        head_ledger_id: None,
        status: SessionStatus::Active,
        created_at: time::now(),
    };
    conn.execute_cached(
"INSERT INTO sessions (session_id, label, status, created_at) VALUES (?1, ?2, 'active', ?3)",
        params![session.session_id.to_string(), session.label, session.created_at],
    )?;
    Ok(session)
}

impl Store {
    /// Creates a session.
    pub fn create_session(&mut self, label: &str) -> Result<Session> {
        self.write_raw(|tx| create_session_in(tx, label))
    }

    /// Reads one session.
    pub fn read_session(&self, id: SessionId) -> Result<Session> {
        read_session_in(&self.conn, id)
    }

    /// The session's ref log, oldest first.
    pub fn reflog(&self, session_id: SessionId) -> Result<Vec<RefLogEntry>> {
        read_session_in(&self.conn, session_id)?;
        reflog_in(&self.conn, &session_id.to_string())
    }

    /// Every session, newest first.
    pub fn sessions(&self) -> Result<Vec<Session>> {
        let mut stmt = self
            .conn
            .prepare("SELECT session_id FROM sessions ORDER BY session_id DESC")?;
        let ids = stmt
            .query_map([], |r| r.get::<_, String>(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        ids.iter()
            .map(|id| read_session_in(&self.conn, parse_id(id)?))
            .collect()
    }

    /// Whether `id` names a record, a ledger or a session (for commands that take any): a
    /// bare `Uuid`, since its kind is what this finds out.
    pub fn kind_of(&self, id: Uuid) -> Result<Option<&'static str>> {
        let id = id.to_string();
        for (kind, sql) in [
            ("record", "SELECT 1 FROM records WHERE record_id = ?1"),
            ("ledger", "SELECT 1 FROM ledgers WHERE ledger_id = ?1"),
            ("session", "SELECT 1 FROM sessions WHERE session_id = ?1"),
        ] {
            if self
                .conn
                .query_row(sql, [&id], |_| Ok(()))
                .optional()?
                .is_some()
            {
                return Ok(Some(kind));
            }
        }
        Ok(None)
    }
}

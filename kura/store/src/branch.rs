//! Branches of history, git-style: rewind a session's head to an earlier sealed ledger, fork
//! a new session from any sealed ledger (sharing its history, copying nothing), and tell which
//! ledgers a head no longer reaches. Nothing is deleted: every move is a ref-log entry.

use std::collections::HashSet;

use proto::content::SessionForkContent;
use proto::ledger::{Ledger, LedgerState};
use proto::record::{NewRecord, RecordType};
use proto::{LedgerId, SessionId};
use rusqlite::Connection;

use crate::error::{Result, StoreError};
use crate::store::{
    RefLogEntry, Session, Store, append_in, create_session_in, move_head, open_ledger_in, parse_id,
    read_ledger_in, read_session_in, seal_in,
};

/// The author of fork records.
pub(crate) const AUTHOR: &str = "sys:kura";
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

/// Creates a session forked from the sealed ledger `origin` (of any session): its first
/// ledger, `fork`, has `origin` as its parent and holds one `session.fork` record naming the
/// origin; it is sealed at once (by `sealer`, when given), so it is the new session's head.
pub(crate) fn fork_in(
    conn: &Connection,
    origin: LedgerId,
    label: &str,
    sealer: Option<&kura_tlog::sealer::Sealer>,
) -> Result<(Session, Ledger)> {
    let o = read_ledger_in(conn, origin)?;
    let Some(origin_hash) = o
        .ledger_hash
        .clone()
        .filter(|_| o.state == LedgerState::Sealed)
    else {
        return Err(StoreError::Invalid(format!(
            "ledger {origin} is not sealed; only sealed history can be forked"
        )));
    };
    let session = create_session_in(conn, label)?;
    let first = open_ledger_in(conn, session.session_id, "fork", &[origin])?;
    append_in(
        conn,
        first.ledger_id,
        &NewRecord {
            record_type: RecordType::SessionFork,
            content: SessionForkContent {
                origin_ledger: origin,
                origin_session: o.session_id,
                origin_hash,
                origin_label: Some(o.label.clone()),
                origin_pi: None,
                origin_checkpoint: None,
            }
            .to_value(),
            author_id: AUTHOR.to_owned(),
            metadata: Default::default(),
        },
    )?;
    let (sealed, _) = seal_in(conn, first.ledger_id, sealer)?;
    Ok((read_session_in(conn, session.session_id)?, sealed))
}

/// A session forked from one of this session's ledgers.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Fork {
    /// The forked session.
    pub session_id: SessionId,
    /// Its first ledger.
    pub ledger_id: LedgerId,
    /// The ledger of this session it grew from.
    pub origin: LedgerId,
}

/// Sessions that grew from a ledger of `session_id`, oldest first.
pub fn forks_of(conn: &impl crate::tx::Db, session_id: SessionId) -> Result<Vec<Fork>> {
    let conn = crate::tx::conn(conn);
    let mut stmt = conn.prepare_cached(
        "SELECT l.session_id, l.ledger_id, j.value
           FROM ledgers l, json_each(l.parent_ids) j
           JOIN ledgers p ON p.ledger_id = j.value
          WHERE p.session_id = ?1 AND l.session_id != ?1
          ORDER BY l.ledger_id",
    )?;
    let rows = stmt.query_map([session_id.to_string()], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (s, l, o) = row?;
        out.push(Fork {
            session_id: parse_id(&s)?,
            ledger_id: parse_id(&l)?,
            origin: parse_id(&o)?,
        });
    }
    Ok(out)
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

/// The size a signed checkpoint note commits to (its second line), already verified when
/// the replica stored it.
fn checkpoint_size(note: &str) -> Option<u64> {
    note.lines().nth(1)?.trim().parse().ok()
}

/// What a fork from another Pi's replica starts from: the ledger's session, hash, label,
/// its records, and the replica's verified checkpoint (which must cover the ledger).
struct Foreign {
    session: SessionId,
    hash: String,
    label: String,
    records: Vec<NewRecord>,
    checkpoint: String,
}

fn read_foreign(replica: &Store, pi: &str, origin: LedgerId) -> Result<Foreign> {
    let c = replica.conn();
    let o = read_ledger_in(c, origin)?;
    let (Some(hash), LedgerState::Sealed) = (o.ledger_hash.clone(), o.state) else {
        return Err(StoreError::Invalid(format!(
            "ledger {origin} is not sealed in {pi}'s replica"
        )));
    };
    let Some((_, checkpoint)) = crate::replica::inbox(replica, pi)? else {
        return Err(StoreError::Invalid(format!(
            "{} is not a verified replica of {pi} (no checkpoint was verified there)",
            replica.path().display()
        )));
    };
    let leaf = kura_tlog::storage::LogStorage::leaf_of(&replica.seal_log(), origin)?;
    match (leaf, checkpoint_size(&checkpoint)) {
        (Some((index, _)), Some(size)) if index < size => {}
        _ => {
            return Err(StoreError::Invalid(format!(
                "ledger {origin} is not covered by {pi}'s verified checkpoint yet; wait for the replica to catch up"
            )));
        }
    }
    let records = replica
        .hydrate(origin)?
        .into_iter()
        .map(|r| NewRecord {
            record_type: r.record_type,
            content: r.content,
            author_id: r.author_id,
            metadata: r.metadata,
        })
        .collect();
    Ok(Foreign {
        session: o.session_id,
        hash,
        label: o.label,
        records,
        checkpoint,
    })
}

impl Store {
    /// Continues another Pi's sealed ledger here: a new session whose first ledger holds a
    /// `session.fork` record naming that Pi, the ledger (id, session, hash) and the checkpoint
    /// its verified `replica` holds, then copies of the ledger's records (same content, so
    /// the same hashes). The origin ledger is not in this database, so it is no parent: the
    /// link is the hash, checkable against the replica and that Pi's checkpoints.
    pub fn fork_from_replica(
        &mut self,
        replica: &Store,
        pi: &str,
        origin: LedgerId,
        label: &str,
    ) -> Result<(Session, Ledger)> {
        let f = read_foreign(replica, pi, origin)?;
        let sealer = self.sealer().cloned();
        self.write_raw(|conn| {
            let session = create_session_in(conn, label)?;
            let first = open_ledger_in(conn, session.session_id, "fork", &[])?;
            append_in(
                conn,
                first.ledger_id,
                &NewRecord {
                    record_type: RecordType::SessionFork,
                    content: SessionForkContent {
                        origin_ledger: origin,
                        origin_session: f.session,
                        origin_hash: f.hash.clone(),
                        origin_label: Some(f.label.clone()),
                        origin_pi: Some(pi.to_owned()),
                        origin_checkpoint: Some(f.checkpoint.clone()),
                    }
                    .to_value(),
                    author_id: AUTHOR.to_owned(),
                    metadata: Default::default(),
                },
            )?;
            for r in &f.records {
                append_in(conn, first.ledger_id, r)?;
            }
            let (sealed, _) = seal_in(conn, first.ledger_id, sealer.as_ref())?;
            Ok((read_session_in(conn, session.session_id)?, sealed))
        })
    }

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

    /// Creates a session forked from the sealed ledger `origin` (of any session): its first
    /// ledger holds one `session.fork` record naming the origin and is sealed at once (by
    /// this store's sealer), so it is the new session's head.
    pub fn fork(&mut self, origin: LedgerId, label: &str) -> Result<(Session, Ledger)> {
        let sealer = self.sealer().cloned();
        self.write_raw(|tx| fork_in(tx, origin, label, sealer.as_ref()))
    }
}

//! Ledgers: open, append (one row per record, never a rewrite), seal into the hash chain, read, hydrate.

use crate::cached::Cached;
use proto::ledger::{Ledger, LedgerHeader, LedgerState, ParentRef};
use proto::merkle;
use proto::record::{NewRecord, OwnedColumns, Record};
use proto::{LedgerId, RecordId, SessionId};
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::records::{RECORD_COLUMNS, columns_from_row, insert_record, record_from_row};
use super::{Store, parse_id, sessions};
use crate::error::{Result, StoreError};
use crate::time;

use super::labels::check_label;

/// The columns of `ledgers` in the order [`ledger_from_row`] reads them.
pub(crate) const LEDGER_COLUMNS: &str = "ledger_id, session_id, label, parent_ids, state, \
     record_count, root_hash, ledger_hash, created_at, sealed_at";

/// The outcome of appending one record to a ledger.
#[derive(Debug, Clone, PartialEq)]
pub struct Appended {
    /// The stored record (an existing one if deduplicated).
    pub record: Record,
    /// Its position in the ledger.
    pub position: u64,
    /// True when the content was already stored and the existing record was reused.
    pub deduplicated: bool,
}

/// One member of a ledger with its record's raw stored columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRow {
    /// Position in the ledger.
    pub position: u64,
    /// The record's columns exactly as stored.
    pub columns: OwnedColumns,
    /// The leaf hash recorded when the record was appended.
    pub leaf_at_append: String,
}

pub(crate) fn ledger_from_row(row: &Row<'_>) -> rusqlite::Result<Result<Ledger>> {
    let id: String = row.get(0)?;
    let session: String = row.get(1)?;
    let label: String = row.get(2)?;
    let parents: String = row.get(3)?;
    let state: String = row.get(4)?;
    let count: i64 = row.get(5)?;
    let root_hash: Option<String> = row.get(6)?;
    let ledger_hash: Option<String> = row.get(7)?;
    let created_at: String = row.get(8)?;
    let sealed_at: Option<String> = row.get(9)?;
    Ok((|| {
        let corrupt = |what: &str| {
            StoreError::Invalid(format!(
                "ledger {id}: stored {what} is corrupt (run `kura verify`)"
            ))
        };
        let parent_ids = serde_json::from_str::<Vec<String>>(&parents)
            .map_err(|_| corrupt("parent_ids"))?
            .iter()
            .map(|p| parse_id(p))
            .collect::<Result<Vec<_>>>()
            .map_err(|_| corrupt("parent_ids"))?;
        Ok(Ledger {
            ledger_id: parse_id(&id).map_err(|_| corrupt("id"))?,
            session_id: parse_id(&session).map_err(|_| corrupt("session_id"))?,
            label,
            parent_ids,
            state: match state.as_str() {
                "open" => LedgerState::Open,
                "sealed" => LedgerState::Sealed,
                _ => return Err(corrupt("state")),
            },
            record_count: u64::try_from(count).map_err(|_| corrupt("record_count"))?,
            root_hash,
            ledger_hash,
            created_at,
            sealed_at,
        })
    })())
}

pub(crate) fn read_ledger_in(conn: &Connection, id: LedgerId) -> Result<Ledger> {
    let sql = format!("SELECT {LEDGER_COLUMNS} FROM ledgers WHERE ledger_id = ?1");
    conn.prepare_cached(&sql)?
        .query_row([id.to_string()], ledger_from_row)
        .optional()?
        .transpose()?
        .ok_or_else(|| StoreError::NotFound {
            kind: "ledger",
            id: id.to_string(),
        })
}

/// Every member of a ledger with its record's raw columns, in position order.
pub(crate) fn member_rows(conn: &Connection, ledger_id: LedgerId) -> Result<Vec<MemberRow>> {
    let mut stmt = conn.prepare_cached(
        "SELECT m.position, r.record_id, r.hash, r.record_type, r.content, r.author_id,
                r.metadata, r.created_at, m.leaf_hash
           FROM ledger_records m JOIN records r ON r.record_id = m.record_id
          WHERE m.ledger_id = ?1 ORDER BY m.position",
    )?;
    let rows = stmt.query_map([ledger_id.to_string()], |row| {
        Ok(MemberRow {
            position: row.get::<_, i64>(0)?.try_into().unwrap_or(u64::MAX),
            columns: OwnedColumns {
                record_id: row.get(1)?,
                hash: super::hashcol::to_hex(row.get_ref(2)?),
                record_type: row.get(3)?,
                content: row.get(4)?,
                author_id: row.get(5)?,
                metadata: row.get(6)?,
                created_at: row.get(7)?,
            },
            leaf_at_append: row.get(8)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// RFC 6962 leaf hashes of the members, in order (a redacted record's kept leaf).
pub(crate) fn leaf_hashes(conn: &Connection, members: &[MemberRow]) -> Result<Vec<merkle::Hash>> {
    members
        .iter()
        .map(|m| {
            Ok(
                match crate::redact::kept_leaf(conn, &m.columns.record_id)? {
                    Some(kept) => merkle::decode_hash(&kept).unwrap_or_default(),
                    None => m.columns.as_columns().leaf_hash(),
                },
            )
        })
        .collect()
}

/// The parents as the chain commits to them (each must be sealed).
pub(crate) fn parent_refs(conn: &Connection, parents: &[LedgerId]) -> Result<Vec<ParentRef>> {
    parents
        .iter()
        .map(|p| {
            let parent = read_ledger_in(conn, *p)?;
            match (parent.state, parent.ledger_hash) {
                (LedgerState::Sealed, Some(hash)) => Ok(ParentRef {
                    ledger_id: p.to_string(),
                    ledger_hash: hash,
                }),
                _ => Err(StoreError::ParentOpen(p.to_string())),
            }
        })
        .collect()
}

/// The header a sealed ledger's hash commits to.
pub(crate) fn header(ledger: &Ledger, parents: Vec<ParentRef>, sealed_at: &str) -> LedgerHeader {
    LedgerHeader {
        ledger_id: ledger.ledger_id.to_string(),
        session_id: ledger.session_id.to_string(),
        label: ledger.label.clone(),
        parents,
        created_at: ledger.created_at.clone(),
        sealed_at: sealed_at.to_owned(),
    }
}

/// The next free position of an open ledger (refusing sealed or missing ledgers).
fn next_position(conn: &Connection, ledger_id: LedgerId) -> Result<i64> {
    let (state, count): (String, i64) = conn
        .prepare_cached("SELECT state, record_count FROM ledgers WHERE ledger_id = ?1")?
        .query_row([ledger_id.to_string()], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?
        .ok_or_else(|| StoreError::NotFound {
            kind: "ledger",
            id: ledger_id.to_string(),
        })?;
    if state != "open" {
        return Err(StoreError::Sealed(ledger_id.to_string()));
    }
    Ok(count)
}

/// Adds a member row for stored columns at `position` (the next one).
fn add_member(
    conn: &Connection,
    ledger_id: LedgerId,
    position: i64,
    columns: &OwnedColumns,
) -> Result<()> {
    let leaf = match crate::redact::kept_leaf(conn, &columns.record_id)? {
        Some(kept) => kept,
        None => proto::canonical::to_hex(&columns.as_columns().leaf_hash()),
    };
    conn.prepare_cached(
        "INSERT INTO ledger_records (ledger_id, position, record_id, leaf_hash) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![ledger_id.to_string(), position, columns.record_id, leaf])?;
    conn.prepare_cached("UPDATE ledgers SET record_count = ?2 WHERE ledger_id = ?1")?
        .execute(params![ledger_id.to_string(), position + 1])?;
    Ok(())
}

/// Appends a new record to an open ledger inside the caller's transaction.
pub(crate) fn append_in(
    conn: &Connection,
    ledger_id: LedgerId,
    new: &NewRecord,
) -> Result<Appended> {
    let count = next_position(conn, ledger_id)?;
    append_at(conn, ledger_id, count, new)
}

/// Appends at `count`, the ledger's next position, which the caller has just read (the
/// append-only trigger refuses any other).
fn append_at(
    conn: &Connection,
    ledger_id: LedgerId,
    count: i64,
    new: &NewRecord,
) -> Result<Appended> {
    let stored = insert_record(conn, new)?;
    add_member(conn, ledger_id, count, &stored.columns)?;
    Ok(Appended {
        record: stored.record,
        position: u64::try_from(count).unwrap_or(0),
        deduplicated: stored.deduplicated,
    })
}

/// Appends an already stored record (by id) to an open ledger inside the caller's
/// transaction — e.g. the same instruction in every context ledger of a session.
pub(crate) fn append_existing_in(
    conn: &Connection,
    ledger_id: LedgerId,
    record_id: RecordId,
) -> Result<u64> {
    let count = next_position(conn, ledger_id)?;
    let sql = format!("SELECT {RECORD_COLUMNS} FROM records WHERE record_id = ?1");
    let columns = conn
        .prepare_cached(&sql)?
        .query_row([record_id.to_string()], columns_from_row)
        .optional()?
        .ok_or_else(|| StoreError::NotFound {
            kind: "record",
            id: record_id.to_string(),
        })?;
    add_member(conn, ledger_id, count, &columns)?;
    Ok(u64::try_from(count).unwrap_or(0))
}

/// Opens a ledger inside the caller's transaction (parents must be sealed).
pub(crate) fn open_ledger_in(
    conn: &Connection,
    session_id: SessionId,
    label: &str,
    parents: &[LedgerId],
) -> Result<Ledger> {
    check_label(label)?;
    for (i, p) in parents.iter().enumerate() {
        if parents[..i].contains(p) {
            return Err(StoreError::Invalid(format!("parent {p} is listed twice")));
        }
    }
    sessions::read_session_in(conn, session_id)?;
    parent_refs(conn, parents)?;
    let ledger = Ledger {
        ledger_id: LedgerId::new(),
        session_id,
        label: label.to_owned(),
        parent_ids: parents.to_vec(),
        state: LedgerState::Open,
        record_count: 0,
        root_hash: None,
        ledger_hash: None,
        created_at: time::now(),
        sealed_at: None,
    };
    let parent_ids: Vec<String> = parents.iter().map(LedgerId::to_string).collect();
    conn.execute_cached(
        "INSERT INTO ledgers (ledger_id, session_id, label, parent_ids, state, created_at)
         VALUES (?1, ?2, ?3, ?4, 'open', ?5)",
        params![
            ledger.ledger_id.to_string(),
            session_id.to_string(),
            label,
            serde_json::to_string(&parent_ids).map_err(|e| StoreError::Invalid(e.to_string()))?,
            ledger.created_at,
        ],
    )?;
    Ok(ledger)
}

/// Seals a ledger inside the caller's transaction (see [`Store::seal_ledger`]).
/// `sealer` signs the ledger hash (recorded beside it) when given.
pub(crate) fn seal_in(
    conn: &Connection,
    ledger_id: LedgerId,
    sealer: Option<&kura_tlog::sealer::Sealer>,
) -> Result<(Ledger, bool)> {
    let mut ledger = read_ledger_in(conn, ledger_id)?;
    if ledger.state == LedgerState::Sealed {
        return Ok((ledger, false));
    }
    let members = member_rows(conn, ledger_id)?;
    if members.len() as u64 != ledger.record_count {
        return Err(StoreError::Invalid(format!(
            "ledger {ledger_id} has {} members but records {} (run `kura verify`)",
            members.len(),
            ledger.record_count
        )));
    }
    let leaves = leaf_hashes(conn, &members)?;
    for (m, leaf) in members.iter().zip(&leaves) {
        if proto::canonical::to_hex(leaf) != m.leaf_at_append {
            return Err(StoreError::Invalid(format!(
                "record {} changed after it was appended to ledger {ledger_id}; refusing to seal (run `kura verify`)",
                m.columns.record_id
            )));
        }
    }
    let root = proto::canonical::to_hex(&merkle::root(&leaves));
    let parents = parent_refs(conn, &ledger.parent_ids)?;
    let sealed_at = time::now();
    let hash = header(&ledger, parents, &sealed_at).ledger_hash(ledger.record_count, &root);
    conn.execute_cached(
        "UPDATE ledgers SET state = 'sealed', root_hash = ?2, ledger_hash = ?3, sealed_at = ?4
          WHERE ledger_id = ?1",
        params![ledger_id.to_string(), root, hash, sealed_at],
    )?;
    sessions::move_head(conn, ledger.session_id, ledger_id, &hash, "seal")?;
    let log = crate::SealLog(conn);
    kura_tlog::seallog::append(&log, ledger_id, ledger.session_id, &hash)?;
    if let Some(sealer) = sealer {
        sealer.sign(&log, &ledger_id.to_string(), &hash)?;
    }
    ledger.state = LedgerState::Sealed;
    ledger.root_hash = Some(root);
    ledger.ledger_hash = Some(hash);
    ledger.sealed_at = Some(sealed_at);
    Ok((ledger, true))
}

impl Store {
    /// Opens a new ledger in `session_id` with the given parents (which must be sealed).
    pub fn open_ledger(
        &mut self,
        session_id: SessionId,
        label: &str,
        parents: &[LedgerId],
    ) -> Result<Ledger> {
        self.write_raw(|tx| open_ledger_in(tx, session_id, label, parents))
    }

    /// Appends one record to an open ledger: one durable transaction, one new member row.
    pub fn append(&mut self, ledger_id: LedgerId, new: &NewRecord) -> Result<Appended> {
        self.write_raw(|tx| append_in(tx, ledger_id, new))
    }

    /// Appends many records in one transaction (group commit): all or none.
    pub fn append_batch(
        &mut self,
        ledger_id: LedgerId,
        batch: &[NewRecord],
    ) -> Result<Vec<Appended>> {
        self.write_raw(|tx| {
            // The ledger is looked up once: inside this transaction only these appends move
            // its count.
            let first = next_position(tx, ledger_id)?;
            batch
                .iter()
                .zip(first..)
                .map(|(new, position)| append_at(tx, ledger_id, position, new))
                .collect()
        })
    }

    /// Seals an open ledger: fixes its Merkle root and chained ledger hash and moves its
    /// session's head to it (logged in the ref log). Sealing a sealed ledger changes nothing
    /// and returns it with `false`.
    pub fn seal_ledger(&mut self, ledger_id: LedgerId) -> Result<(Ledger, bool)> {
        let sealer = self.sealer.clone();
        self.write_raw(|tx| seal_in(tx, ledger_id, sealer.as_ref()))
    }

    /// Reads one ledger's row.
    pub fn read_ledger(&self, id: LedgerId) -> Result<Ledger> {
        read_ledger_in(&self.conn, id)
    }

    /// The ledger's records, in order.
    pub fn hydrate(&self, ledger_id: LedgerId) -> Result<Vec<Record>> {
        self.hydrate_range(ledger_id, 0, usize::MAX)
    }

    /// Up to `limit` of the ledger's records from position `from`, in order (one page of a
    /// long ledger, read by its primary key without touching the rest).
    pub fn hydrate_range(
        &self,
        ledger_id: LedgerId,
        from: u64,
        limit: usize,
    ) -> Result<Vec<Record>> {
        read_ledger_in(&self.conn, ledger_id)?;
        let cols = RECORD_COLUMNS
            .split(", ")
            .map(|c| format!("r.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "SELECT {cols} FROM ledger_records m JOIN records r ON r.record_id = m.record_id
              WHERE m.ledger_id = ?1 AND m.position >= ?2 ORDER BY m.position LIMIT ?3"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let from = i64::try_from(from).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt.query_map(
            rusqlite::params![ledger_id.to_string(), from, limit],
            record_from_row,
        )?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row??);
        }
        Ok(out)
    }

    /// Members with raw columns, for proofs and exports.
    pub fn members(&self, ledger_id: LedgerId) -> Result<Vec<MemberRow>> {
        read_ledger_in(&self.conn, ledger_id)?;
        member_rows(&self.conn, ledger_id)
    }

    /// The ledgers of a session, newest first (creation order is id order: UUIDv7).
    pub fn session_ledgers(&self, session_id: SessionId) -> Result<Vec<Ledger>> {
        sessions::read_session_in(&self.conn, session_id)?;
        let sql = format!(
            "SELECT {LEDGER_COLUMNS} FROM ledgers WHERE session_id = ?1 ORDER BY ledger_id DESC"
        );
        let mut stmt = self.conn.prepare(&sql)?;
        let rows = stmt.query_map([session_id.to_string()], ledger_from_row)?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row??);
        }
        Ok(out)
    }

    /// The ids of every ledger that contains `record_id`.
    pub fn ledgers_containing(&self, record_id: RecordId) -> Result<Vec<LedgerId>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT DISTINCT ledger_id FROM ledger_records WHERE record_id = ?1 ORDER BY ledger_id",
        )?;
        let rows = stmt.query_map([record_id.to_string()], |r| r.get::<_, String>(0))?;
        let mut out = Vec::new();
        for row in rows {
            out.push(parse_id(&row?)?);
        }
        Ok(out)
    }
}

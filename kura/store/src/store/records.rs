//! Records: write (deduplicated by content hash), read, look up by hash, query.

use std::collections::BTreeMap;

use proto::record::{NewRecord, OwnedColumns, Record, RecordType};
use proto::{RecordId, SessionId};
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::{Store, parse_id};
use crate::cached::Cached;
use crate::error::{Result, StoreError};
use crate::time;

/// The columns of `records` in stored order; shared by every SELECT here.
pub(crate) const RECORD_COLUMNS: &str =
    "record_id, hash, record_type, content, author_id, metadata, created_at";

/// Filters for [`Store::query`]. Empty filters match everything.
#[derive(Debug, Clone, Default)]
pub struct Query {
    /// Only this type.
    pub record_type: Option<RecordType>,
    /// Only records created at or after this stored-form time.
    pub since: Option<String>,
    /// Only this author.
    pub author_id: Option<String>,
    /// Only records in ledgers of this session.
    pub session_id: Option<SessionId>,
    /// At most this many (newest first); `None` means 100.
    pub limit: Option<u32>,
}

/// Reads a row of [`RECORD_COLUMNS`] as the raw stored columns.
pub(crate) fn columns_from_row(row: &Row<'_>) -> rusqlite::Result<OwnedColumns> {
    Ok(OwnedColumns {
        record_id: row.get(0)?,
        hash: super::hashcol::to_hex(row.get_ref(1)?),
        record_type: row.get(2)?,
        content: row.get(3)?,
        author_id: row.get(4)?,
        metadata: row.get(5)?,
        created_at: row.get(6)?,
    })
}

/// Builds a [`Record`] from a row of [`RECORD_COLUMNS`].
pub(crate) fn record_from_row(row: &Row<'_>) -> rusqlite::Result<Result<Record>> {
    Ok(record_from_columns(&columns_from_row(row)?))
}

/// A record as written: the parsed form and the exact stored columns.
pub(crate) struct Stored {
    /// The record.
    pub record: Record,
    /// Its columns exactly as stored (the Merkle leaf is computed from these).
    pub columns: OwnedColumns,
    /// True when the content was already stored and that record was returned.
    pub deduplicated: bool,
}

/// Writes a record inside the caller's transaction; if a record with the same content hash
/// exists, returns that one instead.
pub(crate) fn insert_record(conn: &Connection, new: &NewRecord) -> Result<Stored> {
    let parts = new.validate()?;
    let hash_column = super::hashcol::to_column(&parts.hash).ok_or_else(|| {
        StoreError::Invalid(format!("content hash {} is not SHA-256 hex", parts.hash))
    })?;
    let record_id = RecordId::new();
    let columns = OwnedColumns {
        record_id: record_id.to_string(),
        hash: parts.hash,
        record_type: new.record_type.as_str().to_owned(),
        content: parts.content,
        author_id: new.author_id.clone(),
        metadata: parts.metadata,
        created_at: time::now(),
    };
    // One index probe instead of two: insert, and only if the hash is already there read the
    // existing record (dedup by content hash).
    let inserted = conn
        .prepare_cached(
            "INSERT INTO records (record_id, hash, record_type, content, author_id, metadata, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (hash) DO NOTHING",
        )?
        .execute(params![
            columns.record_id,
            &hash_column[..],
            columns.record_type,
            columns.content,
            columns.author_id,
            columns.metadata,
            columns.created_at,
        ])?;
    if inserted == 0 {
        let columns = columns_by_hash(conn, &columns.hash)?.ok_or_else(|| {
            StoreError::Invalid(format!("record {} could not be stored", columns.hash))
        })?;
        let record = record_from_columns(&columns)?;
        return Ok(Stored {
            record,
            columns,
            deduplicated: true,
        });
    }
    // Memory is found by search whoever wrote it: mikado's extraction, a person's `kura record
    // add`, an outside agent.
    index_new_in(conn, &record_id, new)?;
    // The content as it reads back from the store (RFC 8785: `1.0` is `1`), not as given: a
    // caller that shows this record on (a model's next request) shows what a reader sees.
    let content = serde_json::from_str(&columns.content).unwrap_or_else(|_| new.content.clone());
    Ok(Stored {
        record: Record {
            record_id,
            hash: columns.hash.clone(),
            record_type: new.record_type,
            content,
            author_id: new.author_id.clone(),
            metadata: new.metadata.clone(),
            created_at: columns.created_at.clone(),
        },
        columns,
        deduplicated: false,
    })
}

fn columns_by_hash(conn: &Connection, hash: &str) -> Result<Option<OwnedColumns>> {
    let Some(column) = super::hashcol::to_column(hash) else {
        return Ok(None);
    };
    let sql = format!("SELECT {RECORD_COLUMNS} FROM records WHERE hash = ?1");
    Ok(conn
        .prepare_cached(&sql)?
        .query_row([&column[..]], columns_from_row)
        .optional()?)
}

/// Parses stored columns into a [`Record`].
pub(crate) fn record_from_columns(c: &OwnedColumns) -> Result<Record> {
    let id = &c.record_id;
    let corrupt = |what: &str| {
        StoreError::Invalid(format!(
            "record {id}: stored {what} is corrupt (run `kura verify`)"
        ))
    };
    Ok(Record {
        record_id: parse_id(id).map_err(|_| corrupt("id"))?,
        hash: c.hash.clone(),
        record_type: c.record_type.parse().map_err(|_| corrupt("type"))?,
        content: serde_json::from_str(&c.content).map_err(|_| corrupt("content"))?,
        author_id: c.author_id.clone(),
        metadata: serde_json::from_str::<BTreeMap<String, String>>(&c.metadata)
            .map_err(|_| corrupt("metadata"))?,
        created_at: c.created_at.clone(),
    })
}

/// Writes (or finds, by content hash) a record inside the caller's transaction.
/// Reads one record.
pub(crate) fn read_record_in(conn: &Connection, id: RecordId) -> Result<Record> {
    let sql = format!("SELECT {RECORD_COLUMNS} FROM records WHERE record_id = ?1");
    conn.prepare_cached(&sql)?
        .query_row([id.to_string()], record_from_row)
        .optional()?
        .transpose()?
        .ok_or_else(|| StoreError::NotFound {
            kind: "record",
            id: id.to_string(),
        })
}

pub(crate) fn write_record_in(conn: &Connection, new: &NewRecord) -> Result<Record> {
    insert_record(conn, new).map(|s| s.record)
}

/// The id of the record with this content hash, if one is stored.
pub(crate) fn record_id_by_hash(conn: &Connection, hash: &str) -> Result<Option<String>> {
    let Some(column) = super::hashcol::to_column(hash) else {
        return Ok(None);
    };
    Ok(conn
        .prepare_cached("SELECT record_id FROM records WHERE hash = ?1")?
        .query_row([&column[..]], |r| r.get(0))
        .optional()?)
}

#[cfg(test)]
fn by_hash(conn: &Connection, hash: &str) -> Result<Option<Record>> {
    columns_by_hash(conn, hash)?
        .map(|c| record_from_columns(&c))
        .transpose()
}

impl Store {
    /// Stores a record on its own (not in any ledger). Writing content that is already
    /// stored returns the existing record, unchanged (`true` = deduplicated).
    pub fn write_record(&mut self, new: &NewRecord) -> Result<(Record, bool)> {
        self.write_raw(|tx| insert_record(tx, new).map(|s| (s.record, s.deduplicated)))
    }

    /// Reads one record.
    pub fn read_record(&self, id: RecordId) -> Result<Record> {
        read_record_in(&self.conn, id)
    }

    /// The record with this content hash, if any (dedup check).
    #[cfg(test)]
    pub(crate) fn exists_by_hash(&self, hash: &str) -> Result<Option<Record>> {
        by_hash(&self.conn, hash)
    }

    /// Records matching `q`, newest first.
    pub fn query(&self, q: &Query) -> Result<Vec<Record>> {
        let mut sql = format!("SELECT {RECORD_COLUMNS} FROM records r WHERE 1=1");
        let mut args: Vec<String> = Vec::new();
        if let Some(t) = q.record_type {
            args.push(t.as_str().to_owned());
            sql.push_str(&format!(" AND r.record_type = ?{}", args.len()));
        }
        if let Some(since) = &q.since {
            args.push(since.clone());
            sql.push_str(&format!(" AND r.created_at >= ?{}", args.len()));
        }
        if let Some(author) = &q.author_id {
            args.push(author.clone());
            sql.push_str(&format!(" AND r.author_id = ?{}", args.len()));
        }
        if let Some(session) = q.session_id {
            args.push(session.to_string());
            sql.push_str(&format!(
                " AND r.record_id IN (SELECT m.record_id FROM ledger_records m
                   JOIN ledgers l ON l.ledger_id = m.ledger_id WHERE l.session_id = ?{})",
                args.len()
            ));
        }
        let limit = q.limit.unwrap_or(100);
        sql.push_str(&format!(
            " ORDER BY r.created_at DESC, r.record_id DESC LIMIT {limit}"
        ));
        let mut stmt = self.conn.prepare(&sql)?;
        let rows = stmt.query_map(rusqlite::params_from_iter(args.iter()), record_from_row)?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row??);
        }
        Ok(out)
    }
}

/// Indexes a newly stored memory record (`memory.fact`, `memory.decision`) for search; any
/// other record is left alone. Called in the transaction that stores it.
fn index_new_in(tx: &Connection, record_id: &RecordId, new: &NewRecord) -> Result<()> {
    if !matches!(
        new.record_type,
        RecordType::MemoryFact | RecordType::MemoryDecision
    ) {
        return Ok(());
    }
    let Some(text) = new.content.get("text").and_then(serde_json::Value::as_str) else {
        return Ok(());
    };
    tx.execute_cached(
        "INSERT INTO kb (text, record_id, record_type) VALUES (?1, ?2, ?3)",
        params![text, record_id.to_string(), new.record_type.as_str()],
    )?;
    Ok(())
}

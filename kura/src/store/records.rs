//! Records: write (deduplicated by content hash), read, look up by hash, query.

use std::collections::BTreeMap;

use proto::record::{NewRecord, Record, RecordType};
use rusqlite::{Connection, OptionalExtension, Row, params};
use uuid::Uuid;

use super::{Store, parse_id};
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
    pub session_id: Option<Uuid>,
    /// At most this many (newest first); `None` means 100.
    pub limit: Option<u32>,
}

/// Builds a [`Record`] from a row of [`RECORD_COLUMNS`].
pub(crate) fn record_from_row(row: &Row<'_>) -> rusqlite::Result<Result<Record>> {
    let id: String = row.get(0)?;
    let hash: String = row.get(1)?;
    let rtype: String = row.get(2)?;
    let content: String = row.get(3)?;
    let author_id: String = row.get(4)?;
    let metadata: String = row.get(5)?;
    let created_at: String = row.get(6)?;
    Ok((|| {
        let corrupt = |what: &str| StoreError::Invalid(format!("record {id}: stored {what} is corrupt (run `kura verify`)"));
        Ok(Record {
            record_id: parse_id(&id).map_err(|_| corrupt("id"))?,
            hash,
            record_type: rtype.parse().map_err(|_| corrupt("type"))?,
            content: serde_json::from_str(&content).map_err(|_| corrupt("content"))?,
            author_id,
            metadata: serde_json::from_str::<BTreeMap<String, String>>(&metadata)
                .map_err(|_| corrupt("metadata"))?,
            created_at,
        })
    })())
}

/// Writes a record inside the caller's transaction; if a record with the same content hash
/// exists, returns that one instead (`true` = deduplicated).
pub(crate) fn insert_record(conn: &Connection, new: &NewRecord) -> Result<(Record, bool)> {
    let parts = new.validate()?;
    if let Some(existing) = by_hash(conn, &parts.hash)? {
        return Ok((existing, true));
    }
    let record_id = proto::new_id();
    let created_at = time::now();
    conn.prepare_cached(
        "INSERT INTO records (record_id, hash, record_type, content, author_id, metadata, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        record_id.to_string(),
        parts.hash,
        new.record_type.as_str(),
        parts.content,
        new.author_id,
        parts.metadata,
        created_at,
    ])?;
    Ok((
        Record {
            record_id,
            hash: parts.hash,
            record_type: new.record_type,
            content: new.content.clone(),
            author_id: new.author_id.clone(),
            metadata: new.metadata.clone(),
            created_at,
        },
        false,
    ))
}

fn by_hash(conn: &Connection, hash: &str) -> Result<Option<Record>> {
    let sql = format!("SELECT {RECORD_COLUMNS} FROM records WHERE hash = ?1");
    conn.prepare_cached(&sql)?
        .query_row([hash], record_from_row)
        .optional()?
        .transpose()
}

impl Store {
    /// Stores a record on its own (not in any ledger). Writing content that is already
    /// stored returns the existing record, unchanged (`true` = deduplicated).
    pub fn write_record(&mut self, new: &NewRecord) -> Result<(Record, bool)> {
        self.write(|tx| insert_record(tx, new))
    }

    /// Reads one record.
    pub fn read_record(&self, id: Uuid) -> Result<Record> {
        let sql = format!("SELECT {RECORD_COLUMNS} FROM records WHERE record_id = ?1");
        self.conn
            .prepare_cached(&sql)?
            .query_row([id.to_string()], record_from_row)
            .optional()?
            .transpose()?
            .ok_or_else(|| StoreError::NotFound {
                kind: "record",
                id: id.to_string(),
            })
    }

    /// The record with this content hash, if any (dedup check).
    pub fn exists_by_hash(&self, hash: &str) -> Result<Option<Record>> {
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

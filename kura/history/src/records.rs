//! Records as the console's pages show them, read only as far as shown: a page of a ledger,
//! a diff, or one record a chunk at a time. A record can be megabytes (a model's output, a file a tool
//! read); reading whole records for a page of them would take `kura serve` past its unit's
//! memory limit, so SQLite cuts the content before it reaches this process.

use proto::{LedgerId, RecordId};
use std::collections::HashSet;

use kura_store::{Result, Store, StoreError};
use proto::Ledger;
use rusqlite::{OptionalExtension, named_params};

/// A record's content is read up to this many bytes for a page of records.
pub const SHOWN_BYTES: usize = 4 * 1024;
/// The whole record is read in chunks of this many bytes.
pub const CHUNK_BYTES: usize = 64 * 1024;
/// Records per section of a diff page.
pub const DIFF_PER_PAGE: usize = 50;

/// A record with at most a page's worth of its content.
pub struct RecordView {
    /// Its position in the ledger (0 for a record read alone).
    pub position: u64,
    /// The record's id.
    pub record_id: String,
    /// Its type (`tool.call`, …).
    pub record_type: String,
    /// Who filed it.
    pub author_id: String,
    /// When it was written.
    pub created_at: String,
    /// Its content hash (hex).
    pub hash: String,
    /// The start of the canonical content text (all of it when `bytes` ≤ the bytes read).
    pub content: String,
    /// The whole content's length in bytes.
    pub bytes: u64,
    /// On a `model.prompt` record: the SHA-256 of the request the model was sent.
    pub prompt: Option<String>,
}

impl RecordView {
    /// Whether `content` is all of it.
    pub fn complete(&self) -> bool {
        self.content.len() as u64 >= self.bytes
    }

    /// A record already in memory (memory search hits), cut like the others.
    pub fn of(r: &proto::Record, position: u64) -> RecordView {
        let text = serde_json::to_string(&r.content).unwrap_or_default();
        let (content, _) = utf8_prefix(
            text.as_bytes()
                .get(..SHOWN_BYTES)
                .unwrap_or(text.as_bytes()),
        );
        RecordView {
            position,
            record_id: r.record_id.to_string(),
            record_type: r.record_type.as_str().to_owned(),
            author_id: r.author_id.clone(),
            created_at: r.created_at.clone(),
            hash: r.hash.clone(),
            content,
            bytes: text.len() as u64,
            prompt: (r.record_type == proto::record::RecordType::ModelPrompt)
                .then(|| r.content["sha256"].as_str().map(str::to_owned))
                .flatten(),
        }
    }
}

/// The columns of a [`RecordView`]: `:len` bytes of content from byte `:start` (1-based),
/// cut by SQLite, and the content's whole length.
const VIEW: &str = "m.position, r.record_id, r.record_type, r.author_id, r.created_at,
    CASE typeof(r.hash) WHEN 'blob' THEN lower(hex(r.hash)) ELSE r.hash END,
    substr(CAST(r.content AS BLOB), :start, :len), length(CAST(r.content AS BLOB)),
    CASE WHEN r.record_type = 'model.prompt' AND json_valid(r.content)
        THEN json_extract(r.content, '$.sha256') END";

/// A row of [`VIEW`], with the content bytes as read (not yet text).
fn view_raw(row: &rusqlite::Row<'_>) -> rusqlite::Result<(RecordView, Vec<u8>)> {
    let v = RecordView {
        position: row.get::<_, i64>(0)?.try_into().unwrap_or_default(),
        record_id: row.get(1)?,
        record_type: row.get(2)?,
        author_id: row.get(3)?,
        created_at: row.get(4)?,
        hash: row.get(5)?,
        content: String::new(),
        bytes: row.get::<_, i64>(7)?.try_into().unwrap_or_default(),
        prompt: row.get::<_, Option<String>>(8).ok().flatten(),
    };
    Ok((v, row.get(6)?))
}

fn view(row: &rusqlite::Row<'_>) -> rusqlite::Result<RecordView> {
    let (mut v, bytes) = view_raw(row)?;
    v.content = utf8_prefix(&bytes).0;
    Ok(v)
}

/// A position or count from a URL as SQLite's integer (one past `i64::MAX` is refused).
fn big(n: u64) -> Result<i64> {
    i64::try_from(n).map_err(|_| StoreError::Invalid(format!("{n} is too large a position")))
}

/// The longest whole-character prefix of `bytes`, and its length.
fn utf8_prefix(bytes: &[u8]) -> (String, usize) {
    let valid = match std::str::from_utf8(bytes) {
        Ok(s) => s.len(),
        Err(e) => e.valid_up_to(),
    };
    let text = String::from_utf8_lossy(&bytes[..valid]).into_owned();
    (text, valid)
}

/// Up to `limit` records of a ledger from `from`, each cut at [`SHOWN_BYTES`].
pub fn ledger_page(
    store: &Store,
    ledger: LedgerId,
    from: u64,
    limit: usize,
) -> Result<Vec<RecordView>> {
    let sql = format!(
        "SELECT {VIEW} FROM ledger_records m JOIN records r ON r.record_id = m.record_id
          WHERE m.ledger_id = :ledger AND m.position >= :from ORDER BY m.position LIMIT :limit"
    );
    let mut stmt = store.conn().prepare_cached(&sql)?;
    let (from, limit) = (big(from)?, big(limit as u64)?);
    let rows = stmt.query_map(
        named_params! {":ledger": ledger.to_string(), ":from": from, ":limit": limit,
        ":start": 1, ":len": SHOWN_BYTES as i64},
        view,
    )?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// One piece of a record: the bytes from `from` (moved on to a character boundary), at most
/// [`CHUNK_BYTES`].
pub struct Chunk {
    /// The record, its content this chunk.
    pub record: RecordView,
    /// Where the text starts.
    pub from: u64,
}

/// A chunk of the record `id` from byte `from`.
pub fn record_chunk(store: &Store, id: RecordId, from: u64) -> Result<Chunk> {
    let sql =
        format!("SELECT {VIEW} FROM records r, (SELECT 0 AS position) m WHERE r.record_id = :id");
    let mut stmt = store.conn().prepare_cached(&sql)?;
    // Three bytes more: a chunk that starts inside a character skips to the next one.
    let params = named_params! {":id": id.to_string(), ":start": big(from)?.saturating_add(1),
    ":len": (CHUNK_BYTES + 3) as i64};
    let (mut r, bytes) = stmt
        .query_row(params, view_raw)
        .optional()?
        .ok_or_else(|| StoreError::NotFound {
            kind: "record",
            id: id.to_string(),
        })?;
    let skip = bytes
        .iter()
        .take(3)
        .take_while(|b| (0x80..0xc0).contains(*b))
        .count();
    let end = bytes.len().min(skip + CHUNK_BYTES);
    r.content = utf8_prefix(&bytes[skip..end]).0;
    Ok(Chunk {
        record: r,
        from: from + skip as u64,
    })
}

/// Two ledgers compared by record hash, one page of each section.
pub struct DiffView {
    /// The first ledger.
    pub a: Ledger,
    /// The second ledger.
    pub b: Ledger,
    /// Records only the first holds.
    pub only_a: Section,
    /// Records only the second holds.
    pub only_b: Section,
    /// Records both hold.
    pub both: Section,
    /// Which page of each section this is.
    pub page: usize,
}

/// A section of a diff: how many records it has in all, and this page's.
pub struct Section {
    /// Records in the section.
    pub total: usize,
    /// This page's records.
    pub records: Vec<RecordView>,
}

/// `kura diff` by hash (each hash once, in ledger order), reading only hashes for the whole
/// ledgers and contents for `page` of each section.
pub fn diff(store: &Store, a: LedgerId, b: LedgerId, page: usize) -> Result<DiffView> {
    let (la, lb) = (store.read_ledger(a)?, store.read_ledger(b)?);
    let (ha, hb) = (hashes(store, a)?, hashes(store, b)?);
    let set_a: HashSet<&[u8]> = ha.iter().map(|(_, h)| h.as_slice()).collect();
    let set_b: HashSet<&[u8]> = hb.iter().map(|(_, h)| h.as_slice()).collect();
    let firsts = |hs: &[(u64, Vec<u8>)], keep: &dyn Fn(&[u8]) -> bool| {
        let mut seen = HashSet::new();
        hs.iter()
            .filter(|(_, h)| keep(h) && seen.insert(h.clone()))
            .map(|(p, _)| *p)
            .collect::<Vec<_>>()
    };
    let only_a = firsts(&ha, &|h| !set_b.contains(h));
    let both = firsts(&ha, &|h| set_b.contains(h));
    let only_b = firsts(&hb, &|h| !set_a.contains(h));
    let section = |ledger: LedgerId, positions: &[u64]| -> Result<Section> {
        let shown = positions
            .iter()
            .skip(page * DIFF_PER_PAGE)
            .take(DIFF_PER_PAGE);
        let mut records = Vec::new();
        for p in shown {
            records.extend(ledger_page(store, ledger, *p, 1)?);
        }
        Ok(Section {
            total: positions.len(),
            records,
        })
    };
    Ok(DiffView {
        only_a: section(a, &only_a)?,
        only_b: section(b, &only_b)?,
        both: section(a, &both)?,
        a: la,
        b: lb,
        page,
    })
}

/// Every record's position and hash in a ledger (32 bytes each, never the content).
fn hashes(store: &Store, ledger: LedgerId) -> Result<Vec<(u64, Vec<u8>)>> {
    let mut stmt = store.conn().prepare_cached(
        "SELECT m.position, CAST(r.hash AS BLOB) FROM ledger_records m
           JOIN records r ON r.record_id = m.record_id
          WHERE m.ledger_id = ?1 ORDER BY m.position",
    )?;
    let rows = stmt.query_map([ledger.to_string()], |r| {
        Ok((
            r.get::<_, i64>(0)?.try_into().unwrap_or_default(),
            r.get(1)?,
        ))
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

//! The seal log kept in a Kura database's tables (`seal_log_leaves`, `seal_log_hashes`):
//! append inside the sealing transaction, size, roots, proofs and the log's own check.

use proto::{LedgerId, SessionId};
use rusqlite::{Connection, OptionalExtension, params};
use tlog_tiles::{Hash, HashReader};
use uuid::Uuid;

use super::leaf_data;
use crate::error::{Result, TlogError};

/// Reads stored hashes from the database.
struct Stored<'a>(&'a Connection);

fn missing(what: impl std::fmt::Display) -> tlog_tiles::Error {
    tlog_tiles::Error::InvalidInput(format!("stored hash {what}"))
}

impl HashReader for Stored<'_> {
    fn read_hashes(&self, indexes: &[u64]) -> std::result::Result<Vec<Hash>, tlog_tiles::Error> {
        let mut stmt = self
            .0
            .prepare_cached("SELECT hash FROM seal_log_hashes WHERE hash_index = ?1")
            .map_err(missing)?;
        indexes
            .iter()
            .map(|&i| {
                let at = i64::try_from(i).map_err(|_| missing(i))?;
                let bytes: Vec<u8> = stmt
                    .query_row([at], |r| r.get(0))
                    .map_err(|e| missing(format!("{i}: {e}")))?;
                let arr: [u8; 32] = bytes.try_into().map_err(|_| missing(i))?;
                Ok(Hash(arr))
            })
            .collect()
    }
}

/// Hashes computed in memory, for checking the stored ones.
struct InMemory<'a>(&'a [Hash]);

impl HashReader for InMemory<'_> {
    fn read_hashes(&self, indexes: &[u64]) -> std::result::Result<Vec<Hash>, tlog_tiles::Error> {
        indexes
            .iter()
            .map(|&i| {
                usize::try_from(i)
                    .ok()
                    .and_then(|i| self.0.get(i).copied())
                    .ok_or_else(|| missing(i))
            })
            .collect()
    }
}

fn corrupt(e: impl std::fmt::Display) -> TlogError {
    TlogError::Corrupt {
        what: "seal log",
        detail: e.to_string(),
    }
}

/// More leaves than any store will seal (2^40); an index beyond it is corruption.
const MAX_LEAVES: i64 = 1 << 40;

/// Leaves in the log.
pub fn size_in(conn: &Connection) -> Result<u64> {
    let max: Option<i64> = conn
        .prepare_cached("SELECT max(leaf_index) FROM seal_log_leaves")?
        .query_row([], |r| r.get(0))?;
    // A database someone crafted may claim any index; the tlog arithmetic must never see
    // one near the integer limits.
    match max {
        None => Ok(0),
        Some(m) if (0..MAX_LEAVES).contains(&m) => Ok(m as u64 + 1),
        Some(m) => Err(corrupt(format!("leaf index {m} is out of range"))),
    }
}

/// Appends a sealed ledger as the next leaf (inside the sealing transaction).
pub fn append_in(
    conn: &Connection,
    ledger_id: LedgerId,
    session_id: SessionId,
    ledger_hash: &str,
) -> Result<u64> {
    let n = size_in(conn)?;
    let data = leaf_data(ledger_id, session_id, ledger_hash);
    let hashes = tlog_tiles::stored_hashes(n, data.as_bytes(), &Stored(conn)).map_err(corrupt)?;
    conn.prepare_cached(
        "INSERT INTO seal_log_leaves (leaf_index, ledger_id, leaf_data) VALUES (?1, ?2, ?3)",
    )?
    .execute(params![n as i64, ledger_id.to_string(), data])?;
    let start = tlog_tiles::stored_hash_index(0, n);
    let mut stmt =
        conn.prepare_cached("INSERT INTO seal_log_hashes (hash_index, hash) VALUES (?1, ?2)")?;
    for (k, h) in hashes.iter().enumerate() {
        stmt.execute(params![(start + k as u64) as i64, &h.0[..]])?;
    }
    Ok(n)
}

/// Fills the log from the ledgers sealed before it existed, in seal order (migration 008).
pub fn backfill_in(conn: &Connection) -> Result<u64> {
    let mut stmt = conn.prepare(
        "SELECT ledger_id, session_id, ledger_hash FROM ledgers
          WHERE state = 'sealed' ORDER BY sealed_at, ledger_id",
    )?;
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<String>>(2)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut n = 0;
    for (ledger, session, hash) in rows {
        let (Ok(l), Ok(s), Some(h)) = (ledger.parse(), session.parse(), hash) else {
            return Err(corrupt(format!("ledger {ledger} cannot be logged")));
        };
        append_in(conn, l, s, &h)?;
        n += 1;
    }
    Ok(n)
}

/// The root hash of the first `size` leaves.
pub fn root_in(conn: &Connection, size: u64) -> Result<Hash> {
    let have = size_in(conn)?;
    if size > have {
        return Err(TlogError::Invalid(format!(
            "the seal log has {have} leaves, not {size}"
        )));
    }
    tlog_tiles::tree_hash(size, &Stored(conn)).map_err(corrupt)
}

/// An RFC 6962 consistency proof from the tree of `old` leaves to the tree of `new`.
pub fn consistency_proof_in(conn: &Connection, old: u64, new: u64) -> Result<Vec<Hash>> {
    let have = size_in(conn)?;
    if old > new || new > have {
        return Err(TlogError::Invalid(format!(
            "no proof from {old} to {new} leaves: the seal log has {have}"
        )));
    }
    if old == 0 || old == new {
        return Ok(Vec::new());
    }
    tlog_tiles::prove_tree(new, old, &Stored(conn)).map_err(corrupt)
}

/// An RFC 6962 inclusion proof of leaf `index` in the tree of `size` leaves.
pub fn inclusion_proof_in(conn: &Connection, index: u64, size: u64) -> Result<Vec<Hash>> {
    let have = size_in(conn)?;
    if index >= size || size > have {
        return Err(TlogError::Invalid(format!(
            "leaf {index} is not in a tree of {size} (the seal log has {have})"
        )));
    }
    tlog_tiles::prove_record(size, index, &Stored(conn)).map_err(corrupt)
}

/// The leaf of a sealed ledger: (index, leaf data).
pub fn leaf_of_in(conn: &Connection, ledger_id: LedgerId) -> Result<Option<(u64, String)>> {
    Ok(conn
        .query_row(
            "SELECT leaf_index, leaf_data FROM seal_log_leaves WHERE ledger_id = ?1",
            [ledger_id.to_string()],
            |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)),
        )
        .optional()?
        .map(|(i, d)| (u64::try_from(i).unwrap_or(0), d)))
}

/// What is wrong with the log itself: leaves that do not name their sealed ledger as it is
/// now, sealed ledgers it lacks, and stored hashes that are not what the leaves make.
/// Returns (leaf index or ledger id, check, detail) for each, the first few of a kind.
pub fn check_in(conn: &Connection) -> Result<Vec<(String, &'static str, String)>> {
    let mut problems = Vec::new();
    let computed = check_leaves(conn, &mut problems)?;
    check_all_logged(conn, &mut problems)?;
    check_stored_hashes(conn, &computed, &mut problems)?;
    Ok(problems)
}

/// A problem found by [`check_in`]: (leaf index or ledger id, check, detail).
type Problems = Vec<(String, &'static str, String)>;

/// Checks each leaf names its sealed ledger as it is now, in index order without gaps;
/// returns the stored hashes the leaves make.
fn check_leaves(conn: &Connection, problems: &mut Problems) -> Result<Vec<Hash>> {
    let mut stmt = conn.prepare(
        "SELECT s.leaf_index, s.ledger_id, s.leaf_data, l.session_id, l.ledger_hash, l.state
           FROM seal_log_leaves s LEFT JOIN ledgers l ON l.ledger_id = s.ledger_id
          ORDER BY s.leaf_index",
    )?;
    type Row = (
        i64,
        String,
        String,
        Option<String>,
        Option<String>,
        Option<String>,
    );
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
        ))
    })?;
    let mut computed: Vec<Hash> = Vec::new();
    for (expected, row) in (0i64..).zip(rows) {
        let (index, ledger, data, session, hash, state): Row = row?;
        if index != expected {
            problems.push((
                index.to_string(),
                "seal_log_gap",
                format!("leaf {index} follows leaf {}", expected - 1),
            ));
            break;
        }
        let now = match (
            // Parsed as leniently as ever (any form `Uuid` reads), then typed.
            ledger.parse::<Uuid>().map(LedgerId::from),
            session
                .as_deref()
                .map(|s| s.parse::<Uuid>().map(SessionId::from)),
            hash,
            state.as_deref(),
        ) {
            (Ok(l), Some(Ok(s)), Some(h), Some("sealed")) => Some(leaf_data(l, s, &h)),
            _ => None,
        };
        if now.as_deref() != Some(data.as_str()) && problems.len() < 20 {
            problems.push((
                ledger.clone(),
                "seal_log_leaf",
                format!(
                    "leaf {index} records {data}, but the ledger is now {}",
                    now.unwrap_or_else(|| "missing or not sealed".into())
                ),
            ));
        }
        let leaf_n = u64::try_from(index).unwrap_or(0);
        let hs = tlog_tiles::stored_hashes(leaf_n, data.as_bytes(), &InMemory(&computed))
            .map_err(corrupt)?;
        computed.extend(hs);
    }
    Ok(computed)
}

/// Every sealed ledger is a leaf.
fn check_all_logged(conn: &Connection, problems: &mut Problems) -> Result<()> {
    // Every sealed ledger is a leaf.
    let missing: Vec<String> = conn
        .prepare(
            "SELECT l.ledger_id FROM ledgers l LEFT JOIN seal_log_leaves s ON s.ledger_id = l.ledger_id
              WHERE l.state = 'sealed' AND s.ledger_id IS NULL LIMIT 20",
        )?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for id in missing {
        problems.push((
            id,
            "seal_log_missing",
            "a sealed ledger that is not in the seal log".into(),
        ));
    }
    Ok(())
}

/// The stored hashes are exactly what the leaves make.
fn check_stored_hashes(
    conn: &Connection,
    computed: &[Hash],
    problems: &mut Problems,
) -> Result<()> {
    // The stored hashes are exactly what the leaves make.
    let stored: i64 = conn
        .prepare_cached("SELECT count(*) FROM seal_log_hashes")?
        .query_row([], |r| r.get(0))?;
    if usize::try_from(stored).ok() != Some(computed.len()) {
        problems.push((
            "seal_log".into(),
            "seal_log_hashes",
            format!("{stored} stored hashes; the leaves make {}", computed.len()),
        ));
    } else {
        let mut stmt =
            conn.prepare("SELECT hash_index, hash FROM seal_log_hashes ORDER BY hash_index")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?)))?;
        for (k, row) in rows.enumerate() {
            let (i, h) = row?;
            if i != k as i64 || computed.get(k).map(|c| &c.0[..]) != Some(&h[..]) {
                problems.push((
                    "seal_log".into(),
                    "seal_log_hashes",
                    format!("stored hash {i} is not what the leaves make"),
                ));
                break;
            }
        }
    }
    Ok(())
}

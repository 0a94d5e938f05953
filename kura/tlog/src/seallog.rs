//! The seal log: every sealed ledger, in seal order, as a leaf of one RFC 6962 log per
//! store, kept the way Go's tlog and C2SP tlog-tiles keep one (the hash of every complete
//! subtree by stored-hash index; the math is `tlog_tiles`'), so an append writes about two
//! hashes however long the log is and a proof reads about log2(n) of them.
//!
//! A leaf's data is the RFC 8785 JSON `{"ledger_hash","ledger_id","session_id"}` of a
//! sealed ledger. Session heads are sealed ledgers, so every head a ref log ever named is a
//! leaf; a rewind (the head moved back to an older ledger) adds no leaf — it names one the
//! log already holds, and the ref log's own chain records the move.
//!
//! The rows live behind [`LogStorage`] (the store's tables `seal_log_leaves` and
//! `seal_log_hashes`); appending, roots, proofs and the log's own check are computed here.

use proto::{LedgerId, SessionId};
use tlog_tiles::{Hash, HashReader};
use uuid::Uuid;

use crate::error::{Result, TlogError};
use crate::storage::{LeafNow, LogStorage};

/// The leaf data of a sealed ledger.
pub fn leaf_data(ledger_id: LedgerId, session_id: SessionId, ledger_hash: &str) -> String {
    /// The leaf's fields (RFC 8785 sorts them; the hash is over that form).
    #[derive(serde::Serialize)]
    struct Leaf<'a> {
        ledger_hash: &'a str,
        ledger_id: LedgerId,
        session_id: SessionId,
    }
    let leaf = Leaf {
        ledger_hash,
        ledger_id,
        session_id,
    };
    // Three strings always canonicalise; the fallback is never reached.
    proto::canonical::canonical_json(&leaf).unwrap_or_default()
}

/// Reads stored hashes through the storage.
struct Stored<'a>(&'a dyn LogStorage);

fn missing(what: impl std::fmt::Display) -> tlog_tiles::Error {
    tlog_tiles::Error::InvalidInput(format!("stored hash {what}"))
}

impl HashReader for Stored<'_> {
    fn read_hashes(&self, indexes: &[u64]) -> std::result::Result<Vec<Hash>, tlog_tiles::Error> {
        indexes
            .iter()
            .map(|&i| {
                let bytes = self
                    .0
                    .stored_hash(i)
                    .map_err(|e| missing(format!("{i}: {e}")))?
                    .ok_or_else(|| missing(format!("{i}: not stored")))?;
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
pub fn size(log: &dyn LogStorage) -> Result<u64> {
    // A database someone crafted may claim any index; the tlog arithmetic must never see
    // one near the integer limits.
    match log.last_leaf_index()? {
        None => Ok(0),
        Some(m) if (0..MAX_LEAVES).contains(&m) => Ok(m as u64 + 1),
        Some(m) => Err(corrupt(format!("leaf index {m} is out of range"))),
    }
}

/// Appends a sealed ledger as the next leaf (the store calls it inside the sealing
/// transaction): the leaf's data and the stored hashes it completes. Returns its index.
pub fn append(
    log: &dyn LogStorage,
    ledger_id: LedgerId,
    session_id: SessionId,
    ledger_hash: &str,
) -> Result<u64> {
    let n = size(log)?;
    let data = leaf_data(ledger_id, session_id, ledger_hash);
    let hashes = tlog_tiles::stored_hashes(n, data.as_bytes(), &Stored(log)).map_err(corrupt)?;
    let start = tlog_tiles::stored_hash_index(0, n);
    log.put_leaf(n, ledger_id, &data, start, &hashes)?;
    Ok(n)
}

/// Fills the log from the ledgers sealed before it existed, in seal order (migration 008).
pub fn backfill(log: &dyn LogStorage) -> Result<u64> {
    let mut n = 0;
    for (ledger, session, hash) in log.sealed_ledgers()? {
        let (Ok(l), Ok(s), Some(h)) = (ledger.parse(), session.parse(), hash) else {
            return Err(corrupt(format!("ledger {ledger} cannot be logged")));
        };
        append(log, l, s, &h)?;
        n += 1;
    }
    Ok(n)
}

/// The root hash of the first `size` leaves.
pub fn root(log: &dyn LogStorage, size: u64) -> Result<Hash> {
    let have = self::size(log)?;
    if size > have {
        return Err(TlogError::Invalid(format!(
            "the seal log has {have} leaves, not {size}"
        )));
    }
    tlog_tiles::tree_hash(size, &Stored(log)).map_err(corrupt)
}

/// An RFC 6962 consistency proof from the tree of `old` leaves to the tree of `new`.
pub fn consistency_proof(log: &dyn LogStorage, old: u64, new: u64) -> Result<Vec<Hash>> {
    let have = size(log)?;
    if old > new || new > have {
        return Err(TlogError::Invalid(format!(
            "no proof from {old} to {new} leaves: the seal log has {have}"
        )));
    }
    if old == 0 || old == new {
        return Ok(Vec::new());
    }
    tlog_tiles::prove_tree(new, old, &Stored(log)).map_err(corrupt)
}

/// An RFC 6962 inclusion proof of leaf `index` in the tree of `size` leaves.
pub fn inclusion_proof(log: &dyn LogStorage, index: u64, size: u64) -> Result<Vec<Hash>> {
    let have = self::size(log)?;
    if index >= size || size > have {
        return Err(TlogError::Invalid(format!(
            "leaf {index} is not in a tree of {size} (the seal log has {have})"
        )));
    }
    tlog_tiles::prove_record(size, index, &Stored(log)).map_err(corrupt)
}

/// A problem found by [`check`]: (leaf index or ledger id, check, detail).
pub type Problems = Vec<(String, &'static str, String)>;

/// What is wrong with the log itself: leaves that do not name their sealed ledger as it is
/// now, sealed ledgers it lacks, and stored hashes that are not what the leaves make.
/// Returns (leaf index or ledger id, check, detail) for each, the first few of a kind.
pub fn check(log: &dyn LogStorage) -> Result<Problems> {
    let mut problems = Vec::new();
    let computed = check_leaves(log, &mut problems)?;
    for id in log.unlogged(20)? {
        problems.push((
            id,
            "seal_log_missing",
            "a sealed ledger that is not in the seal log".into(),
        ));
    }
    check_stored_hashes(log, &computed, &mut problems)?;
    Ok(problems)
}

/// Checks each leaf names its sealed ledger as it is now, in index order without gaps;
/// returns the stored hashes the leaves make.
fn check_leaves(log: &dyn LogStorage, problems: &mut Problems) -> Result<Vec<Hash>> {
    let mut computed: Vec<Hash> = Vec::new();
    let mut expected = 0i64;
    log.scan_leaves_now(&mut |leaf| {
        let LeafNow {
            index,
            ledger_id: ledger,
            data,
            session_id: session,
            ledger_hash: hash,
            state,
        } = leaf;
        if index != expected {
            problems.push((
                index.to_string(),
                "seal_log_gap",
                format!("leaf {index} follows leaf {}", expected - 1),
            ));
            return Ok(false);
        }
        expected += 1;
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
        Ok(true)
    })?;
    Ok(computed)
}

/// The stored hashes are exactly what the leaves make.
fn check_stored_hashes(
    log: &dyn LogStorage,
    computed: &[Hash],
    problems: &mut Problems,
) -> Result<()> {
    let stored = log.hash_count()?;
    if usize::try_from(stored).ok() != Some(computed.len()) {
        problems.push((
            "seal_log".into(),
            "seal_log_hashes",
            format!("{stored} stored hashes; the leaves make {}", computed.len()),
        ));
        return Ok(());
    }
    let mut k = 0usize;
    log.scan_hashes(&mut |i, h| {
        if i != k as i64 || computed.get(k).map(|c| &c.0[..]) != Some(&h[..]) {
            problems.push((
                "seal_log".into(),
                "seal_log_hashes",
                format!("stored hash {i} is not what the leaves make"),
            ));
            return Ok(false);
        }
        k += 1;
        Ok(true)
    })
}

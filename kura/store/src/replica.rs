//! Another Pi's sealed history in this database: the rows a replication message names,
//! written only after every hash it carries is recomputed here (record hashes, leaves, the
//! ledger's root and hash against its parents as stored here, its sealer's signature, its
//! place in the seal log), and the publisher's outbox cursor on the origin side.
//!
//! The caller (`kura-fleet`) runs [`Tx::import_ledger_with`] for each ledger of a batch and then
//! checks the seal log's root against the origin's signed checkpoint inside the same
//! transaction; any refusal rolls the whole batch back, so nothing of it is ever committed.

use std::collections::HashMap;

use proto::fleet::{ReplLedger, ReplSeal};
use proto::merkle;
use proto::proof::RedactedLeaf;
use proto::record::OwnedColumns;
use rusqlite::{OptionalExtension, params};

use crate::Cached;
use crate::error::{Result, StoreError};
use crate::store::hashcol;
use crate::store::ledgers::{header, parent_refs, read_ledger_in};
use crate::store::records::{RECORD_COLUMNS, columns_from_row};
use crate::store::sessions::move_head;
use crate::tx::{Db, Tx, conn};

/// A replicated ledger refused: what does not hold, naming the ledger.
fn refused(l: &ReplLedger, detail: String) -> StoreError {
    StoreError::Corrupt {
        what: "replicated ledger",
        id: l.ledger_id.to_string(),
        detail,
    }
}

/// The stored columns of the record with content hash `hash`, if any.
fn record_by_hash(c: &rusqlite::Connection, hash: &str) -> Result<Option<OwnedColumns>> {
    let Some(key) = hashcol::to_column(hash) else {
        return Ok(None);
    };
    let sql = format!("SELECT {RECORD_COLUMNS} FROM records WHERE hash = ?1");
    Ok(c.prepare_cached(&sql)?
        .query_row([&key[..]], columns_from_row)
        .optional()?)
}

/// Why a replicated seal does not verify.
#[derive(Debug, thiserror::Error)]
enum BadSeal {
    #[error("the sealer is not a public key: {0}")]
    Key(nkeys::error::Error),
    #[error("the signature is not base64: {0}")]
    Encoding(base64::DecodeError),
    #[error("{0}")]
    Signature(nkeys::error::Error),
}

/// Whether `seal` is a valid signature over `ledger_hash` (whose key made it is the caller's
/// to judge).
pub fn seal_verifies(seal: &ReplSeal, ledger_hash: &str) -> bool {
    check_seal(seal, ledger_hash).is_ok()
}

/// Checks a sealer's signature over `ledger_hash`.
fn check_seal(seal: &ReplSeal, ledger_hash: &str) -> std::result::Result<(), BadSeal> {
    use base64::Engine;
    let key = nkeys::KeyPair::from_public_key(&seal.sealer).map_err(BadSeal::Key)?;
    let sig = base64::engine::general_purpose::STANDARD
        .decode(&seal.signature)
        .map_err(BadSeal::Encoding)?;
    key.verify(&kura_tlog::sealer::signing_bytes(ledger_hash), &sig)
        .map_err(BadSeal::Signature)
}

impl Tx<'_> {
    /// Writes a replicated sealed ledger with its new records (`records`, by content hash),
    /// refusing — as `Corrupt`, and before its ledger row is sealed — anything whose hash
    /// does not recompute: a record's hash, the root over the members' leaves, the ledger
    /// hash over the header and the parents as stored here, the seal signature, or a
    /// seal-log place other than the next one.
    #[cfg(test)]
    pub(crate) fn import_ledger(
        &self,
        l: &ReplLedger,
        records: &HashMap<String, OwnedColumns>,
    ) -> Result<()> {
        self.import_ledger_with(l, records, &HashMap::new(), &[])
    }

    /// Writes a replicated sealed ledger, as `import_ledger` does in tests, and also takes
    /// records the origin redacted (`redacted`, by content hash: the tombstone is accepted with the kept leaf when the redaction is
    /// signed by one of `people` and names that record; the root check then holds the kept
    /// leaf to what the origin sealed), and applies each `sys.redaction` it imports to the
    /// record it names, as the origin did.
    pub fn import_ledger_with(
        &self,
        l: &ReplLedger,
        records: &HashMap<String, OwnedColumns>,
        redacted: &HashMap<String, RedactedLeaf>,
        people: &[kura_policy::writ::Issuer],
    ) -> Result<()> {
        let c = conn(self);
        let log = crate::SealLog(c);
        let size = kura_tlog::seallog::size(&log)?;
        if l.index != size {
            return Err(refused(
                l,
                format!("it is leaf {} but the replica's log has {size}", l.index),
            ));
        }
        if let Some(seal) = &l.seal {
            check_seal(seal, &l.ledger_hash)
                .map_err(|e| refused(l, format!("its seal signature does not verify: {e}")))?;
        }
        // A ledger id the replica already holds at another leaf (a copy someone placed
        // again): refused like any ledger that does not fit, never a store error to retry.
        let held: bool = c
            .prepare_cached("SELECT 1 FROM ledgers WHERE ledger_id = ?1")?
            .exists([l.ledger_id.to_string()])?;
        if held {
            return Err(refused(
                l,
                "the replica already holds a ledger with its id".into(),
            ));
        }
        let session_exists: bool = c
            .prepare_cached("SELECT 1 FROM sessions WHERE session_id = ?1")?
            .exists([l.session_id.to_string()])?;
        if !session_exists {
            crate::store::labels::check_label(&l.session_label)?;
            c.prepare_cached(
                "INSERT INTO sessions (session_id, label, status, created_at) VALUES (?1, ?2, 'active', ?3)",
            )?
            .execute(params![l.session_id.to_string(), l.session_label, l.created_at])?;
        }
        let parents = parent_refs(c, &l.parent_ids)
            .map_err(|e| refused(l, format!("a parent is not in the replica: {e}")))?;
        let parent_ids: Vec<String> = l.parent_ids.iter().map(ToString::to_string).collect();
        c.prepare_cached(
            "INSERT INTO ledgers (ledger_id, session_id, label, parent_ids, state, created_at)
             VALUES (?1, ?2, ?3, ?4, 'open', ?5)",
        )?
        .execute(params![
            l.ledger_id.to_string(),
            l.session_id.to_string(),
            l.label,
            serde_json::to_string(&parent_ids).map_err(|e| StoreError::Invalid(e.to_string()))?,
            l.created_at,
        ])?;
        let mut leaves = Vec::with_capacity(l.members.len());
        let mut applied = Vec::new();
        for (position, hash) in l.members.iter().enumerate() {
            let columns = match record_by_hash(c, hash)? {
                Some(stored) => stored,
                None => {
                    let new = records
                        .get(hash)
                        .ok_or_else(|| refused(l, format!("record {hash} was never sent")))?;
                    match redacted.get(hash) {
                        Some(r) => insert_redacted(c, l, hash, new, r, people)?,
                        None => insert_checked(c, l, hash, new)?,
                    }
                    if new.record_type == "sys.redaction" {
                        applied.push(new.clone());
                    }
                    new.clone()
                }
            };
            let leaf = match crate::redact::kept_leaf(c, &columns.record_id)? {
                Some(kept) => merkle::decode_hash(&kept).ok_or_else(|| {
                    refused(l, format!("record {hash} has a kept leaf that is not hex"))
                })?,
                None => columns.as_columns().leaf_hash(),
            };
            c.prepare_cached(
                "INSERT INTO ledger_records (ledger_id, position, record_id, leaf_hash) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![
                l.ledger_id.to_string(),
                position as i64,
                columns.record_id,
                proto::canonical::to_hex(&leaf)
            ])?;
            c.prepare_cached("UPDATE ledgers SET record_count = ?2 WHERE ledger_id = ?1")?
                .execute(params![l.ledger_id.to_string(), position as i64 + 1])?;
            leaves.push(leaf);
        }
        let root = proto::canonical::to_hex(&merkle::root(&leaves));
        if root != l.root_hash {
            return Err(refused(
                l,
                format!("its root recomputes to {root}, not {}", l.root_hash),
            ));
        }
        let ledger = read_ledger_in(c, l.ledger_id)?;
        let hash = header(&ledger, parents, &l.sealed_at).ledger_hash(ledger.record_count, &root);
        if hash != l.ledger_hash {
            return Err(refused(
                l,
                format!(
                    "its ledger hash recomputes to {hash}, not {}",
                    l.ledger_hash
                ),
            ));
        }
        c.prepare_cached(
            "UPDATE ledgers SET state = 'sealed', root_hash = ?2, ledger_hash = ?3, sealed_at = ?4
              WHERE ledger_id = ?1",
        )?
        .execute(params![l.ledger_id.to_string(), root, hash, l.sealed_at])?;
        move_head(c, l.session_id, l.ledger_id, &hash, "replicated")?;
        kura_tlog::seallog::append(&log, l.ledger_id, l.session_id, &hash)?;
        if let Some(seal) = &l.seal {
            kura_tlog::storage::LogStorage::put_seal(
                &log,
                &l.ledger_id.to_string(),
                &seal.sealer,
                &seal.signature,
            )?;
        }
        for r in applied {
            apply_redaction(c, &r, people)?;
        }
        Ok(())
    }

    /// The root of the first `size` leaves of this database's seal log.
    pub fn seal_log_root(&self, size: u64) -> Result<[u8; 32]> {
        Ok(kura_tlog::seallog::root(&crate::SealLog(conn(self)), size)?.0)
    }

    /// Records where a replica of `origin` has verified up to, with the checkpoint.
    pub fn set_inbox(&self, origin: &str, stream_seq: u64, checkpoint: &str) -> Result<()> {
        conn(self).execute_cached(
            "INSERT INTO fleet_inbox (origin, stream_seq, checkpoint, verified_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (origin) DO UPDATE SET stream_seq = ?2, checkpoint = ?3, verified_at = ?4",
            params![origin, stream_seq as i64, checkpoint, crate::time::now()],
        )?;
        Ok(())
    }

    /// Moves this Pi's publisher cursor: `published` leaves acknowledged, the last ledger at
    /// `ledger_seq` in the stream.
    pub fn set_outbox(&self, pi: &str, published: u64, ledger_seq: u64) -> Result<()> {
        conn(self).execute_cached(
            "INSERT INTO fleet_outbox (pi, published, ledger_seq) VALUES (?1, ?2, ?3)
             ON CONFLICT (pi) DO UPDATE SET published = ?2, ledger_seq = ?3",
            params![pi, published as i64, ledger_seq as i64],
        )?;
        Ok(())
    }
}

/// Inserts a new record after checking its columns against the hash the ledger names.
fn insert_checked(
    c: &rusqlite::Connection,
    l: &ReplLedger,
    hash: &str,
    new: &OwnedColumns,
) -> Result<()> {
    let cols = new.as_columns();
    if new.hash != hash || !cols.hash_matches() {
        return Err(refused(
            l,
            format!("record {} does not hash to {hash}", new.record_id),
        ));
    }
    if proto::ids::parse_id(&new.record_id).is_none()
        || new
            .record_type
            .parse::<proto::record::RecordType>()
            .is_err()
    {
        return Err(refused(
            l,
            format!("record {} has a bad id or type", new.record_id),
        ));
    }
    let key = hashcol::to_column(hash)
        .ok_or_else(|| refused(l, format!("{hash:?} is not a SHA-256 hash")))?;
    insert_row(c, new, &key)?;
    // Memory is searchable on a replica as on its origin (`kura search --db replica`).
    if matches!(new.record_type.as_str(), "memory.fact" | "memory.decision")
        && let Ok(v) = serde_json::from_str::<serde_json::Value>(&new.content)
        && let Some(text) = v.get("text").and_then(serde_json::Value::as_str)
    {
        c.execute_cached(
            "INSERT INTO kb (text, record_id, record_type) VALUES (?1, ?2, ?3)",
            params![text, new.record_id, new.record_type],
        )?;
    }
    Ok(())
}

/// Writes a replicated record's row, its columns as received (`key`: its hash as stored).
fn insert_row(c: &rusqlite::Connection, new: &OwnedColumns, key: &[u8; 32]) -> Result<()> {
    c.prepare_cached(&format!(
        "INSERT INTO records ({RECORD_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
    ))?
    .execute(params![
        new.record_id,
        &key[..],
        new.record_type,
        new.content,
        new.author_id,
        new.metadata,
        new.created_at
    ])?;
    Ok(())
}

/// Inserts a record the origin redacted: its tombstone and its kept leaf, after checking the
/// redaction names it and is signed by one of `people` (the root check holds the leaf).
fn insert_redacted(
    c: &rusqlite::Connection,
    l: &ReplLedger,
    hash: &str,
    new: &OwnedColumns,
    r: &RedactedLeaf,
    people: &[kura_policy::writ::Issuer],
) -> Result<()> {
    let b = &r.redaction.body;
    let tombstone: Option<proto::writ::Tombstone> = serde_json::from_str(&new.content).ok();
    if new.hash != hash
        || b.record_id != new.record_id
        || b.record_hash != hash
        || tombstone.is_none()
    {
        return Err(refused(
            l,
            format!("record {hash} comes redacted, but not as its redaction says"),
        ));
    }
    kura_policy::writ::verify_redaction(&r.redaction, people).map_err(|e| {
        refused(
            l,
            format!("record {hash} comes redacted, and {e} ([writs] issuers in serve.toml)"),
        )
    })?;
    let key = hashcol::to_column(hash)
        .ok_or_else(|| refused(l, format!("{hash:?} is not a SHA-256 hash")))?;
    let redaction_record = tombstone.map(|t| t.redacted).unwrap_or_default();
    c.execute_cached(
        "INSERT INTO redactions (record_id, record_hash, leaf_hash, redaction_record_id)
         VALUES (?1, ?2, ?3, ?4)",
        params![new.record_id, hash, r.leaf_hash, redaction_record],
    )?;
    insert_row(c, new, &key)?;
    Ok(())
}

/// Applies a replicated `sys.redaction` record to the record it names, as its origin did:
/// when that record is here, not yet redacted, and the redaction is signed by one of
/// `people` (else the replica keeps the content and says so in the log).
fn apply_redaction(
    c: &rusqlite::Connection,
    record: &OwnedColumns,
    people: &[kura_policy::writ::Issuer],
) -> Result<()> {
    let Ok(r) = serde_json::from_str::<proto::writ::Redaction>(&record.content) else {
        return Ok(());
    };
    if let Err(e) = kura_policy::writ::verify_redaction(&r, people) {
        tracing::warn!(record = %r.body.record_id, error = %e, "a replicated redaction is not applied here: its signer is not one of [writs] issuers");
        return Ok(());
    }
    if crate::redact::kept_leaf(c, &r.body.record_id)?.is_some() {
        return Ok(());
    }
    let sql = format!("SELECT {RECORD_COLUMNS} FROM records WHERE record_id = ?1");
    let Some(target) = c
        .prepare_cached(&sql)?
        .query_row([&r.body.record_id], columns_from_row)
        .optional()?
    else {
        return Ok(());
    };
    if target.hash != r.body.record_hash || !target.as_columns().hash_matches() {
        return Ok(());
    }
    let leaf = proto::canonical::to_hex(&target.as_columns().leaf_hash());
    let tombstone = proto::canonical_json(&proto::writ::Tombstone {
        redacted: record.record_id.clone(),
    })
    .map_err(|e| StoreError::Invalid(e.to_string()))?;
    c.execute_cached(
        "INSERT INTO redactions (record_id, record_hash, leaf_hash, redaction_record_id)
         VALUES (?1, ?2, ?3, ?4)",
        params![target.record_id, target.hash, leaf, record.record_id],
    )?;
    c.execute_cached(
        "UPDATE records SET content = ?2 WHERE record_id = ?1",
        params![target.record_id, tombstone],
    )?;
    c.execute_cached("DELETE FROM kb WHERE record_id = ?1", [&target.record_id])?;
    c.execute_cached(
        "DELETE FROM kb_vectors WHERE record_id = ?1",
        [&target.record_id],
    )?;
    Ok(())
}

/// Where a replica has verified up to: (stream sequence, checkpoint, when), if anywhere.
pub fn inbox(db: &(impl Db + ?Sized), origin: &str) -> Result<Option<(u64, String, String)>> {
    let sql = "SELECT stream_seq, checkpoint, verified_at FROM fleet_inbox WHERE origin = ?1";
    let row = |r: &rusqlite::Row<'_>| Ok((r.get::<_, i64>(0)? as u64, r.get(1)?, r.get(2)?));
    Ok(conn(db).query_row_cached(sql, [origin], row).optional()?)
}

/// When this database's last ledger was sealed.
pub fn last_sealed_at(db: &(impl Db + ?Sized)) -> Result<Option<String>> {
    Ok(conn(db).query_row("SELECT max(sealed_at) FROM ledgers", [], |r| r.get(0))?)
}

/// The Pis whose history this database replicates (one, for a replica; none otherwise).
pub fn origins(db: &(impl Db + ?Sized)) -> Result<Vec<String>> {
    Ok(conn(db)
        .prepare_cached("SELECT origin FROM fleet_inbox ORDER BY origin")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?)
}

/// This Pi's publisher cursor: (leaves published, stream sequence of the last ledger).
pub fn outbox(db: &(impl Db + ?Sized), pi: &str) -> Result<(u64, u64)> {
    let sql = "SELECT published, ledger_seq FROM fleet_outbox WHERE pi = ?1";
    let row = |r: &rusqlite::Row<'_>| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64));
    Ok(conn(db)
        .query_row_cached(sql, [pi], row)
        .optional()?
        .unwrap_or((0, 0)))
}

/// What the publisher sends for seal-log leaf `index`: the ledger, and the records of it
/// that no earlier leaf's ledger held (each record is sent once).
pub fn outgoing(
    db: &(impl Db + ?Sized),
    index: u64,
) -> Result<Option<(ReplLedger, Vec<OwnedColumns>)>> {
    let c = conn(db);
    let Some(ledger_id) = c
        .prepare_cached("SELECT ledger_id FROM seal_log_leaves WHERE leaf_index = ?1")?
        .query_row([index as i64], |r| r.get::<_, String>(0))
        .optional()?
    else {
        return Ok(None);
    };
    let id = crate::store::parse_id(&ledger_id)?;
    let ledger = read_ledger_in(c, id)?;
    let session = crate::store::sessions::read_session_in(c, ledger.session_id)?;
    let members = crate::store::ledgers::member_rows(c, id)?;
    let mut fresh = Vec::new();
    let mut earlier = c.prepare_cached(
        "SELECT 1 FROM ledger_records lr JOIN seal_log_leaves s ON s.ledger_id = lr.ledger_id
          WHERE lr.record_id = ?1 AND s.leaf_index < ?2 LIMIT 1",
    )?;
    let mut hashes = Vec::with_capacity(members.len());
    for m in members {
        if !earlier.exists(params![m.columns.record_id, index as i64])?
            && !fresh
                .iter()
                .any(|f: &OwnedColumns| f.record_id == m.columns.record_id)
        {
            fresh.push(m.columns.clone());
        }
        hashes.push(m.columns.hash);
    }
    let seal = crate::SealLog(c);
    let seal = kura_tlog::storage::LogStorage::seal_of(&seal, &ledger_id)?;
    let (Some(root_hash), Some(ledger_hash), Some(sealed_at)) =
        (ledger.root_hash, ledger.ledger_hash, ledger.sealed_at)
    else {
        return Err(StoreError::Corrupt {
            what: "ledger",
            id: ledger_id,
            detail: "it is in the seal log but not sealed".into(),
        });
    };
    Ok(Some((
        ReplLedger {
            index,
            ledger_id: id,
            session_id: ledger.session_id,
            session_label: session.label,
            label: ledger.label,
            parent_ids: ledger.parent_ids,
            members: hashes,
            root_hash,
            ledger_hash,
            created_at: ledger.created_at,
            sealed_at,
            seal: seal.and_then(|s| {
                Some(ReplSeal {
                    sealer: s.sealer?,
                    signature: s.signature?,
                })
            }),
            checkpoint: None,
        },
        fresh,
    )))
}

/// Whether a record with content hash `hash` is stored.
pub fn has_record(db: &(impl Db + ?Sized), hash: &str) -> Result<bool> {
    let Some(key) = hashcol::to_column(hash) else {
        return Ok(false);
    };
    Ok(conn(db)
        .prepare_cached("SELECT 1 FROM records WHERE hash = ?1")?
        .exists([&key[..]])?)
}

/// The ledger hash this database's seal log holds at `index`, if it has that leaf.
pub fn logged_hash(db: &(impl Db + ?Sized), index: u64) -> Result<Option<String>> {
    Ok(conn(db)
        .prepare_cached(
            "SELECT l.ledger_hash FROM seal_log_leaves s JOIN ledgers l ON l.ledger_id = s.ledger_id
              WHERE s.leaf_index = ?1",
        )?
        .query_row([index as i64], |r| r.get::<_, Option<String>>(0))
        .optional()?
        .flatten())
}

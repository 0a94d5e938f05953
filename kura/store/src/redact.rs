//! Authority records and redaction: the authority session's sealed ledgers (one per grant,
//! revocation or redaction, each on the last), and erasing a record's content under a
//! person's signed `sys.redaction` — the row's content becomes a tombstone, its leaf is kept,
//! so every root and checkpoint still verifies and `verify` reports the record as redacted.

use std::collections::HashMap;

use kura_policy::writ::{Issuer, verify_redaction};
use kura_tlog::sealer::Sealer;
use proto::record::{NewRecord, OwnedColumns, RecordType};
use proto::writ::{Redaction, Tombstone};
use proto::{LedgerId, RecordId, SessionId};
use rusqlite::{OptionalExtension, params};

use crate::cached::Cached;
use crate::error::{Result, StoreError};
use crate::store::parse_id;
use crate::store::records::{RECORD_COLUMNS, columns_from_row};
use crate::{Db, Store, Tx};

impl Tx<'_> {
    /// Appends `record` as the only record of a new sealed ledger of the authority session
    /// (created on first use), whose parent is the previous one: grants, revocations and
    /// redactions form one chain of their own.
    pub fn append_authority(
        &self,
        record: &NewRecord,
        sealer: Option<&Sealer>,
    ) -> Result<RecordId> {
        let row: Option<(String, Option<String>)> = self
            .0
            .prepare_cached("SELECT session_id, head FROM authority WHERE id = 1")?
            .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let (session, head): (SessionId, Option<LedgerId>) = match row {
            Some((s, h)) => (parse_id(&s)?, h.as_deref().map(parse_id).transpose()?),
            None => {
                let s = self.create_session("authority")?.session_id;
                self.0.execute_cached(
                    "INSERT INTO authority (id, session_id) VALUES (1, ?1)",
                    [s.to_string()],
                )?;
                (s, None)
            }
        };
        let parents: Vec<LedgerId> = head.into_iter().collect();
        let ledger = self.open_ledger(session, record.record_type.as_str(), &parents)?;
        let appended = self.append(ledger.ledger_id, record)?;
        self.seal(ledger.ledger_id, sealer)?;
        self.0.execute_cached(
            "UPDATE authority SET head = ?1 WHERE id = 1",
            [ledger.ledger_id.to_string()],
        )?;
        Ok(appended.record.record_id)
    }
}

/// A redaction as stored: the record's leaf and the `sys.redaction` record that erased it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redacted {
    /// What the content hashed to.
    pub record_hash: String,
    /// The record's leaf (hex), kept for the roots.
    pub leaf_hash: String,
    /// The signed redaction.
    pub redaction: Redaction,
    /// Its `sys.redaction` record.
    pub redaction_record: String,
}

/// Every redaction whose `sys.redaction` record is present and reads as one, by record id.
/// Whether its signature is a trusted person's is for the caller (`verify` checks it).
pub fn redactions(db: &impl Db) -> Result<HashMap<String, Redacted>> {
    let conn = crate::tx::conn(db);
    let mut stmt = conn.prepare_cached(
        "SELECT d.record_id, d.record_hash, d.leaf_hash, d.redaction_record_id, r.content
           FROM redactions d LEFT JOIN records r ON r.record_id = d.redaction_record_id",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, Option<String>>(4)?,
        ))
    })?;
    let mut out = HashMap::new();
    for row in rows {
        let (id, record_hash, leaf_hash, redaction_record, content) = row?;
        let Some(redaction) = content.and_then(|c| serde_json::from_str::<Redaction>(&c).ok())
        else {
            continue;
        };
        out.insert(
            id,
            Redacted {
                record_hash,
                leaf_hash,
                redaction,
                redaction_record,
            },
        );
    }
    Ok(out)
}

/// The leaf kept for `record_id` when it was redacted: a redacted record's leaf everywhere
/// (a new ledger it joins, a seal, a proof), since its content is a tombstone.
pub(crate) fn kept_leaf(conn: &rusqlite::Connection, record_id: &str) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT leaf_hash FROM redactions WHERE record_id = ?1")?
        .query_row([record_id], |r| r.get(0))
        .optional()?)
}

fn invalid(why: String) -> StoreError {
    StoreError::Invalid(why)
}

/// Every ledger holding record `id` is sealed and sealed it as it is now (leaf `leaf`): a
/// redaction never erases a record of an open turn, nor hides tampering.
fn sealed_as_stored(conn: &rusqlite::Connection, id: RecordId, leaf: &str) -> Result<()> {
    let members: Vec<(String, String, String)> = conn
        .prepare_cached(
            "SELECT m.ledger_id, m.leaf_hash, l.state FROM ledger_records m
               JOIN ledgers l ON l.ledger_id = m.ledger_id WHERE m.record_id = ?1",
        )?
        .query_map([id.to_string()], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (ledger, stored, state) in &members {
        if state != "sealed" {
            return Err(invalid(format!(
                "record {id} is in ledger {ledger}, still open: redact it once its turn has ended"
            )));
        }
        if !stored.eq_ignore_ascii_case(leaf) {
            return Err(invalid(format!(
                "record {id} differs from what ledger {ledger} sealed: a redaction cannot \
                 hide tampering; run `kura verify --all`"
            )));
        }
    }
    Ok(())
}

impl Store {
    /// Erases a record's content under `r`, signed by one of `people`: appends the
    /// `sys.redaction` record (by `author`) to the authority chain, replaces the content with
    /// a tombstone, keeps the leaf, drops the record from the search index — one transaction
    /// with `secure_delete` on, then a truncating WAL checkpoint, so neither the database
    /// file nor its WAL keeps the bytes. Refused: an untrusted or forged signature, a record
    /// whose hash or leaf does not verify (a redaction cannot hide tampering), one in a ledger
    /// still open, one already redacted.
    pub fn redact(&mut self, r: &Redaction, people: &[Issuer], author: &str) -> Result<RecordId> {
        verify_redaction(r, people).map_err(|e| invalid(e.to_string()))?;
        let id: RecordId = parse_id(&r.body.record_id)?;
        self.conn().pragma_update(None, "secure_delete", "ON")?;
        let sealer = self.sealer().cloned();
        let done =
            self.write(|tx| {
                let conn = tx.0;
                let sql = format!("SELECT {RECORD_COLUMNS} FROM records WHERE record_id = ?1");
                let cols: Option<OwnedColumns> = conn
                    .prepare_cached(&sql)?
                    .query_row([id.to_string()], columns_from_row)
                    .optional()?;
                let cols = cols.ok_or(StoreError::NotFound {
                    kind: "record",
                    id: id.to_string(),
                })?;
                if redactions(tx)?.contains_key(&cols.record_id) {
                    return Err(invalid(format!("record {id} is already redacted")));
                }
                // Authority statements stay: erasing a grant, a revocation or a redaction would
                // take away what makes the rest verifiable.
                if matches!(
                    cols.record_type.as_str(),
                    "authority.writ" | "authority.revocation" | "sys.redaction"
                ) {
                    return Err(invalid(format!(
                        "record {id} is a {}: authority statements are not redacted",
                        cols.record_type
                    )));
                }
                if cols.hash != r.body.record_hash {
                    return Err(invalid(format!(
                        "the redaction names hash {}, but record {id} hashes to {}",
                        r.body.record_hash, cols.hash
                    )));
                }
                let c = cols.as_columns();
                if !c.hash_matches() {
                    return Err(invalid(format!(
                        "record {id} does not verify (its content was altered): a redaction cannot \
                     hide tampering; run `kura verify --all`"
                    )));
                }
                let leaf = hex::encode(c.leaf_hash());
                sealed_as_stored(conn, id, &leaf)?;
                let record = NewRecord {
                    record_type: RecordType::SysRedaction,
                    content: serde_json::to_value(r).map_err(|e| invalid(e.to_string()))?,
                    author_id: author.to_owned(),
                    metadata: Default::default(),
                };
                let redaction_record = tx.append_authority(&record, sealer.as_ref())?;
                let tombstone = proto::canonical_json(&Tombstone {
                    redacted: redaction_record.to_string(),
                })
                .map_err(|e| invalid(e.to_string()))?;
                // The row first: the immutability trigger lets only a redacted record's content
                // become its tombstone.
                conn.execute_cached(
                "INSERT INTO redactions (record_id, record_hash, leaf_hash, redaction_record_id)
                 VALUES (?1, ?2, ?3, ?4)",
                params![id.to_string(), cols.hash, leaf, redaction_record.to_string()],
            )?;
                conn.execute_cached(
                    "UPDATE records SET content = ?2 WHERE record_id = ?1",
                    params![id.to_string(), tombstone],
                )?;
                // FTS5 keeps deleted tokens in its index until merged, unless told otherwise.
                let _ = conn.execute("INSERT INTO kb(kb, rank) VALUES('secure-delete', 1)", []);
                conn.execute_cached("DELETE FROM kb WHERE record_id = ?1", [id.to_string()])?;
                conn.execute_cached(
                    "DELETE FROM kb_vectors WHERE record_id = ?1",
                    [id.to_string()],
                )?;
                Ok(redaction_record)
            });
        let done = done?;
        // The freed pages are zeroed by secure_delete; the WAL's frames that held the old
        // page are gone once it is checkpointed and truncated — which a reader's snapshot can
        // hold up: tried for a few seconds, then said.
        for attempt in 0..50 {
            let busy: i64 = self
                .conn()
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))?;
            if busy == 0 {
                return Ok(done);
            }
            if attempt < 49 {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
        Err(invalid(format!(
            "record {id} is redacted, but a reader kept the WAL from being truncated: its old \
             bytes may remain there until the next checkpoint (`kura serve` makes one)"
        )))
    }
}

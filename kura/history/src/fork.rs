//! Forks: a new session grown from a sealed ledger of this store (sharing its history,
//! copying nothing), or continued from another Pi's verified replica (its records copied,
//! linked to the origin by hash) — each first ledger one `session.fork` record, sealed at once.

use kura_store::store::{Session, parse_id};
use kura_store::{Db, Result, Store, StoreError};
use proto::content::SessionForkContent;
use proto::ledger::{Ledger, LedgerState};
use proto::record::{NewRecord, RecordType};
use proto::{LedgerId, SessionId};

/// The author of fork records.
pub const AUTHOR: &str = "sys:kura";

/// Creates a session forked from the sealed ledger `origin` (of any session): its first
/// ledger, `fork`, has `origin` as its parent and holds one `session.fork` record naming the
/// origin; it is sealed at once (by the store's sealer), so it is the new session's head.
pub fn fork(store: &mut Store, origin: LedgerId, label: &str) -> Result<(Session, Ledger)> {
    let o = store.read_ledger(origin)?;
    let Some(origin_hash) = o
        .ledger_hash
        .clone()
        .filter(|_| o.state == LedgerState::Sealed)
    else {
        return Err(StoreError::Invalid(format!(
            "ledger {origin} is not sealed; only sealed history can be forked"
        )));
    };
    let content = SessionForkContent {
        origin_ledger: origin,
        origin_session: o.session_id,
        origin_hash,
        origin_label: Some(o.label.clone()),
        origin_pi: None,
        origin_checkpoint: None,
        workspace: None,
    };
    first_ledger(store, label, &[origin], content, &[])
}

/// Continues another Pi's sealed ledger here: a new session whose first ledger holds a
/// `session.fork` record naming that Pi, the ledger (id, session, hash) and the checkpoint
/// its verified `replica` holds, then copies of the ledger's records (same content, so the
/// same hashes). The origin ledger is not in this database, so it is no parent: the link is
/// the hash, checkable against the replica and that Pi's checkpoints.
pub fn fork_from_replica(
    store: &mut Store,
    replica: &Store,
    pi: &str,
    origin: LedgerId,
    label: &str,
) -> Result<(Session, Ledger)> {
    let o = replica.read_ledger(origin)?;
    let (Some(hash), LedgerState::Sealed) = (o.ledger_hash.clone(), o.state) else {
        return Err(StoreError::Invalid(format!(
            "ledger {origin} is not sealed in {pi}'s replica"
        )));
    };
    let Some((_, checkpoint, _)) = kura_store::replica::inbox(replica, pi)? else {
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
    let records: Vec<NewRecord> = replica
        .hydrate(origin)?
        .into_iter()
        .map(|r| NewRecord {
            record_type: r.record_type,
            content: r.content,
            author_id: r.author_id,
            metadata: r.metadata,
        })
        .collect();
    // The files as of the origin, copied (each checked) from beside the replica to beside
    // this database: the forked session's first turn starts with them.
    let workspace = replica_files(store, replica, origin);
    let content = SessionForkContent {
        origin_ledger: origin,
        origin_session: o.session_id,
        origin_hash: hash,
        origin_label: Some(o.label),
        origin_pi: Some(pi.to_owned()),
        origin_checkpoint: Some(checkpoint),
        workspace,
    };
    first_ledger(store, label, &[], content, &records)
}

/// The tree as of `origin` in the replica, its objects copied here; `None` (said in the log)
/// when none is recorded or they cannot be copied.
fn replica_files(
    store: &Store,
    replica: &Store,
    origin: LedgerId,
) -> Option<proto::workspace::ObjectId> {
    use kura_objects::Objects;
    let tree = crate::workspace::tree_at(replica, origin).ok().flatten()?;
    let copied = Objects::open(&Objects::beside(replica.path())).and_then(|from| {
        let to = Objects::open(&Objects::beside(store.path()))?;
        kura_objects::copy_tree(&from, &to, &tree)
    });
    match copied {
        Ok(n) if n.missing == 0 => {}
        Ok(n) => {
            tracing::warn!(%tree, missing = n.missing, "the replica lacks some of the forked files")
        }
        Err(e) => {
            tracing::warn!(%tree, error = %e, "the forked files could not be copied from the replica")
        }
    }
    Some(tree)
}

/// A new session `label` whose first ledger, `fork` (on `parents`), holds the fork record
/// and then `records`, sealed in the same commit.
fn first_ledger(
    store: &mut Store,
    label: &str,
    parents: &[LedgerId],
    fork: SessionForkContent,
    records: &[NewRecord],
) -> Result<(Session, Ledger)> {
    let sealer = store.sealer().cloned();
    store.write(|tx| {
        let session = tx.create_session(label)?;
        let first = tx.open_ledger(session.session_id, "fork", parents)?;
        let record = NewRecord {
            record_type: RecordType::SessionFork,
            content: fork.to_value(),
            author_id: AUTHOR.to_owned(),
            metadata: Default::default(),
        };
        tx.append(first.ledger_id, &record)?;
        for r in records {
            tx.append(first.ledger_id, r)?;
        }
        let (sealed, _) = tx.seal(first.ledger_id, sealer.as_ref())?;
        Ok((tx.read_session(session.session_id)?, sealed))
    })
}

/// The size a signed checkpoint note commits to (its second line), already verified when
/// the replica stored it.
fn checkpoint_size(note: &str) -> Option<u64> {
    note.lines().nth(1)?.trim().parse().ok()
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
pub fn forks_of(conn: &impl Db, session_id: SessionId) -> Result<Vec<Fork>> {
    let mut stmt = conn.sql().prepare_cached(
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

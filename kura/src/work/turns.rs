//! Turns: claimed by one hashi worker at a time under a lease; every claim bumps a fencing
//! epoch, and every write a worker makes checks it, so a worker whose lease was taken over
//! can no longer write to the turn.

use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde::Serialize;
use uuid::Uuid;

use crate::error::{Result, StoreError};
use crate::store::{Store, open_ledger_in, parse_id, seal_in};

/// Where a turn is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TurnState {
    /// Waiting for a worker.
    Pending,
    /// Claimed by a worker (whose lease may have expired).
    Running,
    /// Parked until an approval decision lands; no worker holds it.
    Waiting,
    /// Output sealed.
    Done,
}

/// A turn row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Turn {
    /// The turn.
    pub turn_id: Uuid,
    /// Its session.
    pub session_id: Uuid,
    /// 1, 2, ... within the session.
    pub seq: i64,
    /// The request it serves.
    pub request_seq: i64,
    /// Its sealed input.
    pub context_ledger_id: Uuid,
    /// Its output, once a worker opened it.
    pub output_ledger_id: Option<Uuid>,
    /// Pending, running or done.
    pub state: TurnState,
    /// Fencing epoch: the number of claims so far.
    pub epoch: i64,
    /// Who holds (or last held) the lease.
    pub lease_owner: Option<String>,
    /// When the lease ends (unix ms).
    pub lease_until_ms: Option<i64>,
    /// Completion order, once done.
    pub done_seq: Option<i64>,
}

/// A worker's claim on a turn: what it may write, and under which epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The turn.
    pub turn_id: Uuid,
    /// Its session.
    pub session_id: Uuid,
    /// Its number in the session.
    pub seq: i64,
    /// The fencing epoch this claim holds.
    pub epoch: i64,
    /// The worker.
    pub owner: String,
    /// The sealed context to read.
    pub context_ledger_id: Uuid,
    /// The open output ledger to append to.
    pub output_ledger_id: Uuid,
    /// True when an earlier worker had already claimed it (resume, do not restart).
    pub resumed: bool,
}

const TURN_COLUMNS: &str = "turn_id, session_id, seq, request_seq, context_ledger_id, output_ledger_id, \
     state, epoch, lease_owner, lease_until_ms, done_seq";

/// A turn row as read: its text columns and its integer columns.
type RawTurn = (Vec<Option<String>>, [Option<i64>; 5]);

fn turn_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawTurn> {
    Ok((
        vec![
            r.get(0)?,
            r.get(1)?,
            r.get(4)?,
            r.get(5)?,
            r.get(6)?,
            r.get(8)?,
        ],
        [r.get(2)?, r.get(3)?, r.get(7)?, r.get(9)?, r.get(10)?],
    ))
}

fn build(raw: RawTurn) -> Result<Turn> {
    let (t, n) = raw;
    let id = |i: usize| parse_id(t[i].as_deref().unwrap_or(""));
    Ok(Turn {
        turn_id: id(0)?,
        session_id: id(1)?,
        seq: n[0].unwrap_or(0),
        request_seq: n[1].unwrap_or(0),
        context_ledger_id: id(2)?,
        output_ledger_id: t[3].as_deref().map(parse_id).transpose()?,
        state: match t[4].as_deref() {
            Some("pending") => TurnState::Pending,
            Some("running") => TurnState::Running,
            Some("waiting") => TurnState::Waiting,
            _ => TurnState::Done,
        },
        epoch: n[2].unwrap_or(0),
        lease_owner: t[5].clone(),
        lease_until_ms: n[3],
        done_seq: n[4],
    })
}

/// Reads a turn.
pub fn turn(conn: &Connection, turn_id: Uuid) -> Result<Turn> {
    let sql = format!("SELECT {TURN_COLUMNS} FROM turns WHERE turn_id = ?1");
    let raw = conn
        .prepare_cached(&sql)?
        .query_row([turn_id.to_string()], turn_from_row)
        .optional()?
        .ok_or_else(|| StoreError::NotFound {
            kind: "turn",
            id: turn_id.to_string(),
        })?;
    build(raw)
}

/// Claims the oldest claimable turn — pending, or running with an expired lease — for
/// `owner` until `now_ms + lease_ms`, opening its output ledger on the first claim.
pub fn claim_next(
    store: &mut Store,
    owner: &str,
    lease_ms: i64,
    now_ms: i64,
) -> Result<Option<Claim>> {
    store.write(|tx| {
        let found: Option<String> = tx
            .prepare_cached(
                "SELECT turn_id FROM turns
                  WHERE state = 'pending' OR (state = 'running' AND lease_until_ms < ?1)
                  ORDER BY turn_id LIMIT 1",
            )?
            .query_row([now_ms], |r| r.get(0))
            .optional()?;
        let Some(id) = found else { return Ok(None) };
        let t = turn(tx, parse_id(&id)?)?;
        let resumed = t.epoch > 0;
        let output = match t.output_ledger_id {
            Some(o) => o,
            None => {
                let label = format!("turn-{}-out", t.seq);
                let l = open_ledger_in(tx, t.session_id, &label, &[t.context_ledger_id])?;
                l.ledger_id
            }
        };
        tx.prepare_cached(
            "UPDATE turns SET state = 'running', epoch = epoch + 1, lease_owner = ?2,
                    lease_until_ms = ?3, claims = claims + 1, output_ledger_id = ?4
              WHERE turn_id = ?1",
        )?
        .execute(params![id, owner, now_ms + lease_ms, output.to_string()])?;
        Ok(Some(Claim {
            turn_id: t.turn_id,
            session_id: t.session_id,
            seq: t.seq,
            epoch: t.epoch + 1,
            owner: owner.to_owned(),
            context_ledger_id: t.context_ledger_id,
            output_ledger_id: output,
            resumed,
        }))
    })
}

/// Checks, inside `tx`, that `claim` still holds the turn.
fn check_fence(tx: &Connection, claim: &Claim) -> Result<()> {
    let row: Option<(i64, String)> = tx
        .prepare_cached("SELECT epoch, state FROM turns WHERE turn_id = ?1")?
        .query_row([claim.turn_id.to_string()], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    match row {
        Some((epoch, state)) if epoch == claim.epoch && state == "running" => Ok(()),
        Some((epoch, state)) => Err(StoreError::Invalid(format!(
            "fenced: turn {} is at epoch {epoch} ({state}); this worker holds epoch {}",
            claim.turn_id, claim.epoch
        ))),
        None => Err(StoreError::NotFound {
            kind: "turn",
            id: claim.turn_id.to_string(),
        }),
    }
}

/// Runs `f` in one transaction only if `claim` still holds the turn (the fence).
pub fn fenced<T>(
    store: &mut Store,
    claim: &Claim,
    f: impl FnOnce(&Transaction<'_>) -> Result<T>,
) -> Result<T> {
    store.write(|tx| {
        check_fence(tx, claim)?;
        f(tx)
    })
}

/// Extends the lease; fails (fenced) if another worker took the turn over.
pub fn renew(store: &mut Store, claim: &Claim, lease_ms: i64, now_ms: i64) -> Result<()> {
    fenced(store, claim, |tx| {
        tx.prepare_cached("UPDATE turns SET lease_until_ms = ?2 WHERE turn_id = ?1")?
            .execute(params![claim.turn_id.to_string(), now_ms + lease_ms])?;
        Ok(())
    })
}

/// Gives the turn back (clean shutdown): another worker may resume it at once.
pub fn release(store: &mut Store, claim: &Claim) -> Result<()> {
    fenced(store, claim, |tx| {
        tx.prepare_cached(
            "UPDATE turns SET state = 'pending', lease_owner = NULL, lease_until_ms = NULL WHERE turn_id = ?1",
        )?
        .execute([claim.turn_id.to_string()])?;
        Ok(())
    })
}

/// Seals the output ledger and marks the turn done, under the fence. Returns the sealed
/// output ledger id.
pub fn complete_turn(store: &mut Store, claim: &Claim) -> Result<Uuid> {
    fenced(store, claim, |tx| {
        seal_in(tx, claim.output_ledger_id)?;
        tx.prepare_cached(
            "UPDATE turns SET state = 'done', lease_owner = NULL, lease_until_ms = NULL, completed_by = ?2,
                    done_seq = (SELECT COALESCE(MAX(done_seq), 0) + 1 FROM turns)
              WHERE turn_id = ?1",
        )?
        .execute(params![claim.turn_id.to_string(), claim.owner])?;
        Ok(claim.output_ledger_id)
    })
}

//! Turns: claimed by one hashi worker at a time under a lease; every claim bumps a fencing
//! epoch, and every write a worker makes checks it, so a worker whose lease was taken over
//! can no longer write to the turn.

use kura_store::store::parse_id;
use kura_store::{Cached, Db, Result, Store, StoreError, Tx, time};
use proto::{LedgerId, RoleName, SessionId, TurnId};
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use uuid::Uuid;

pub use proto::TurnState;

/// A turn row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Turn {
    /// The turn.
    pub turn_id: TurnId,
    /// Its session.
    pub session_id: SessionId,
    /// 1, 2, ... within the session.
    pub seq: i64,
    /// The request it serves.
    pub request_seq: i64,
    /// Its sealed input.
    pub context_ledger_id: LedgerId,
    /// Its output, once a worker opened it.
    pub output_ledger_id: Option<LedgerId>,
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
    pub turn_id: TurnId,
    /// Its session.
    pub session_id: SessionId,
    /// Its number in the session.
    pub seq: i64,
    /// The fencing epoch this claim holds.
    pub epoch: i64,
    /// The worker.
    pub owner: String,
    /// The sealed context to read.
    pub context_ledger_id: LedgerId,
    /// The open output ledger to append to.
    pub output_ledger_id: LedgerId,
    /// True when an earlier worker had already claimed it (resume, do not restart).
    pub resumed: bool,
    /// Which attempt this claim is: 1 + the claims before it that did not end cleanly.
    pub attempt: i64,
    /// Why the previous attempt failed, if one did.
    pub last_error: Option<String>,
    /// The recorded turn this one replays, if it is a replay.
    pub replay: Option<Replay>,
    /// The role it runs as (`[roster]`); none: the default role.
    pub role: Option<RoleName>,
    /// A validation turn's command (`minato submit --validate-cmd`): run in the sandbox
    /// instead of asking a model; exit 0 passes.
    pub validate_command: Option<Vec<String>>,
}

/// A turn that replays a recorded one (`minato replay`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replay {
    /// The recorded turn's output ledger.
    pub of: LedgerId,
    /// The model decides anew (another provider or script); only side effects are served
    /// from the record. Otherwise every step is the recorded one.
    pub live: bool,
    /// Side effects are not served but asked about again: each runs only if a person
    /// approves it through aegis, whatever the policy would allow.
    pub rerun: bool,
}

const TURN_COLUMNS: &str = "turn_id, session_id, seq, request_seq, context_ledger_id, output_ledger_id, \
     state, epoch, lease_owner, lease_until_ms, done_seq";

fn turn_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<Turn>> {
    fn id<T: From<Uuid>>(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Result<T>> {
        let text: String = r.get(i)?;
        Ok(parse_id(&text))
    }
    let output: Option<String> = r.get(5)?;
    let (turn_id, session_id, context) = (id(r, 0)?, id(r, 1)?, id(r, 4)?);
    let state: TurnState = r.get(6)?;
    Ok((|| {
        Ok(Turn {
            turn_id: turn_id?,
            session_id: session_id?,
            seq: r.get(2)?,
            request_seq: r.get(3)?,
            context_ledger_id: context?,
            output_ledger_id: output.as_deref().map(parse_id).transpose()?,
            state,
            epoch: r.get(7)?,
            lease_owner: r.get(8)?,
            lease_until_ms: r.get(9)?,
            done_seq: r.get(10)?,
        })
    })())
}

/// Reads a turn.
pub fn turn(conn: &impl Db, turn_id: TurnId) -> Result<Turn> {
    let conn = conn.sql();
    let sql = format!("SELECT {TURN_COLUMNS} FROM turns WHERE turn_id = ?1");
    conn.prepare_cached(&sql)?
        .query_row([turn_id.to_string()], turn_from_row)
        .optional()?
        .ok_or_else(|| StoreError::NotFound {
            kind: "turn",
            id: turn_id.to_string(),
        })?
}

/// The turn that wrote `output` as its output ledger, if one did.
pub fn turn_of_output(conn: &impl Db, output: LedgerId) -> Result<Option<Turn>> {
    let conn = conn.sql();
    let sql = format!("SELECT {TURN_COLUMNS} FROM turns WHERE output_ledger_id = ?1");
    conn.prepare_cached(&sql)?
        .query_row([output.to_string()], turn_from_row)
        .optional()?
        .transpose()
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
            .sql()
            .prepare_cached(
                // Fewest failed attempts first: a turn that keeps failing (or whose worker
                // died) waits behind fresh work instead of starving it.
                // An outside agent's turn is never a worker's (crate::agents).
                "SELECT turn_id FROM turns
                  WHERE ((state = 'pending' AND (retry_at_ms IS NULL OR retry_at_ms <= ?1))
                     OR (state = 'running' AND lease_until_ms < ?1))
                    AND agent IS NULL
                  ORDER BY attempts, turn_id LIMIT 1",
            )?
            .query_row([now_ms], |r| r.get(0))
            .optional()?;
        let Some(id) = found else { return Ok(None) };
        let t = turn(tx, parse_id(&id)?)?;
        let (attempts, last_error, role): (i64, Option<String>, Option<RoleName>) = tx
            .sql()
            .prepare_cached("SELECT attempts, last_error, role FROM turns WHERE turn_id = ?1")?
            .query_row([&id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        let (replay_of, live, rerun): (Option<String>, bool, bool) = tx
            .sql()
            .prepare_cached(
                // Only the request's first turn replays: a continuation (a deliverable that
                // asked for another turn) is not the recorded turn.
                "SELECT CASE WHEN t.seq = (SELECT min(seq) FROM turns WHERE request_seq = t.request_seq)
                             THEN r.replay_of END, r.replay_live, r.replay_rerun
                   FROM turns t JOIN requests r ON r.request_seq = t.request_seq
                  WHERE t.turn_id = ?1",
            )?
            .query_row([&id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        let replay = replay_of
            .as_deref()
            .map(parse_id)
            .transpose()?
            .map(|of| Replay { of, live, rerun });
        let resumed = t.epoch > 0;
        let output = match t.output_ledger_id {
            Some(o) => o,
            None => {
                let label = format!("turn-{}-out", t.seq);
                let l = tx.open_ledger(t.session_id, &label, &[t.context_ledger_id])?;
                l.ledger_id
            }
        };
        tx.sql().prepare_cached(
            "UPDATE turns SET state = 'running', epoch = epoch + 1, lease_owner = ?2,
                    lease_until_ms = ?3, claims = claims + 1, output_ledger_id = ?4,
                    attempts = attempts + 1, retry_at_ms = NULL
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
            attempt: attempts + 1,
            last_error,
            replay,
            role,
            validate_command: crate::verdicts::command_of(tx, t.turn_id)?,
        }))
    })
}

/// Checks, inside `tx`, that `claim` still holds the turn.
fn check_fence(tx: &Connection, claim: &Claim) -> Result<()> {
    let row: Option<(i64, TurnState)> = tx
        .sql()
        .prepare_cached("SELECT epoch, state FROM turns WHERE turn_id = ?1")?
        .query_row([claim.turn_id.to_string()], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    match row {
        Some((epoch, TurnState::Running)) if epoch == claim.epoch => Ok(()),
        Some((epoch, state)) => Err(StoreError::Fenced {
            turn_id: claim.turn_id.to_string(),
            held_epoch: claim.epoch,
            current_epoch: if state == TurnState::Running {
                epoch
            } else {
                -1
            },
        }),
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
    f: impl FnOnce(&Tx<'_>) -> Result<T>,
) -> Result<T> {
    store.write(|tx| {
        check_fence(tx.sql(), claim)?;
        f(tx)
    })
}

/// Extends the lease; fails (fenced) if another worker took the turn over.
pub fn renew(store: &mut Store, claim: &Claim, lease_ms: i64, now_ms: i64) -> Result<()> {
    fenced(store, claim, |tx| {
        tx.sql()
            .prepare_cached("UPDATE turns SET lease_until_ms = ?2 WHERE turn_id = ?1")?
            .execute(params![claim.turn_id.to_string(), now_ms + lease_ms])?;
        Ok(())
    })
}

/// Gives the turn back (clean shutdown): another worker may resume it at once, and this
/// claim does not count as a failed attempt.
pub fn release(store: &mut Store, claim: &Claim) -> Result<()> {
    fenced(store, claim, |tx| {
        tx.sql()
            .prepare_cached(
                "UPDATE turns SET state = 'pending', lease_owner = NULL, lease_until_ms = NULL,
                    attempts = MAX(attempts - 1, 0)
              WHERE turn_id = ?1",
            )?
            .execute([claim.turn_id.to_string()])?;
        Ok(())
    })
}

/// Gives the turn back after this attempt failed with `error` (kept as a bounded excerpt):
/// nobody claims it before `retry_at_ms`, and fresher turns go first.
pub fn release_failed(
    store: &mut Store,
    claim: &Claim,
    error: &str,
    retry_at_ms: i64,
) -> Result<()> {
    let mut end = error.len().min(MAX_ERROR_BYTES);
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    fenced(store, claim, |tx| {
        tx.sql()
            .prepare_cached(
                "UPDATE turns SET state = 'pending', lease_owner = NULL, lease_until_ms = NULL,
                    retry_at_ms = ?2, last_error = ?3
              WHERE turn_id = ?1",
            )?
            .execute(params![
                claim.turn_id.to_string(),
                retry_at_ms,
                &error[..end]
            ])?;
        Ok(())
    })
}

/// Longest `last_error` kept.
const MAX_ERROR_BYTES: usize = 1000;

/// Seals the output ledger and marks the turn done, under the fence. Returns the sealed
/// output ledger id.
pub fn complete_turn(store: &mut Store, claim: &Claim) -> Result<LedgerId> {
    let sealer = store.sealer().cloned();
    fenced(store, claim, |tx| {
        complete_turn_in(tx, claim, sealer.as_ref())
    })
}

/// [`complete_turn`] inside a fenced transaction the caller holds (so the last records of a
/// turn, its seal and its completion are one commit).
pub(crate) fn complete_turn_in(
    tx: &Tx<'_>,
    claim: &Claim,
    sealer: Option<&kura_tlog::sealer::Sealer>,
) -> Result<LedgerId> {
    tx.seal(claim.output_ledger_id, sealer)?;
    tx.sql().prepare_cached(
        "UPDATE turns SET state = 'done', lease_owner = NULL, lease_until_ms = NULL, completed_by = ?2,
                attempts = 0, retry_at_ms = NULL,
                done_seq = (SELECT COALESCE(MAX(done_seq), 0) + 1 FROM turns)
          WHERE turn_id = ?1",
    )?
    .execute(params![claim.turn_id.to_string(), claim.owner])?;
    Ok(claim.output_ledger_id)
}

/// The next turn number of a session.
pub fn next_turn_seq(conn: &impl Db, session_id: SessionId) -> Result<i64> {
    let conn = conn.sql();
    Ok(conn.query_row_cached(
        "SELECT COALESCE(MAX(seq), 0) + 1 FROM turns WHERE session_id = ?1",
        [session_id.to_string()],
        |r| r.get(0),
    )?)
}

/// Files a pending turn whose sealed context is `context_ledger_id`.
pub(crate) fn insert_turn(
    tx: &Tx<'_>,
    session_id: SessionId,
    seq: i64,
    request_seq: i64,
    context_ledger_id: LedgerId,
) -> Result<TurnId> {
    let turn_id = TurnId::new();
    tx.sql().execute_cached(
"INSERT INTO turns (turn_id, session_id, seq, request_seq, context_ledger_id, state, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            turn_id.to_string(),
            session_id.to_string(),
            seq,
            request_seq,
            context_ledger_id.to_string(),
            TurnState::Pending,
            time::now()
        ],
    )?;
    Ok(turn_id)
}

/// The first completed turn after `done_seq` position `position`, with its `done_seq`.
pub fn next_done_turn_after(conn: &impl Db, position: i64) -> Result<Option<(Turn, i64)>> {
    let conn = conn.sql();
    let row: Option<(String, i64)> = conn
        .prepare_cached(
            "SELECT turn_id, done_seq FROM turns WHERE done_seq > ?1 ORDER BY done_seq LIMIT 1",
        )?
        .query_row([position], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    row.map(|(id, done_seq)| Ok((turn(conn, parse_id(&id)?)?, done_seq)))
        .transpose()
}

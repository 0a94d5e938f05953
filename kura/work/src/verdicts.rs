//! Validation over the work tables: a request's validator, the turn that judges a
//! deliverable, how many verdicts failed the request's work, and the verdict that allowed a
//! session to complete.

use kura_store::store::parse_id;
use kura_store::{Cached, Db, Result, StoreError, Tx};
use proto::plan::Validator;
use proto::{RecordId, SessionId, TurnId};
use rusqlite::{OptionalExtension, params};

/// The validator request `request_seq` named, if any.
pub fn request_validator(conn: &impl Db, request_seq: i64) -> Result<Option<Validator>> {
    let json: Option<String> = conn.sql().query_row_cached(
        "SELECT validator FROM requests WHERE request_seq = ?1",
        [request_seq],
        |r| r.get(0),
    )?;
    json.map(|j| {
        serde_json::from_str(&j).map_err(|e| StoreError::Corrupt {
            what: "request",
            id: request_seq.to_string(),
            detail: format!("validator: {e}"),
        })
    })
    .transpose()
}

/// Marks `turn` as the validation of deliverable `judged`.
pub fn mark_validation(tx: &Tx<'_>, turn: TurnId, judged: RecordId) -> Result<()> {
    tx.sql().execute_cached(
        "UPDATE turns SET validates = ?2 WHERE turn_id = ?1",
        params![turn.to_string(), judged.to_string()],
    )?;
    Ok(())
}

/// The deliverable `turn` judges, when it is a validation turn.
pub fn judged_by(conn: &impl Db, turn: TurnId) -> Result<Option<RecordId>> {
    let id: Option<String> = conn
        .sql()
        .query_row_cached(
            "SELECT validates FROM turns WHERE turn_id = ?1",
            [turn.to_string()],
            |r| r.get(0),
        )
        .optional()?
        .flatten();
    id.as_deref().map(parse_id).transpose()
}

/// The command a validation turn runs instead of asking a model, if its validator is one.
pub fn command_of(conn: &impl Db, turn: TurnId) -> Result<Option<Vec<String>>> {
    let row: Option<(i64, Option<String>)> = conn
        .sql()
        .query_row_cached(
            "SELECT t.request_seq, t.validates FROM turns t WHERE t.turn_id = ?1",
            [turn.to_string()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let Some((request_seq, Some(_))) = row else {
        return Ok(None);
    };
    Ok(request_validator(conn, request_seq)?
        .map(|v| v.command)
        .filter(|c| !c.is_empty()))
}

/// Counts one more failed verdict on the request's work; returns how many there are now.
pub fn count_failed(tx: &Tx<'_>, request_seq: i64) -> Result<i64> {
    tx.sql().execute_cached(
        "UPDATE requests SET validations = validations + 1 WHERE request_seq = ?1",
        [request_seq],
    )?;
    Ok(tx.sql().query_row_cached(
        "SELECT validations FROM requests WHERE request_seq = ?1",
        [request_seq],
        |r| r.get(0),
    )?)
}

/// Records the verdict that ended `session`.
pub fn set_session_verdict(tx: &Tx<'_>, session: SessionId, verdict: RecordId) -> Result<()> {
    tx.sql().execute_cached(
        "UPDATE sessions SET verdict = ?2 WHERE session_id = ?1",
        params![session.to_string(), verdict.to_string()],
    )?;
    Ok(())
}

//! Work state shared by the daemons: session requests, turns with leases and fencing epochs,
//! approvals, and consumer cursors that advance in the same transaction as the work. The
//! policy over these tables (what a context holds, when a session ends) lives in the daemons.

pub mod approvals;
mod cursor;
pub mod policy;
mod requests;
mod turns;

use std::time::{SystemTime, UNIX_EPOCH};

pub use cursor::{cursor, set_cursor};
pub(crate) use requests::mark_accepted_in;
pub use requests::{
    Queued, RecordedTurn, Request, RequestStatus, last_deliverable, next_request_after,
    recorded_turns, request_instruction, request_replays, request_status, submit, submit_replay,
};
pub use turns::{
    Claim, Replay, Turn, TurnState, claim_next, complete_turn, fenced, next_done_turn_after,
    next_turn_seq, release, release_failed, renew, turn,
};
pub(crate) use turns::{complete_turn_in, insert_turn_in};

/// Milliseconds since the Unix epoch, the clock leases are measured on.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

//! Work state shared by the daemons: session requests (minato), turns with leases and fencing
//! epochs (hashi), and consumer cursors that advance in the same transaction as the work.

pub mod approvals;
mod cursor;
mod requests;
mod turns;

use std::time::{SystemTime, UNIX_EPOCH};

pub use cursor::{cursor, set_cursor};
pub use requests::{
    Accepted, COMPLETIONS_CONSUMER, Decision, REQUESTS_CONSUMER, Request, RequestStatus,
    accept_next_request, decide_next_completion, last_deliverable, request_status, submit,
};
pub use turns::{Claim, Turn, TurnState, claim_next, complete_turn, fenced, release, renew, turn};

/// Milliseconds since the Unix epoch, the clock leases are measured on.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;

//! Relays a decision the browser signed to aegis, unchanged, and returns aegis's signed
//! verdict. The server adds nothing a signature covers: it cannot approve on its own, and
//! anything it altered would fail aegis's check.

use std::time::Duration;

use proto::doorbell::{ApprovalDecision, MAX_DECISION_BYTES, Verdicted};

/// Why a decision did not reach aegis.
#[derive(Debug)]
pub enum RelayError {
    /// The browser sent something that is not a decision (or not its own).
    BadRequest(String),
    /// No bus, no aegis, or an answer not signed by aegis.
    Unavailable(String),
}

/// Checks the shape, then asks aegis. `login` is the person the decision must be from.
pub async fn relay(
    console: &crate::Console,
    login: &crate::auth::Login,
    body: &[u8],
) -> Result<Verdicted, RelayError> {
    if body.len() > MAX_DECISION_BYTES {
        return Err(RelayError::BadRequest(format!(
            "a decision is at most {MAX_DECISION_BYTES} bytes"
        )));
    }
    let d: ApprovalDecision = serde_json::from_slice(body)
        .map_err(|e| RelayError::BadRequest(format!("not a decision: {e}")))?;
    // One person, one login: a page cannot relay a decision in someone else's name.
    if d.approver != login.name {
        return Err(RelayError::BadRequest(format!(
            "logged in as {}, but the decision is by {}",
            login.name, d.approver
        )));
    }
    let (Some(bus), Some(aegis_key)) = (&console.bus, &console.aegis_key) else {
        return Err(RelayError::Unavailable(
            "this console has no bus connection to aegis".into(),
        ));
    };
    let bytes = serde_json::to_vec(&d).map_err(|e| RelayError::BadRequest(e.to_string()))?;
    // aegis's answer is the first reply signed by its pinned key; others are skipped.
    let reply = kura_runtime::ask::ask_signed(
        &bus.client,
        bus.subjects.approval_decide(),
        bytes,
        aegis_key,
        Duration::from_secs(5),
    )
    .await
    .map_err(|e| RelayError::Unavailable(format!("aegis: {e}")))?;
    serde_json::from_slice(&reply.payload)
        .map_err(|e| RelayError::Unavailable(format!("aegis's answer is not a verdict: {e}")))
}

//! Relays a decision the browser signed to aegis, unchanged, and returns aegis's signed
//! verdict. The server adds nothing a signature covers: it cannot approve on its own, and
//! anything it altered would fail aegis's check.

use std::time::Duration;

use proto::doorbell::{ApprovalDecision, MAX_DECISION_BYTES};
use serde_json::Value;

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
) -> Result<Value, RelayError> {
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
    let reply = tokio::time::timeout(
        Duration::from_secs(5),
        bus.client
            .request(bus.subjects.approval_decide(), bytes.into()),
    )
    .await
    .map_err(|_| RelayError::Unavailable("aegis did not answer in 5 s".into()))?
    .map_err(|e| RelayError::Unavailable(format!("cannot reach aegis: {e}")))?;
    kura_runtime::bus::verify_signed_reply(&reply, aegis_key)
        .map_err(|e| RelayError::Unavailable(format!("refused an answer: {e}")))?;
    serde_json::from_slice(&reply.payload)
        .map_err(|e| RelayError::Unavailable(format!("aegis's answer is not JSON: {e}")))
}

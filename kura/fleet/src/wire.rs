//! Message bodies on the wire: a [`ReplMessage`] as JSON, moved to the object store (and
//! pointed at) when it is too large for one message, and read back with its size bounded
//! and its SHA-256 checked before it is parsed.

use bytes::Bytes;
use proto::fleet::{INLINE_MAX, OBJECT_MAX, ReplMessage};
use sha2::{Digest, Sha256};

use crate::port::Objects;
use crate::{FleetError, Result};

/// Longest wait for one object (at most [`OBJECT_MAX`] bytes on a LAN).
const OBJECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// The body to publish for `message`: itself, or a pointer to an object holding it.
pub(crate) async fn encode(
    pi: &str,
    message: &ReplMessage,
    objects: &impl Objects,
) -> Result<Bytes> {
    let body = serde_json::to_vec(message).map_err(|e| FleetError::Config(e.to_string()))?;
    if body.len() <= INLINE_MAX {
        return Ok(Bytes::from(body));
    }
    let sha256 = hex::encode(Sha256::digest(&body));
    let name = format!("{pi}/{sha256}");
    let size = body.len() as u64;
    // Content-addressed: an object of that name is this body (a Pi's store is its own), and
    // putting it again would need the purge a Pi may not do.
    if !objects.holds(&name, size).await {
        objects.put(&name, &body).await?;
    }
    let pointer = ReplMessage::Object { name, sha256, size };
    serde_json::to_vec(&pointer)
        .map(Bytes::from)
        .map_err(|e| FleetError::Config(e.to_string()))
}

/// Reads a body published by `origin`: the message it is, with an object fetched (only
/// under `origin`'s name, at most [`OBJECT_MAX`] bytes) and its SHA-256 checked.
pub(crate) async fn decode(
    origin: &str,
    payload: &[u8],
    objects: &impl Objects,
) -> Result<ReplMessage> {
    let refused = |why: String| FleetError::Refused {
        origin: origin.to_owned(),
        why,
    };
    let message: ReplMessage = serde_json::from_slice(payload)
        .map_err(|e| refused(format!("a message is not a replication body: {e}")))?;
    let ReplMessage::Object { name, sha256, size } = message else {
        return Ok(message);
    };
    if !name.starts_with(&format!("{origin}/")) || size > OBJECT_MAX as u64 {
        return Err(refused(format!(
            "an object pointer names {name:?} of {size} bytes (at most {OBJECT_MAX}, under its own name)"
        )));
    }
    // Bounded in time as in bytes: a store that never finishes an object is the hub's delay.
    let body = tokio::time::timeout(OBJECT_TIMEOUT, objects.get(&name, size))
        .await
        .map_err(|_| {
            FleetError::Hub(format!(
                "object {name} took longer than {} s",
                OBJECT_TIMEOUT.as_secs()
            ))
        })??;
    // Every Pi may write the object store, so a body that is not what the origin's pointer
    // names is the hub's or another Pi's doing, not the origin's: retried, never an ALARM
    // against the origin (the hub can delay, not forge).
    if body.len() as u64 != size || hex::encode(Sha256::digest(&body)) != sha256 {
        return Err(FleetError::Hub(format!(
            "object {name} on the hub is not the body {origin}'s pointer names (SHA-256 {sha256}); retrying"
        )));
    }
    match serde_json::from_slice(&body) {
        Ok(ReplMessage::Object { .. }) => Err(refused(format!("object {name} points at another"))),
        Ok(inner) => Ok(inner),
        Err(e) => Err(refused(format!(
            "object {name} is not a replication body: {e}"
        ))),
    }
}

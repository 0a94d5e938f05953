//! The people's side: `aegis pending`, `aegis approve`, `aegis deny` over NATS request/reply,
//! from any machine that reaches NATS.

use std::time::Duration;

use anyhow::Context;
use proto::doorbell::{ApprovalDecision, PendingQuery};
use uuid::Uuid;

use crate::decide::{PendingItem, Verdicted};
use crate::keys;

async fn ask(url: &str, subject: String, body: Vec<u8>) -> anyhow::Result<Vec<u8>> {
    let client = async_nats::ConnectOptions::new()
        .name("aegis-cli")
        .connection_timeout(Duration::from_secs(3))
        .connect(url)
        .await
        .with_context(|| format!("cannot reach NATS at {url}"))?;
    let reply = tokio::time::timeout(Duration::from_secs(5), client.request(subject, body.into()))
        .await
        .context("aegis did not answer in 5 s")?
        .map_err(|e| match e.kind() {
            async_nats::RequestErrorKind::NoResponders => {
                anyhow::anyhow!("no aegis daemon is listening")
            }
            _ => anyhow::anyhow!("request failed: {e}"),
        })?;
    Ok(reply.payload.to_vec())
}

/// Lists requests waiting for people.
pub async fn pending(
    url: &str,
    subjects: &proto::subjects::Subjects,
) -> anyhow::Result<Vec<PendingItem>> {
    let body = proto::doorbell::encode(&PendingQuery {})?;
    let bytes = ask(url, subjects.approval_pending(), body).await?;
    serde_json::from_slice(&bytes)
        .with_context(|| format!("unexpected answer: {}", String::from_utf8_lossy(&bytes)))
}

/// Signs and sends a decision; returns aegis's verdict.
pub async fn decide(
    url: &str,
    subjects: &proto::subjects::Subjects,
    key_path: &std::path::Path,
    request_id: Uuid,
    approve: bool,
    note: &str,
) -> anyhow::Result<Verdicted> {
    let (name, key) = keys::load(key_path)?;
    let items = pending(url, subjects).await?;
    let item = items
        .iter()
        .find(|i| i.request_id == request_id)
        .with_context(|| format!("request {request_id} is not waiting for a decision"))?;
    let mut d = ApprovalDecision {
        request_id,
        decision: if approve { "approve" } else { "deny" }.into(),
        approver: name,
        note: note.chars().take(200).collect(),
        signed_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        signature: String::new(),
    };
    keys::sign(&key, &mut d, &item.request_hash);
    let bytes = ask(
        url,
        subjects.approval_decide(),
        proto::doorbell::encode(&d)?,
    )
    .await?;
    serde_json::from_slice(&bytes)
        .with_context(|| format!("unexpected answer: {}", String::from_utf8_lossy(&bytes)))
}

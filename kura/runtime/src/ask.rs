//! Asking a pinned responder over NATS: the answer is the first reply signed by the pinned
//! key. Anyone allowed to answer can race the real responder, so replies not signed by it
//! are skipped — a rogue reply delays nothing and decides nothing.

use std::time::Duration;

use futures::StreamExt as _;

/// Most replies read for one question before giving up on a signed one: a flood cannot
/// keep a person waiting past the deadline or fill memory.
const MAX_REPLIES: usize = 64;

/// Why no signed answer came.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AskError {
    /// Nobody subscribes to the subject (NATS no-responders).
    #[error("nobody is listening on {0}")]
    NoResponders(String),
    /// Replies came, but none signed by the pinned key.
    #[error("no answer signed by the pinned key in {secs} s; only others came (the last: {last})")]
    OnlyUnsigned {
        /// The wait.
        secs: u64,
        /// Why the last one was refused.
        last: String,
    },
    /// Nothing came in time.
    #[error("no answer in {0} s")]
    Timeout(u64),
    /// The question could not be sent.
    #[error("cannot ask: {0}")]
    Send(String),
}

/// Publishes `body` on `subject` and returns the first reply signed by `signer` (a pinned
/// public nkey, verified before a byte of the reply is read), waiting at most `wait`.
pub async fn ask_signed(
    client: &async_nats::Client,
    subject: String,
    body: Vec<u8>,
    signer: &str,
    wait: Duration,
) -> Result<async_nats::Message, AskError> {
    let send = |e: &dyn std::fmt::Display| AskError::Send(e.to_string());
    let inbox = client.new_inbox();
    let mut replies = client
        .subscribe(inbox.clone())
        .await
        .map_err(|e| send(&e))?;
    client
        .publish_with_reply(subject.clone(), inbox, body.into())
        .await
        .map_err(|e| send(&e))?;
    client.flush().await.map_err(|e| send(&e))?;
    let deadline = tokio::time::Instant::now() + wait;
    let mut last = None;
    for _ in 0..MAX_REPLIES {
        let reply = match tokio::time::timeout_at(deadline, replies.next()).await {
            Ok(Some(r)) => r,
            Ok(None) | Err(_) => break,
        };
        if reply.status == Some(async_nats::StatusCode::NO_RESPONDERS) {
            return Err(AskError::NoResponders(subject));
        }
        match crate::bus::verify_signed_reply(&reply, signer) {
            Ok(()) => return Ok(reply),
            Err(e) => last = Some(format!("{e:#}")),
        }
    }
    Err(match last {
        Some(last) => AskError::OnlyUnsigned {
            secs: wait.as_secs(),
            last,
        },
        None => AskError::Timeout(wait.as_secs()),
    })
}

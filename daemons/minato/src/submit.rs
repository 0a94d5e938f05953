//! `minato submit`: write the instruction and the request durably, ring minato, and with
//! `--wait` follow the session until it completes.

use std::time::{Duration, Instant};

use kura_runtime::{Bus, Common, wake_pair};
use kura_store::Store;
use kura_store::work::{RequestStatus, request_status, submit};
use proto::doorbell::{SessionComplete, SessionCreate};
use uuid::Uuid;

/// What `submit` did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Submitted {
    /// The request's place in minato's queue.
    pub request_seq: i64,
    /// The `task.instruction` record.
    pub record_id: Uuid,
    /// The session, when known (continued, or once accepted).
    pub session_id: Option<Uuid>,
    /// The final status when waited for.
    pub status: Option<RequestStatus>,
}

/// Forks a new session from the sealed `ledger` (of any session), sealed with this
/// identity's key, for a submit to continue: `minato submit --from`.
pub fn fork(common: &Common, ledger: Uuid) -> anyhow::Result<Uuid> {
    let mut store = Store::open(&common.db, &common.store_options()?)?;
    let (s, _) = store.fork(ledger, &format!("fork of {ledger}"))?;
    Ok(s.session_id)
}

/// Submits `instruction` (optionally continuing `session`) and, if `wait` is set, waits up
/// to `timeout` for the session to complete.
pub async fn run(
    common: &Common,
    instruction: &str,
    author: &str,
    session: Option<Uuid>,
    wait: Option<Duration>,
) -> anyhow::Result<Submitted> {
    let options = common.store_options()?;
    let mut store = Store::open(&common.db, &options)?;
    let request = submit(&mut store, instruction, author, session)?;
    let (waker, rx) = wake_pair();
    let bus = Bus::connect(common, "minato-submit").await?;
    if wait.is_some() {
        let w = waker.clone();
        bus.doorbells::<SessionComplete, _>(bus.subjects.session_complete(), None, move |_| {
            w.wake()
        })
        .await?;
    }
    bus.ring(
        bus.subjects.session_create(),
        &SessionCreate {
            record_id: request.record_id,
            session_id: session,
        },
    );
    let flushed = tokio::time::timeout(Duration::from_secs(1), bus.client.flush()).await;
    if !matches!(flushed, Ok(Ok(()))) {
        tracing::warn!(
            "NATS unreachable; the request is stored and minato will pick it up by polling"
        );
    }
    let mut out = Submitted {
        request_seq: request.request_seq,
        record_id: request.record_id,
        session_id: session,
        status: None,
    };
    if let Some(timeout) = wait {
        let deadline = Instant::now() + timeout;
        let status = tokio::task::spawn_blocking(move || -> anyhow::Result<RequestStatus> {
            loop {
                let status = request_status(store.conn(), request.request_seq)?;
                if status.complete {
                    return Ok(status);
                }
                if Instant::now() >= deadline {
                    anyhow::bail!(
                        "timed out after {}s waiting for request {} (session {}); it keeps running",
                        timeout.as_secs(),
                        request.request_seq,
                        status
                            .session_id
                            .map(|s| s.to_string())
                            .unwrap_or_else(|| "not yet created".into())
                    );
                }
                rx.wait(Duration::from_millis(200));
            }
        })
        .await??;
        out.session_id = status.session_id;
        out.status = Some(status);
    }
    bus.close().await;
    Ok(out)
}

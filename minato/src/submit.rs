//! `minato submit`: write the instruction and the request durably, ring minato, and with
//! `--wait` follow the session until it completes.

use proto::{LedgerId, RecordId, SessionId};
use std::time::{Duration, Instant};

use kura_runtime::{Bus, Common, wake_pair};
use kura_store::Store;
use kura_work::{Ask, Replay, RequestStatus, request_status, submit_as};
use proto::doorbell::{SessionComplete, SessionCreate};

/// What `submit` did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Submitted {
    /// The request's place in minato's queue.
    pub request_seq: i64,
    /// The `task.instruction` record.
    pub record_id: RecordId,
    /// The session, when known (continued, or once accepted).
    pub session_id: Option<SessionId>,
    /// The final status when waited for.
    pub status: Option<RequestStatus>,
}

/// Forks a new session from the sealed `ledger` (of any session), sealed with this
/// identity's key, for a submit to continue: `minato submit --from`.
pub fn fork(common: &Common, ledger: LedgerId) -> anyhow::Result<SessionId> {
    let mut store = Store::open(&common.db, &common.store_options()?)?;
    let (s, _) = kura_history::fork::fork(&mut store, ledger, &format!("fork of {ledger}"))?;
    Ok(s.session_id)
}

/// Forks a new session from another Pi's sealed `ledger`, read from this Pi's verified
/// replica of it (`replicas/<pi>.db` beside the database unless `dir` says where):
/// `minato submit --from LEDGER --replica PI`.
pub fn fork_from_replica(
    common: &Common,
    pi: &str,
    dir: Option<&std::path::Path>,
    ledger: LedgerId,
) -> anyhow::Result<SessionId> {
    proto::fleet::check_pi_name(pi)?;
    let dir = dir.map(std::path::Path::to_path_buf).unwrap_or_else(|| {
        common
            .db
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."))
            .join("replicas")
    });
    let path = dir.join(format!("{pi}.db"));
    let options = common.store_options()?;
    let replica = Store::open(&path, &kura_store::StoreOptions::default())
        .map_err(|e| anyhow::anyhow!("{e} (is {pi} one of [fleet] peers in serve.toml?)"))?;
    let mut store = Store::open(&common.db, &options)?;
    let (s, _) = kura_history::fork::fork_from_replica(
        &mut store,
        &replica,
        pi,
        ledger,
        &format!("continued from {pi}"),
    )?;
    Ok(s.session_id)
}

/// Submits `instruction` (optionally continuing `session`) and, if `wait` is set, waits up
/// to `timeout` for the session to complete.
pub async fn run(
    common: &Common,
    instruction: &str,
    author: &str,
    session: Option<SessionId>,
    wait: Option<Duration>,
) -> anyhow::Result<Submitted> {
    run_replaying(common, instruction, author, session, wait, None).await
}

/// [`run`] for a request that replays a recorded turn.
pub async fn run_replaying(
    common: &Common,
    instruction: &str,
    author: &str,
    session: Option<SessionId>,
    wait: Option<Duration>,
    replay: Option<Replay>,
) -> anyhow::Result<Submitted> {
    run_as(
        common,
        instruction,
        author,
        session,
        wait,
        replay,
        Ask::default(),
    )
    .await
}

/// [`run_replaying`] for work that names its role or validator (`minato submit --role`,
/// `--validate-role`, `--validate-cmd`).
pub async fn run_as(
    common: &Common,
    instruction: &str,
    author: &str,
    session: Option<SessionId>,
    wait: Option<Duration>,
    replay: Option<Replay>,
    ask: Ask<'_>,
) -> anyhow::Result<Submitted> {
    // The connection (TCP, TLS, nkey login) is made in the background while the request is
    // committed; the doorbell below waits for both. Subscribing before the commit also means
    // no completion can slip past.
    let bus = Bus::connect(common, "minato-submit").await?;
    let (waker, rx) = wake_pair();
    if wait.is_some() {
        let w = waker.clone();
        bus.doorbells::<SessionComplete, _>(bus.subjects.session_complete(), None, move |_| {
            w.wake()
        })
        .await?;
    }
    let options = common.store_options()?;
    let mut store = Store::open(&common.db, &options)?;
    let request = submit_as(&mut store, instruction, author, session, replay, ask)?;
    bus.ring_now(
        bus.subjects.session_create(),
        &SessionCreate {
            record_id: request.record_id,
            session_id: session,
        },
    )
    .await;
    let flushed = tokio::time::timeout(Duration::from_secs(1), bus.client.flush()).await;
    if !matches!(flushed, Ok(Ok(()))) {
        let why = bus
            .last_error()
            .unwrap_or_else(|| format!("the bus at {} did not answer", common.nats_url));
        tracing::warn!(
            "{why}; the request is stored and minato will pick it up by polling (as soon as \
             this is fixed, or at its next poll)"
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
                let status = request_status(&store, request.request_seq)?;
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

/// What `minato replay` did: the session the turns were replayed into, and each replayed
/// turn's outcome.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Replayed {
    /// The fork (or new session) that holds the replay.
    pub session_id: SessionId,
    /// (recorded turn number, the replayed request's status).
    pub turns: Vec<(i64, RequestStatus)>,
}

/// Re-runs `session`'s turns from `from_turn` on into a fork grown from the ledger before
/// that turn (a new session when it is the first): each turn with its recorded instruction,
/// and the worker serving the recorded steps (or, `live`, asking its own model while still
/// serving recorded side effects; `rerun`: side effects go to aegis, and run again only if a
/// person approves). Turns run one after another, each waited for.
pub async fn replay(
    common: &Common,
    session: SessionId,
    from_turn: i64,
    (live, rerun): (bool, bool),
    timeout: Duration,
) -> anyhow::Result<Replayed> {
    let mut store = Store::open(&common.db, &common.store_options()?)?;
    let recorded = kura_work::recorded_turns(&store, session)?;
    let todo: Vec<_> = recorded
        .into_iter()
        .filter(|t| t.seq >= from_turn)
        .collect();
    let Some(first) = todo.first() else {
        anyhow::bail!("session {session} has no finished turn {from_turn} or later to replay");
    };
    let context = store.read_ledger(first.context_ledger_id)?;
    let target = match context.parent_ids.first() {
        Some(origin) => {
            kura_history::fork::fork(&mut store, *origin, &format!("replay of {session}"))?
                .0
                .session_id
        }
        None => {
            store
                .create_session(&format!("replay of {session}"))?
                .session_id
        }
    };
    drop(store);
    let mut turns = Vec::new();
    for t in todo {
        let done = run_replaying(
            common,
            &t.instruction,
            &t.author,
            Some(target),
            Some(timeout),
            Some(Replay {
                of: t.output_ledger_id,
                live,
                rerun,
            }),
        )
        .await?;
        let status = done
            .status
            .ok_or_else(|| anyhow::anyhow!("turn {} was not waited for", t.seq))?;
        turns.push((t.seq, status));
    }
    Ok(Replayed {
        session_id: target,
        turns,
    })
}

//! Minato, the orchestrator: turns each request into a session turn (context ledger packed
//! and sealed, turn row created, hashi rung), and after each completed turn decides: the
//! next turn (its context has the previous output as parent) or session complete.

pub mod submit;

use std::future::Future;
use std::thread;

use kura::Store;
use kura::runtime::{Bus, Common, Stop, consumer_loop, wake_pair};
use kura::work::{Decision, accept_next_request, decide_next_completion};
use proto::doorbell::{SessionComplete, SessionCreate, WorkerComplete, WorkerDispatch};
use serde::{Deserialize, Serialize};

/// Minato's configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Settings shared by every daemon.
    pub common: Common,
    /// Orchestration.
    pub minato: MinatoConfig,
}

/// How sessions are driven.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MinatoConfig {
    /// A session ends after this many turns even if no deliverable was marked final.
    pub max_turns: i64,
    /// How many memory hits (facts and decisions from earlier work) go into each context.
    pub memory_hits: usize,
}

impl Default for MinatoConfig {
    fn default() -> Self {
        MinatoConfig {
            max_turns: 8,
            memory_hits: 5,
        }
    }
}

/// Runs the daemon until `shutdown` resolves: two consumers (requests, completions), each
/// on its own thread with its own store handle, woken by doorbells and reconnects and
/// polling SQLite regardless.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let common = config.common.clone();
    let options = common.store_options()?;
    let mut requests_store = Store::open(&common.db, &options)?;
    let mut completions_store = Store::open(&common.db, &options)?;
    let name = common.instance_name("minato");
    let (wake_req, rx_req) = wake_pair();
    let (wake_done, rx_done) = wake_pair();
    let bus = Bus::connect(&common, &name, vec![wake_req.clone(), wake_done.clone()]).await?;
    let heartbeat =
        kura::runtime::heartbeat::Heartbeat::start(&common, "minato", &name, Some(bus.clone()));
    let s = &bus.subjects;
    let w = wake_req.clone();
    bus.doorbells::<SessionCreate, _>(s.session_create(), None, move |_| w.wake())
        .await?;
    let w = wake_done.clone();
    bus.doorbells::<WorkerComplete, _>(s.worker_complete(), None, move |_| w.wake())
        .await?;

    let stop = Stop::new();
    let poll = common.poll_interval();
    let (b1, st1, hits) = (bus.clone(), stop.clone(), config.minato.memory_hits);
    let requests = thread::Builder::new().name("minato-requests".into()).spawn(move || {
        consumer_loop("minato.requests", &rx_req, poll, &st1, || {
            let Some(a) = accept_next_request(&mut requests_store, hits)? else { return Ok(false) };
            tracing::info!(session_id = %a.session_id, turn_id = %a.turn_id, request = a.request_seq, "request accepted; turn dispatched");
            b1.ring(b1.subjects.worker_dispatch(), &WorkerDispatch { turn_id: a.turn_id });
            Ok(true)
        })
    })?;
    let (b2, st2, max_turns, hits) = (
        bus.clone(),
        stop.clone(),
        config.minato.max_turns,
        config.minato.memory_hits,
    );
    let completions = thread::Builder::new()
        .name("minato-completions".into())
        .spawn(move || {
            consumer_loop("minato.completions", &rx_done, poll, &st2, || {
                match decide_next_completion(&mut completions_store, max_turns, hits)? {
                    None => return Ok(false),
                    Some(Decision::Next {
                        session_id,
                        turn_id,
                    }) => {
                        tracing::info!(%session_id, %turn_id, "next turn dispatched");
                        b2.ring(b2.subjects.worker_dispatch(), &WorkerDispatch { turn_id });
                    }
                    Some(Decision::Complete { session_id }) => {
                        tracing::info!(%session_id, "session complete");
                        b2.ring(
                            b2.subjects.session_complete(),
                            &SessionComplete { session_id },
                        );
                    }
                }
                Ok(true)
            })
        })?;
    tracing::info!(db = %common.db.display(), nats = %common.nats_url, "minato running");
    shutdown.await;
    stop.set();
    wake_req.wake();
    wake_done.wake();
    tokio::task::spawn_blocking(move || {
        let _ = requests.join();
        let _ = completions.join();
    })
    .await?;
    bus.close().await;
    tokio::task::spawn_blocking(move || heartbeat.stop()).await?;
    tracing::info!("minato stopped");
    Ok(())
}

//! Minato, the orchestrator: turns each request into a session turn (context ledger packed
//! and sealed, turn row created, hashi rung), and after each completed turn decides: the
//! next turn (its context has the previous output as parent) or session complete.

pub mod requests;
pub mod submit;
#[cfg(test)]
mod tests;

use std::future::Future;

use kura_runtime::{Common, Daemon};
use proto::consumers::{MINATO_COMPLETIONS, MINATO_REQUESTS};
use proto::doorbell::{SessionComplete, SessionCreate, WorkerComplete, WorkerDispatch};
use requests::{Rules, accept_next_request, decide_next_completion};
use serde::{Deserialize, Serialize};

/// Minato's configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Settings shared by every daemon.
    pub common: Common,
    /// Orchestration.
    pub minato: MinatoConfig,
    /// Roles, routing and plan bounds (`[roster]`, shared with hashi).
    pub roster: kura_plan::RosterConfig,
}

/// How sessions are driven.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MinatoConfig {
    /// A session ends after this many turns even if no deliverable was marked final.
    pub max_turns: i64,
    /// How many memory hits (facts and decisions from earlier work) go into each context.
    pub memory_hits: usize,
    /// A request's validator may fail its work this many times; then the work ends with
    /// the last verdict.
    pub max_validations: i64,
}

impl Default for MinatoConfig {
    fn default() -> Self {
        MinatoConfig {
            max_turns: 8,
            memory_hits: 5,
            max_validations: 2,
        }
    }
}

/// Runs the daemon until `shutdown` resolves: two consumers (requests, completions), each
/// on its own thread with its own store handle, woken by doorbells and reconnects and
/// polling SQLite regardless.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    config.roster.check()?;
    let mut daemon = Daemon::start("minato", &config.common).await?;
    let poll = config.common.poll_interval();
    let hits = config.minato.memory_hits;
    let max_turns = config.minato.max_turns;
    let max_validations = config.minato.max_validations;

    let (mut store, bus) = (daemon.open_store()?, daemon.bus().clone());
    let roster = config.roster.clone();
    let requests = daemon.consumer(MINATO_REQUESTS, poll, move || {
        let Some(a) = accept_next_request(&mut store, &roster, hits)? else {
            return Ok(false);
        };
        tracing::info!(session_id = %a.session_id, turn_id = %a.turn_id, request = a.request_seq, "request accepted; turn dispatched");
        bus.ring(bus.subjects.worker_dispatch(), &WorkerDispatch { turn_id: a.turn_id });
        Ok(true)
    })?;

    let (mut store, bus) = (daemon.open_store()?, daemon.bus().clone());
    let roster = config.roster.clone();
    // Plan steps are requests too: a completion that starts some wakes the request consumer.
    let steps = requests.clone();
    let completions = daemon.consumer(MINATO_COMPLETIONS, poll, move || {
        let rules = Rules {
            max_turns,
            memory_hits: hits,
            roster: &roster,
            max_validations,
        };
        let Some(d) = decide_next_completion(&mut store, &rules)? else {
            return Ok(false);
        };
        for (session_id, turn_id) in d.next {
            tracing::info!(%session_id, %turn_id, "next turn dispatched");
            bus.ring(bus.subjects.worker_dispatch(), &WorkerDispatch { turn_id });
        }
        for session_id in d.complete {
            tracing::info!(%session_id, "session complete");
            bus.ring(
                bus.subjects.session_complete(),
                &SessionComplete { session_id },
            );
        }
        if d.steps_started > 0 {
            tracing::info!(steps = d.steps_started, "plan steps started");
            steps.wake();
        }
        Ok(true)
    })?;

    let s = daemon.bus().subjects.clone();
    daemon
        .wake_on::<SessionCreate>(s.session_create(), None, vec![requests])
        .await?;
    daemon
        .wake_on::<WorkerComplete>(s.worker_complete(), None, vec![completions])
        .await?;
    daemon.run(shutdown).await
}

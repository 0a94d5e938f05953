//! Per-agent bounds that need memory rather than the database: records per minute (a fixed
//! one-minute window per agent), and a count of refusals for the logs.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::GatewayError;

const WINDOW: Duration = Duration::from_secs(60);

/// Waits (`wait_decision`, `delegation`) one agent may hold at once: each holds a blocking
/// thread for up to 8 s, and kura serve's unit allows 64 tasks in all.
pub const MAX_WAITS: u32 = 4;

/// The agents' windows.
#[derive(Debug)]
pub struct Limits {
    per_minute: u32,
    windows: Mutex<HashMap<String, (Instant, u32, u64)>>,
    waits: Mutex<HashMap<String, u32>>,
}

/// A wait in progress; dropping it frees the agent's slot.
pub struct Waiting<'a> {
    limits: &'a Limits,
    agent: String,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut w = self.limits.waits.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = w.get_mut(&self.agent) {
            *n = n.saturating_sub(1);
        }
    }
}

impl Limits {
    /// `per_minute` records per agent and minute.
    pub fn new(per_minute: u32) -> Self {
        Limits {
            per_minute,
            windows: Mutex::new(HashMap::new()),
            waits: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one record from `agent`'s allowance, or refuses (and counts) it.
    pub fn take(&self, agent: &str) -> Result<(), GatewayError> {
        let mut w = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let e = w.entry(agent.to_owned()).or_insert((now, 0, 0));
        if now.duration_since(e.0) >= WINDOW {
            (e.0, e.1) = (now, 0);
        }
        if e.1 >= self.per_minute {
            e.2 += 1;
            tracing::warn!(
                agent,
                refused_total = e.2,
                "agent over its records per minute"
            );
            return Err(GatewayError::Limited(format!(
                "agent {agent} wrote {} records this minute ([agents] records_per_minute); wait and retry",
                self.per_minute
            )));
        }
        e.1 += 1;
        Ok(())
    }

    /// A slot for one more wait of `agent`, or a refusal (counted) when it holds
    /// [`MAX_WAITS`] already.
    pub fn wait(&self, agent: &str) -> Result<Waiting<'_>, GatewayError> {
        {
            let mut w = self.waits.lock().unwrap_or_else(|p| p.into_inner());
            let n = w.entry(agent.to_owned()).or_insert(0);
            if *n < MAX_WAITS {
                *n += 1;
                return Ok(Waiting {
                    limits: self,
                    agent: agent.to_owned(),
                });
            }
        }
        self.refused(agent);
        Err(GatewayError::Limited(format!(
            "agent {agent} already waits {MAX_WAITS} times at once; wait for one to return"
        )))
    }

    /// Counts a refusal made elsewhere (size, open turns).
    pub fn refused(&self, agent: &str) {
        let mut w = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        let e = w.entry(agent.to_owned()).or_insert((Instant::now(), 0, 0));
        e.2 += 1;
        tracing::warn!(agent, refused_total = e.2, "agent call refused by a bound");
    }

    /// How many of `agent`'s calls were refused by a bound so far.
    pub fn refusals(&self, agent: &str) -> u64 {
        let w = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        w.get(agent).map_or(0, |e| e.2)
    }
}

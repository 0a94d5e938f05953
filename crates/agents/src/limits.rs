//! Per-agent bounds that need memory rather than the database: records per minute (a fixed
//! one-minute window per agent), and a count of refusals for the logs.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::GatewayError;

const WINDOW: Duration = Duration::from_secs(60);

/// The agents' windows.
#[derive(Debug)]
pub struct Limits {
    per_minute: u32,
    windows: Mutex<HashMap<String, (Instant, u32, u64)>>,
}

impl Limits {
    /// `per_minute` records per agent and minute.
    pub fn new(per_minute: u32) -> Self {
        Limits {
            per_minute,
            windows: Mutex::new(HashMap::new()),
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

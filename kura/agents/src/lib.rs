//! Kura for outside agents (Claude Code, Codex, a LangGraph program, anything that speaks
//! MCP or HTTP): each authenticates with its own bearer token ([`registry`]), and every
//! record it makes is authored `agent:<name>` from that token alone. [`ops::Gateway`] holds
//! the operations; [`mcp`] serves them as MCP tools and [`http`] as JSON routes, both calling
//! the same methods. The other end, beside the agent (`kura mcp`, `kura hook`), is the
//! `kura-client` crate.

pub mod guard;
pub mod http;
mod limits;
pub mod mcp;
pub mod ops;
mod reads;
pub mod registry;
mod sessions;
mod ungated;
mod wake;

use std::collections::BTreeMap;
use std::path::PathBuf;

use proto::Effect;
use serde::{Deserialize, Serialize};

pub use ops::Gateway;

/// `[agents]` in serve.toml: off until `registry` names the agents file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentsConfig {
    /// The agents file (`agents.toml` in the keys directory, from `kura keys add-agent`);
    /// unset: no agent may connect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registry: Option<PathBuf>,
    /// The largest record content an agent may write, in bytes of JSON.
    pub max_record_bytes: usize,
    /// Records (of any kind) an agent may write per minute; more are refused and counted.
    pub records_per_minute: u32,
    /// Turns an agent may have open at once.
    pub open_sessions: i64,
    /// MCP sessions one agent may have open at once (each holds memory until it has been
    /// idle two minutes); past it, a new one is refused with -32003.
    pub mcp_sessions_per_agent: usize,
    /// MCP sessions every agent together may have open.
    pub mcp_sessions: usize,
    /// Memory hits packed into a new turn's context.
    pub memory_hits: usize,
    /// The effect class of each outside tool by name (`Read = "read"`, `Bash = "external"`):
    /// this Kura's word, never the agent's. A tool not listed counts as `external`.
    pub tool_effects: BTreeMap<String, Effect>,
    /// Host names the MCP endpoint answers to when the console listens beyond loopback (the
    /// names in the console's certificate); loopback and the listen address always.
    pub hosts: Vec<String>,
}

impl Default for AgentsConfig {
    fn default() -> Self {
        AgentsConfig {
            registry: None,
            max_record_bytes: 256 * 1024,
            records_per_minute: 600,
            open_sessions: 16,
            mcp_sessions_per_agent: 8,
            mcp_sessions: 64,
            memory_hits: 5,
            tool_effects: BTreeMap::new(),
            hosts: Vec::new(),
        }
    }
}

/// Who is calling: the agent its token named, the surface and the client it used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The agent's name.
    pub agent: String,
    /// `mcp` or `http`.
    pub via: &'static str,
    /// The client's own name (MCP `clientInfo`, or the HTTP `User-Agent`), at most 100 bytes.
    pub client: String,
}

impl Caller {
    /// The author of the agent's records.
    pub fn author(&self) -> String {
        format!("agent:{}", self.agent)
    }
}

/// Why an agent's call was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GatewayError {
    /// No token, or one this Kura does not know (any more).
    #[error("no valid agent token: send Authorization: Bearer <token> from `kura keys add-agent`")]
    Unauthorized,
    /// Arguments that do not make sense.
    #[error("{0}")]
    Invalid(String),
    /// Not found, or not this agent's.
    #[error("{0}")]
    NotFound(String),
    /// Over the record size bound.
    #[error("{0}")]
    TooLarge(String),
    /// Over a rate or open-turn bound.
    #[error("{0}")]
    Limited(String),
    /// Kura's own failure.
    #[error("kura: {0}")]
    Internal(String),
}

/// The gateway and the tokens it checks, shared by both surfaces.
pub struct Surface {
    /// The operations.
    pub gateway: Gateway,
    /// The agents' tokens.
    pub registry: registry::Registry,
}

impl Surface {
    /// The caller an `Authorization` header names, or [`GatewayError::Unauthorized`].
    pub fn caller(
        &self,
        authorization: Option<&str>,
        via: &'static str,
        client: &str,
    ) -> Result<Caller, GatewayError> {
        let token = authorization
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty() && t.len() <= 256)
            .ok_or(GatewayError::Unauthorized)?;
        let agent = self
            .registry
            .authenticate(token)
            .ok_or(GatewayError::Unauthorized)?;
        let client: String = client
            .chars()
            .filter(|c| !c.is_control())
            .take(100)
            .collect();
        Ok(Caller { agent, via, client })
    }
}

/// Both surfaces as one router: the MCP endpoint at `/mcp` and the JSON routes under
/// `/agent/v1/`, for `kura serve` to serve beside the console. Every request's `Host` and
/// `Origin` are held to `guard` first.
pub fn router(surface: std::sync::Arc<Surface>, guard: guard::Guard) -> axum::Router {
    http::routes(surface.clone())
        .merge(mcp::routes(surface, &guard))
        .layer(axum::middleware::from_fn_with_state(
            guard,
            guard::check_host,
        ))
}

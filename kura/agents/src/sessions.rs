//! Open MCP sessions, counted per agent and in all: each holds memory in `kura serve` until
//! it has been idle for two minutes (about 55 KiB measured), so one token opening sessions
//! in a loop would otherwise take the daemon past its unit's memory limit — and the console,
//! the signer and every other agent with it. Past a cap, the new session is closed at once
//! and the client is answered with -32003.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::SessionManager as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use crate::Surface;

/// The MCP sessions open, by agent, held to the caps of `[agents]`.
pub struct McpSessions {
    manager: Arc<LocalSessionManager>,
    open: tokio::sync::Mutex<BTreeMap<String, Vec<Arc<str>>>>,
    per_agent: usize,
    total: usize,
}

/// Why a new session was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Over {
    /// This agent has its cap open.
    Agent(usize),
    /// Every agent together has the daemon's cap open.
    All(usize),
}

impl McpSessions {
    /// Sessions of `manager`, at most `per_agent` for one agent and `total` in all.
    pub fn new(manager: Arc<LocalSessionManager>, per_agent: usize, total: usize) -> McpSessions {
        McpSessions {
            manager,
            open: tokio::sync::Mutex::new(BTreeMap::new()),
            per_agent,
            total,
        }
    }

    /// Counts `id`, just opened by `agent`, unless a cap is reached: then it is closed and
    /// the cap named. Sessions the manager has ended (idle, or deleted) are forgotten first.
    async fn admit(&self, agent: &str, id: Arc<str>) -> Result<(), Over> {
        let over = self.count(agent, id.clone()).await;
        if over.is_err() {
            // Closed outside the lock: closing waits for the session's worker to stop.
            let _ = self.manager.close_session(&id).await;
        }
        over
    }

    /// Counts `id` for `agent` unless a cap is reached.
    async fn count(&self, agent: &str, id: Arc<str>) -> Result<(), Over> {
        let mut open = self.open.lock().await;
        if open.values().flatten().any(|s| *s == id) {
            return Ok(());
        }
        for ids in open.values_mut() {
            let mut alive = Vec::with_capacity(ids.len());
            for s in ids.drain(..) {
                if self.manager.has_session(&s).await.unwrap_or(false) {
                    alive.push(s);
                }
            }
            *ids = alive;
        }
        open.retain(|_, ids| !ids.is_empty());
        let all: usize = open.values().map(Vec::len).sum();
        let mine = open.get(agent).map_or(0, Vec::len);
        let over = if mine >= self.per_agent {
            Some(Over::Agent(self.per_agent))
        } else if all >= self.total {
            Some(Over::All(self.total))
        } else {
            None
        };
        if let Some(over) = over {
            return Err(over);
        }
        open.entry(agent.to_owned()).or_default().push(id);
        Ok(())
    }
}

/// What the MCP endpoint's middleware holds: the body bound, the surface (for the caller)
/// and the open sessions.
#[derive(Clone)]
pub(crate) struct McpGate {
    pub(crate) limit: usize,
    pub(crate) surface: Arc<Surface>,
    pub(crate) sessions: Arc<McpSessions>,
}

fn refusal(status: StatusCode, id: serde_json::Value, code: i64, message: String) -> Response {
    let body = proto::agent::RpcErrorAnswer::new(id, code, message);
    (status, axum::Json(body)).into_response()
}

/// Before rmcp sees a POST: its body must be JSON (else JSON-RPC's parse error, -32700, as
/// the spec asks). After: a session it opened is counted, or closed at once past a cap
/// (-32003, HTTP 429).
pub(crate) async fn gate(State(g): State<McpGate>, req: Request, next: Next) -> Response {
    if req.method() != axum::http::Method::POST {
        return next.run(req).await;
    }
    let auth = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let agent = g.surface.caller(auth, "mcp", "").map(|c| c.agent);
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, g.limit).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "the message is too large").into_response();
    };
    let Ok(message) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        let why = "Parse error: the body is not JSON".to_owned();
        return refusal(
            StatusCode::BAD_REQUEST,
            serde_json::Value::Null,
            -32700,
            why,
        );
    };
    let id = message.get("id").cloned().unwrap_or_default();
    let request = Request::from_parts(parts, Body::from(bytes));
    // Served and counted on a task of its own: a client that drops its connection mid-way
    // cannot leave a session open and uncounted.
    match tokio::spawn(counted(g, agent, id, next, request)).await {
        Ok(answer) => answer,
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "the MCP request failed").into_response(),
    }
}

/// Serves `request`, then counts the session it opened (or closes it past a cap).
async fn counted(
    g: McpGate,
    agent: Result<String, crate::GatewayError>,
    id: serde_json::Value,
    next: Next,
    request: Request,
) -> Response {
    let answer = next.run(request).await;
    let Some(opened) = answer
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(Arc::<str>::from)
    else {
        return answer;
    };
    let Ok(agent) = agent else {
        // The token went away meanwhile: no session is left open for nobody.
        let _ = g.sessions.manager.close_session(&opened).await;
        return answer;
    };
    match g.sessions.admit(&agent, opened).await {
        Ok(()) => answer,
        Err(over) => {
            let why = match over {
                Over::Agent(n) => format!(
                    "this agent has {n} MCP sessions open, its cap ([agents] mcp_sessions_per_agent); \
                     end one (DELETE /mcp) or let one idle out (2 minutes)"
                ),
                Over::All(n) => format!(
                    "kura serve has {n} MCP sessions open, its cap ([agents] mcp_sessions); try again later"
                ),
            };
            tracing::warn!(%agent, %why, "MCP session refused");
            refusal(StatusCode::TOO_MANY_REQUESTS, id, -32003, why)
        }
    }
}

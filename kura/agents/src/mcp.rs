//! The operations as MCP tools (rmcp, Streamable HTTP at `/mcp`): each tool authenticates the
//! request's bearer token and calls the same [`crate::Gateway`] method as the HTTP route.
//! Refusals are JSON-RPC errors whose message says what to do.

use std::sync::Arc;

use proto::agent::*;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::{ErrorCode, Implementation, ServerCapabilities, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, tool, tool_handler, tool_router};

use crate::{Caller, Gateway, GatewayError, Surface};

/// JSON-RPC error codes beyond the standard ones (-32000..-32099 is the server's range).
fn rpc_error(e: GatewayError) -> ErrorData {
    let code = match e {
        GatewayError::Unauthorized => ErrorCode(-32001),
        GatewayError::Invalid(_) | GatewayError::NotFound(_) => ErrorCode::INVALID_PARAMS,
        GatewayError::TooLarge(_) | GatewayError::Limited(_) => ErrorCode(-32003),
        GatewayError::Internal(_) => ErrorCode::INTERNAL_ERROR,
    };
    ErrorData::new(
        code,
        e.to_string(),
        serde_json::to_value(RefusalKind { kind: e.kind() }).ok(),
    )
}

/// The data of a refusal: its kind, as the HTTP routes name it.
#[derive(serde::Serialize)]
struct RefusalKind {
    kind: &'static str,
}

/// One MCP session's handler.
#[derive(Clone)]
pub struct KuraTools {
    surface: Arc<Surface>,
    tool_router: ToolRouter<Self>,
}

impl KuraTools {
    fn caller(&self, ctx: &RequestContext<RoleServer>) -> Result<Caller, ErrorData> {
        let auth = ctx
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.headers.get(axum::http::header::AUTHORIZATION))
            .and_then(|v| v.to_str().ok());
        let client = ctx.client_info().map(|i| i.name).unwrap_or_default();
        self.surface.caller(auth, "mcp", &client).map_err(rpc_error)
    }

    /// Runs `op` for the caller on a blocking thread (it writes to SQLite).
    async fn run<Req, Resp>(
        &self,
        ctx: &RequestContext<RoleServer>,
        req: Req,
        op: fn(&Gateway, &Caller, Req) -> Result<Resp, GatewayError>,
    ) -> Result<Json<Resp>, ErrorData>
    where
        Req: Send + 'static,
        Resp: Send + 'static,
    {
        let caller = self.caller(ctx)?;
        let surface = self.surface.clone();
        tokio::task::spawn_blocking(move || op(&surface.gateway, &caller, req))
            .await
            .map_err(|e| rpc_error(GatewayError::Internal(e.to_string())))?
            .map(Json)
            .map_err(rpc_error)
    }
}

#[tool_router]
impl KuraTools {
    fn new(surface: Arc<Surface>) -> Self {
        KuraTools {
            surface,
            tool_router: Self::tool_router() + Self::read_router(),
        }
    }

    #[tool(
        description = "Start a turn of work in Kura: records the instruction (the user's prompt) and the memory found for it in a sealed context ledger, and opens an output ledger for the turn's steps. Returns turn_id, which every other call names."
    )]
    async fn start_session(
        &self,
        Parameters(req): Parameters<StartSession>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Started>, ErrorData> {
        self.run(&ctx, req, Gateway::start_session).await
    }

    #[tool(
        description = "Record a step of the turn: agent.thought, agent.plan, tool.result or sys.error. content is a string or a JSON object."
    )]
    async fn record_step(
        &self,
        Parameters(req): Parameters<RecordStep>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Recorded>, ErrorData> {
        self.run(&ctx, req, Gateway::record_step).await
    }

    #[tool(
        description = "Declare a tool call BEFORE running it. Kura records it and its policy answers: allow (run it), deny (do not), or ask (a person decides: call wait_decision with request_id and run the tool only once it is approved, with edited_arguments if a person changed them)."
    )]
    async fn declare_call(
        &self,
        Parameters(req): Parameters<DeclareCall>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Declared>, ErrorData> {
        self.run(&ctx, req, Gateway::declare_call).await
    }

    #[tool(
        description = "Report a tool call that already ran WITHOUT being declared (your PreToolUse hook was missing, killed or timed out): Kura records it as ungated, with its result, and raises an alarm. Reported once per agent_call_id."
    )]
    async fn report_ungated(
        &self,
        Parameters(req): Parameters<ReportUngated>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Recorded>, ErrorData> {
        self.run(&ctx, req, Gateway::report_ungated).await
    }

    #[tool(
        description = "Ask your people a question (optionally with choices) and wait for their signed answer with wait_decision: it arrives as edited_arguments.answer."
    )]
    async fn ask_person(
        &self,
        Parameters(req): Parameters<AskPerson>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Declared>, ErrorData> {
        self.run(&ctx, req, Gateway::ask_person).await
    }

    #[tool(
        description = "Take back a declared call you will not run (you stopped waiting for a person): an undecided request is denied, so nobody approves it. Answers where it stands."
    )]
    async fn withdraw_call(
        &self,
        Parameters(req): Parameters<WithdrawCall>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Decision>, ErrorData> {
        self.run(&ctx, req, Gateway::withdraw_call).await
    }

    #[tool(
        description = "Wait (up to 8 s a call) for a person's decision on a declared call. state: approved, denied, or still asked/pending (call again)."
    )]
    async fn wait_decision(
        &self,
        Parameters(req): Parameters<WaitDecision>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Decision>, ErrorData> {
        self.run(&ctx, req, Gateway::wait_decision).await
    }

    #[tool(
        description = "End the turn with its deliverable: the output ledger is sealed and Kura extracts memory from it."
    )]
    async fn end_turn(
        &self,
        Parameters(req): Parameters<EndTurn>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Ended>, ErrorData> {
        self.run(&ctx, req, Gateway::end_turn).await
    }

    #[tool(
        description = "Remember a fact or a decision (kind: fact or decision); searchable at once."
    )]
    async fn remember(
        &self,
        Parameters(req): Parameters<Remember>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Recorded>, ErrorData> {
        self.run(&ctx, req, Gateway::remember).await
    }

    #[tool(description = "Search Kura's memory (facts, decisions) for words.")]
    async fn search_memory(
        &self,
        Parameters(req): Parameters<SearchMemory>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Found>, ErrorData> {
        self.run(&ctx, req, Gateway::search).await
    }
}

#[tool_router(router = read_router)]
impl KuraTools {
    #[tool(description = "Read a session's records (newest ledgers first, at most limit).")]
    async fn read_log(
        &self,
        Parameters(req): Parameters<ReadLog>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Records>, ErrorData> {
        self.run(&ctx, req, Gateway::read_log).await
    }

    #[tool(description = "Read one record by id.")]
    async fn show_record(
        &self,
        Parameters(req): Parameters<ShowRecord>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Records>, ErrorData> {
        self.run(&ctx, req, Gateway::show_record).await
    }

    #[tool(
        description = "Verify a session (or one ledger): every record hash, Merkle root, hash chain and seal recomputed."
    )]
    async fn verify(
        &self,
        Parameters(req): Parameters<Verify>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Verified>, ErrorData> {
        self.run(&ctx, req, Gateway::verify).await
    }

    #[tool(
        description = "An inclusion proof that a record is in a sealed ledger; check it offline with `kura verify-proof`."
    )]
    async fn prove(
        &self,
        Parameters(req): Parameters<Prove>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Proof>, ErrorData> {
        self.run(&ctx, req, Gateway::prove).await
    }

    #[tool(description = "What differs between two ledgers.")]
    async fn diff(
        &self,
        Parameters(req): Parameters<Diff>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Diffed>, ErrorData> {
        self.run(&ctx, req, Gateway::diff).await
    }

    #[tool(
        description = "Hand a task to Kura's own agents (run in Kura's sandbox under its policy), optionally waiting up to 8 s for the deliverable; poll with delegation."
    )]
    async fn delegate(
        &self,
        Parameters(req): Parameters<Delegate>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Delegated>, ErrorData> {
        self.run(&ctx, req, Gateway::delegate).await
    }

    #[tool(description = "Where a delegated task stands (waiting up to wait_ms, at most 8 s).")]
    async fn delegation(
        &self,
        Parameters(req): Parameters<Delegation>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<Delegated>, ErrorData> {
        self.run(&ctx, req, Gateway::delegation).await
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for KuraTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("kura", env!("CARGO_PKG_VERSION")))
    }
}

/// The MCP endpoint at `/mcp`, answering the `Host` names and browser `Origin`s of `guard`.
pub fn routes(surface: Arc<Surface>, guard: &crate::guard::Guard) -> axum::Router {
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(guard.hosts.clone())
        .with_allowed_origins(guard.origins.clone());
    let limit = surface.gateway.max_body();
    let surface_for_auth = surface.clone();
    // An idle MCP session ends after two minutes (rmcp's default is five): only a token
    // holder can open one, but each holds memory until it ends.
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(std::time::Duration::from_secs(120));
    let sessions = Arc::new(sessions);
    let agents = &surface.gateway.config;
    let gate = crate::sessions::McpGate {
        limit,
        surface: surface.clone(),
        sessions: Arc::new(crate::sessions::McpSessions::new(
            sessions.clone(),
            agents.mcp_sessions_per_agent,
            agents.mcp_sessions,
        )),
    };
    let service = StreamableHttpService::new(
        move || Ok(KuraTools::new(surface.clone())),
        sessions,
        config,
    );
    // Every request, `initialize` and `tools/list` included, needs a known token: a stranger
    // learns nothing, not even which tools there are. Each tool checks it again (the token
    // may have been removed since the session began).
    axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(
            gate,
            crate::sessions::gate,
        ))
        .layer(axum::middleware::from_fn_with_state(
            surface_for_auth,
            crate::http::require_token,
        ))
}

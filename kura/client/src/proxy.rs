//! `kura mcp-proxy --name NAME -- <server command>`: an MCP server on stdio that an outside
//! agent uses *instead of* the real one. It starts the real server as its own child, lists
//! its tools as its own, and puts every call through Kura's one gate before the server sees
//! it — declared as the agent (its token), ruled by policy, the agent's writ and a person
//! when asked, recorded — then forwards what Kura ruled on and records the result. For the
//! tools behind it the gate is physical: a call Kura refuses never reaches the server.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use proto::agent::{StartSession, Started};
use proto::{CallId, TurnId};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    ContentBlock, Implementation, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ResultType, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ErrorData, Peer, RoleClient, RoleServer, ServerHandler, ServiceError, ServiceExt};
use serde_json::{Map, Value};
use tokio::io::AsyncBufReadExt as _;

use crate::AgentArgs;
use crate::surface::{Kura, Outcome, Ruling};

/// One message's cap on the way back to the agent (a longer line is not passed on).
const MAX_MESSAGE: usize = 16 << 20;

/// Serve an MCP server's tools on stdio, each call gated and recorded by Kura.
#[derive(Debug, clap::Args)]
pub struct McpProxy {
    /// The server's name in Kura: its tools are declared as `mcp__<NAME>__<tool>`, as Claude
    /// Code names an MCP server's tools, so one policy rule covers both ways in.
    #[arg(long, value_parser = server_name)]
    name: String,
    /// How long a call waits for a person before it is refused (seconds).
    #[arg(long, default_value_t = 300)]
    wait: u64,
    /// How long the server may take over one call before it is cut off and recorded as an
    /// error (seconds).
    #[arg(long, default_value_t = 120)]
    call_timeout: u64,
    /// The server's command line, after `--`: `kura mcp-proxy --name fs -- npx -y
    /// @modelcontextprotocol/server-filesystem /srv/project`.
    #[arg(
        last = true,
        value_name = "COMMAND",
        required_unless_present = "upstream"
    )]
    command: Vec<String>,
    /// Instead of a command: the server's Streamable HTTP endpoint (`https://host/mcp`).
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    upstream: Option<String>,
    /// The environment variable holding the bearer token the `--upstream` server wants.
    #[arg(long, value_name = "VAR", requires = "upstream")]
    upstream_token_env: Option<String>,
    #[command(flatten)]
    agent: AgentArgs,
}

/// A server name: 1–64 of `A-Z a-z 0-9 _ -` (it becomes part of each tool's name in policy).
fn server_name(s: &str) -> anyhow::Result<String> {
    let ok = !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    anyhow::ensure!(ok, "a server name is 1-64 letters, digits, _ or -");
    Ok(s.to_owned())
}

/// The proxy as the agent's MCP server sees it.
#[derive(Clone)]
struct Proxy {
    kura: Arc<Kura>,
    turn: TurnId,
    name: String,
    upstream: Peer<RoleClient>,
    tools: Arc<Vec<Tool>>,
    wait: Duration,
    call_timeout: Duration,
}

impl McpProxy {
    /// Proxies until the agent closes stdin or the server ends. `say` writes one whole
    /// message to stdout (the CLI holds stdout: nothing else may write there).
    pub fn run(self, mut say: impl FnMut(&str) -> std::io::Result<()>) -> anyhow::Result<()> {
        let kura = Arc::new(Kura::new(&self.agent)?);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let (out, answers) = std::sync::mpsc::channel::<String>();
        let proxied = std::thread::spawn(move || {
            let done = rt.block_on(self.serve(kura, out));
            // stdin's reader is a blocking thread: do not wait for it.
            rt.shutdown_timeout(Duration::from_millis(100));
            done
        });
        for line in answers {
            say(&line)?;
        }
        proxied
            .join()
            .map_err(|_| anyhow::anyhow!("the proxy's thread panicked"))?
    }

    async fn serve(
        self,
        kura: Arc<Kura>,
        out: std::sync::mpsc::Sender<String>,
    ) -> anyhow::Result<()> {
        let upstream = tokio::time::timeout(self.startup(), self.start_upstream())
            .await
            .map_err(|_| self.slow("start an MCP session"))??;
        let tools = tokio::time::timeout(self.startup(), upstream.list_all_tools())
            .await
            .map_err(|_| self.slow("list its tools"))?
            .with_context(|| format!("cannot list the tools of {}", self.server()))?;
        let start = StartSession {
            instruction: format!(
                "(an agent's calls to the MCP server {} through Kura)",
                self.name
            ),
            label: Some(format!("mcp-proxy: {}", self.name)),
            session_id: None,
            from_ledger: None,
        };
        let started: Started = kura.call("start_session", &start).await?;
        let proxy = Proxy {
            kura: kura.clone(),
            turn: started.turn_id,
            name: self.name.clone(),
            upstream: upstream.peer().clone(),
            tools: Arc::new(tools),
            wait: Duration::from_secs(self.wait),
            call_timeout: Duration::from_secs(self.call_timeout),
        };
        // rmcp writes into a pipe; its lines go to the thread that holds stdout.
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (_, write) = tokio::io::split(ours);
        let pump = tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(theirs).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if line.len() <= MAX_MESSAGE && out.send(line).is_err() {
                    break;
                }
            }
        });
        let served = proxy.serve((tokio::io::stdin(), write)).await;
        let why = match served {
            Ok(running) => tokio::select! {
                q = running.waiting() => format!("the agent closed the connection ({q:?})"),
                q = wait_ended(&upstream) => format!("the MCP server {} ended ({q})", self.name),
            },
            Err(e) => format!("the agent did not start an MCP session: {e}"),
        };
        let _ = kura.end(started.turn_id, &why).await;
        let _ = upstream.cancel().await;
        pump.abort();
        Ok(())
    }

    /// Connects to the server: over Streamable HTTP when `--upstream` names it, else as a
    /// child speaking MCP on its stdin and stdout (its stderr is the proxy's: the agent's
    /// log), killed when the proxy ends.
    async fn start_upstream(&self) -> anyhow::Result<RunningService<RoleClient, ClientConfig>> {
        let me = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("kura-mcp-proxy", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE);
        if let Some(url) = &self.upstream {
            return self.connect_http(me, url).await;
        }
        let (program, args) = self
            .command
            .split_first()
            .context("name the MCP server's command after --")?;
        let mut command = tokio::process::Command::new(program);
        command.args(args);
        // The agent's Kura token is the proxy's, never the server's: with it a server could
        // record and end the agent's turns itself.
        for var in ["KURA_AGENT_TOKEN", "KURA_AGENT_TOKEN_FILE"] {
            command.env_remove(var);
        }
        let mut child = command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            // Its own process group, so what it starts (npx's node) ends with it.
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start the MCP server {program:?}"))?;
        let group = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(rustix::process::Pid::from_raw);
        let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
            anyhow::bail!("the MCP server {program:?} has no stdin or stdout");
        };
        // Its whole group is killed when the proxy ends (the guard lives as long as the
        // runtime's tasks); reaped by tokio.
        tokio::spawn(async move {
            let _group = GroupGuard(group);
            let _ = child.wait().await;
        });
        me.serve((stdout, stdin))
            .await
            .with_context(|| format!("the MCP server {program:?} did not start an MCP session"))
    }
}

/// Kills a process group when dropped (the proxy's runtime ends: the server and all it
/// started go with it).
struct GroupGuard(Option<rustix::process::Pid>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(g) = self.0 {
            let _ = rustix::process::kill_process_group(g, rustix::process::Signal::KILL);
        }
    }
}

impl McpProxy {
    /// How long the server may take to start and to list its tools.
    fn startup(&self) -> Duration {
        Duration::from_secs(self.call_timeout.max(1))
    }

    /// The server, as an error names it.
    fn server(&self) -> String {
        match &self.upstream {
            Some(url) => format!("the MCP server at {url}"),
            None => format!("the MCP server {:?}", self.command.join(" ")),
        }
    }

    /// A server too slow at start-up, as an error says it.
    fn slow(&self, what: &str) -> anyhow::Error {
        anyhow::anyhow!(
            "{} did not {what} within {} s (--call-timeout); check that it speaks MCP on stdio",
            self.server(),
            self.call_timeout
        )
    }

    /// The `--upstream` server over Streamable HTTP, with its token when one is named.
    async fn connect_http(
        &self,
        me: ClientConfig,
        url: &str,
    ) -> anyhow::Result<RunningService<RoleClient, ClientConfig>> {
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
        if let Some(var) = &self.upstream_token_env {
            let token = std::env::var(var)
                .with_context(|| format!("--upstream-token-env names {var}, which is not set"))?;
            config = config.auth_header(token);
        }
        // rmcp's HTTP client brings no TLS provider of its own: ring, as Kura's others use.
        let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
        let transport = StreamableHttpClientTransport::from_config(config);
        me.serve(transport)
            .await
            .with_context(|| format!("the MCP server at {url} did not start an MCP session"))
    }
}

/// Why the upstream's session ended.
async fn wait_ended(upstream: &RunningService<RoleClient, ClientConfig>) -> String {
    while !upstream.peer().is_transport_closed() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    "its connection closed".to_owned()
}

impl Proxy {
    /// Forwards what Kura ruled on, bounded in time; the result as the agent gets it.
    async fn forward(&self, tool: &str, arguments: Map<String, Value>) -> Forwarded {
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = Some(arguments);
        match tokio::time::timeout(self.call_timeout, self.upstream.call_tool(params)).await {
            Ok(Ok(r)) => Forwarded::Answered(r),
            Ok(Err(ServiceError::McpError(e))) => {
                Forwarded::Failed(format!("the server refused the call: {}", e.message))
            }
            Ok(Err(e)) => Forwarded::Failed(format!("the server failed: {e}")),
            Err(_) => Forwarded::Failed(format!(
                "the server did not answer within {} s; the call was cut off",
                self.call_timeout.as_secs()
            )),
        }
    }

    /// Records the outcome as the call's `tool.result` (a failure to record is the agent's
    /// to know, not a reason to withhold the result).
    async fn record(&self, call_id: &CallId, outcome: &Forwarded) {
        let recorded = match outcome {
            Forwarded::Answered(r) if r.is_error == Some(true) => Outcome::Error(text_of(r)),
            Forwarded::Answered(r) => {
                Outcome::Success(serde_json::to_value(r).unwrap_or(Value::Null))
            }
            Forwarded::Failed(why) => Outcome::Error(why.clone()),
        };
        if let Err(e) = self
            .kura
            .record_result(self.turn, Some(call_id), recorded)
            .await
        {
            tracing::warn!(error = %e, "the call's result could not be recorded in Kura");
        }
    }
}

/// What the server made of a forwarded call.
enum Forwarded {
    /// Its answer (a tool error among them).
    Answered(CallToolResult),
    /// No answer: it failed, refused the call or was cut off; why.
    Failed(String),
}

/// The text blocks of a tool's result, joined.
fn text_of(r: &CallToolResult) -> String {
    let texts: Vec<&str> = r
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect();
    if texts.is_empty() {
        "the tool failed".to_owned()
    } else {
        texts.join("\n")
    }
}

/// A tool error the agent reads.
fn refused(why: String) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(why)]).into()
}

impl ServerHandler for Proxy {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "kura-mcp-proxy",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(format!(
                "The tools of the MCP server {}, each call ruled on and recorded by Kura first.",
                self.name
            ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if !self.tools.iter().any(|t| t.name == request.name) {
            let why = format!(
                "the MCP server {} has no tool {:?}",
                self.name, request.name
            );
            return Err(ErrorData::invalid_params(why, None));
        }
        let tool = request.name.to_string();
        let asked = request.arguments.clone().unwrap_or_default();
        let declared_as = format!("mcp__{}__{tool}", self.name);
        let gate = tokio::select! {
            g = self.kura.gate(self.turn, &declared_as, asked.clone(), self.wait) => g,
            _ = context.ct.cancelled() => return Err(ErrorData::internal_error("cancelled", None)),
        };
        // Kura not reachable, or the declaration refused: the call does not run.
        let gate = match gate {
            Ok(g) => g,
            Err(e) => {
                return Ok(refused(format!(
                    "Kura could not rule on {tool} ({e:#}); it was not run"
                )));
            }
        };
        let call_id = gate.declared.call_id.clone();
        let Some(arguments) = gate.to_run(&asked) else {
            let why = match gate.ruling {
                Ruling::Refused(why) => why,
                Ruling::Run { .. } => format!("{tool} was not run"),
            };
            self.record(&call_id, &Forwarded::Failed(why.clone())).await;
            return Ok(refused(why));
        };
        let outcome = tokio::select! {
            o = self.forward(&tool, arguments) => o,
            _ = context.ct.cancelled() => Forwarded::Failed("the agent cancelled the call".to_owned()),
        };
        self.record(&call_id, &outcome).await;
        match outcome {
            Forwarded::Answered(mut r) => {
                // A client on the 2026-07-28 revision requires it; a legacy server sends none.
                r.result_type.get_or_insert(ResultType::COMPLETE);
                Ok(r.into())
            }
            Forwarded::Failed(why) => Ok(refused(why)),
        }
    }
}

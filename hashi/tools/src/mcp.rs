//! MCP servers as hashi's tools. `[[tools.mcp]]` names a server: a command, run inside the
//! tool sandbox like `shell.run` (the session's workspace, no network unless `tools.network`
//! grants `<name>.*`, rlimits), or a Streamable HTTP URL, reached only when a network rule
//! grants it. Its tools are offered as `<name>.<tool>` with the schemas the server gives, and
//! each call goes through the one gate like a built-in's, with the effect class config gives
//! it (`external` when it names none). A server is started per session on its first call and
//! killed when the session's turn ends; one that crashes, hangs or floods is a recorded error,
//! and the next call starts it afresh.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
    ProtocolVersion,
};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceError, ServiceExt};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::quota::Guard;
use super::{Effect, Tool, ToolError, Workspace};
use crate::sandbox::{self, Limits, SandboxMode, SandboxState};

/// One `[[tools.mcp]]` server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// Its name: 1–32 of `a-z 0-9 _ -`; its tools are `<name>.<tool>`.
    pub name: String,
    /// The command that serves MCP on its stdin and stdout (run in the sandbox).
    #[serde(default)]
    pub command: Vec<String>,
    /// Instead of a command: its Streamable HTTP endpoint (needs a `tools.network` rule).
    #[serde(default)]
    pub url: Option<String>,
    /// The environment variable holding the bearer token the `url` server wants.
    #[serde(default)]
    pub secret_env: Option<String>,
    /// Each tool's effect class, by the name the server gives it; unnamed: `external`.
    #[serde(default)]
    pub effects: BTreeMap<String, Effect>,
    /// Extra paths its command may read (its interpreter, its packages).
    #[serde(default)]
    pub read_only: Vec<String>,
    /// Environment its command gets beside the sandbox's own (`PATH`, `HOME` = the
    /// workspace, `KURA_SESSION_ID`); nothing else of hashi's environment reaches it.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// How long one call may take before it is cut off (and the server stopped).
    #[serde(default = "default_call_timeout_ms")]
    pub call_timeout_ms: u64,
}

fn default_call_timeout_ms() -> u64 {
    60_000
}

/// How a server's command is confined: the sandbox of every tool child.
#[derive(Clone)]
pub struct Confinement {
    /// The `hashi` binary, re-executed as `hashi sandbox-exec`.
    pub helper: PathBuf,
    /// Landlock or off.
    pub mode: SandboxMode,
    /// What the probe found.
    pub state: SandboxState,
    /// Paths every tool child may read, and write.
    pub read_only: Vec<PathBuf>,
    /// Paths every tool child may write.
    pub read_write: Vec<PathBuf>,
    /// rlimits.
    pub limits: Limits,
}

/// A running session with a server: the MCP client, and the process group of its command
/// (none for a server reached by URL), killed whole when the session is dropped — a server
/// that hangs or ignores the end of its stdin does not outlive its turn.
struct Session {
    service: RunningService<RoleClient, ClientConfig>,
    group: Option<rustix::process::Pid>,
}

impl Drop for Session {
    fn drop(&mut self) {
        kill(self.group);
    }
}

/// Kills a process group (ESRCH: everything already gone).
fn kill(group: Option<rustix::process::Pid>) {
    if let Some(g) = group {
        let _ = rustix::process::kill_process_group(g, rustix::process::Signal::KILL);
    }
}

/// One server: how to reach it, and its running sessions (one per Kura session).
pub struct Server {
    config: McpServerConfig,
    network: bool,
    confinement: Confinement,
    rt: tokio::runtime::Handle,
    running: Mutex<HashMap<String, Arc<Session>>>,
}

/// A tool of a server, as hashi offers it.
pub struct McpTool {
    server: Arc<Server>,
    /// `<server>.<tool>`.
    name: String,
    /// The name the server gives it.
    remote: String,
    description: String,
    schema: Value,
    effect: Effect,
}

/// A server name: 1–32 of `a-z 0-9 _ -`.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
        && !RESERVED.contains(&name)
}

/// Names a server may not take: its tools would pass for hashi's own (`fs.*` in
/// `tools.allow`, a writ or a rule would cover a third party's).
const RESERVED: &[&str] = &["fs", "shell", "kura", "person"];

/// Most tools one server offers, and the most of its description and schema kept: a
/// server's listing is untrusted input bound for every prompt.
const MAX_TOOLS: usize = 256;
const MAX_DESCRIPTION: usize = 2048;
const MAX_SCHEMA_BYTES: usize = 64 * 1024;

/// A tool name a model's wire takes as it is: 1–64 of `A-Z a-z 0-9 _ -`.
fn valid_tool(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl Server {
    /// The server `config` names, under `confinement`; `network` when a `tools.network`
    /// rule grants its tools.
    pub fn new(
        config: McpServerConfig,
        network: bool,
        confinement: Confinement,
        rt: tokio::runtime::Handle,
    ) -> Result<Arc<Server>, ToolError> {
        if !valid_name(&config.name) {
            return Err(ToolError::Arguments(format!(
                "[[tools.mcp]] name {:?}: 1-32 of a-z, 0-9, _ or -, and not fs, shell, kura or person (hashi's own)",
                config.name
            )));
        }
        match (&config.url, config.command.is_empty()) {
            (Some(_), true) if !network => Err(ToolError::Refused(format!(
                "[[tools.mcp]] {}: a server reached over the network needs a rule: tools.network = [\"{}.*\"]",
                config.name, config.name
            ))),
            (Some(_), true) | (None, false) => Ok(Arc::new(Server {
                config,
                network,
                confinement,
                rt,
                running: Mutex::new(HashMap::new()),
            })),
            _ => Err(ToolError::Arguments(format!(
                "[[tools.mcp]] {}: give a command or a url, one of them",
                config.name
            ))),
        }
    }

    /// Its tools, listed by starting it once in `ws` (then stopped).
    pub fn tools(self: &Arc<Self>, ws: &Workspace) -> Result<Vec<McpTool>, ToolError> {
        let session = self.start(ws)?;
        let listed = self.rt.block_on(async {
            tokio::time::timeout(self.timeout(), session.service.list_all_tools()).await
        });
        drop(session);
        let tools = match listed {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => return Err(self.failed(format!("listing its tools failed: {e}"))),
            Err(_) => return Err(self.failed("it did not list its tools in time".into())),
        };
        let (mut kept, mut seen) = (Vec::new(), std::collections::HashSet::new());
        for t in tools {
            if !valid_tool(&t.name) || !seen.insert(t.name.to_string()) || kept.len() >= MAX_TOOLS {
                tracing::warn!(server = %self.config.name, tool = %proto::text::excerpt(&t.name, 80), "MCP tool left out: a name of 1-64 letters, digits, _ or -, listed once, at most 256 a server");
                continue;
            }
            if serde_json::to_string(&t.input_schema).map_or(true, |j| j.len() > MAX_SCHEMA_BYTES) {
                tracing::warn!(server = %self.config.name, tool = %t.name, "MCP tool left out: its schema is over 64 KiB");
                continue;
            }
            kept.push(t);
        }
        Ok(kept
            .into_iter()
            .map(|t| McpTool {
                server: self.clone(),
                name: format!("{}.{}", self.config.name, t.name),
                effect: self
                    .config
                    .effects
                    .get(t.name.as_ref())
                    .copied()
                    .unwrap_or(Effect::External),
                remote: t.name.to_string(),
                description: t
                    .description
                    .map(|d| proto::text::excerpt(&d, MAX_DESCRIPTION))
                    .unwrap_or_default(),
                schema: Value::Object((*t.input_schema).clone()),
            })
            .collect())
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(self.config.call_timeout_ms.max(1))
    }

    fn failed(&self, why: String) -> ToolError {
        ToolError::Failed(format!("the MCP server {}: {why}", self.config.name))
    }

    /// A fresh session with the server: its command started in the sandbox in `ws`, or its
    /// URL reached.
    fn start(&self, ws: &Workspace) -> Result<Session, ToolError> {
        let me = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("kura-hashi", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE);
        if let Some(url) = &self.config.url {
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.clone());
            if let Some(var) = &self.config.secret_env {
                let token = std::env::var(var)
                    .map_err(|_| self.failed(format!("its secret_env {var} is not set")))?;
                config = config.auth_header(token);
            }
            let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
            // The transport starts a task of its own: on hashi's runtime, whatever thread asks.
            let transport = {
                let _on = self.rt.enter();
                StreamableHttpClientTransport::from_config(config)
            };
            let service = self
                .rt
                .block_on(async { tokio::time::timeout(self.timeout(), me.serve(transport)).await })
                .map_err(|_| self.failed("it did not answer in time".into()))?
                .map_err(|e| self.failed(format!("no MCP session: {e}")))?;
            return Ok(Session {
                service,
                group: None,
            });
        }
        if let SandboxState::Unavailable(why) = &self.confinement.state {
            return Err(ToolError::Refused(format!(
                "the MCP server {} is refused: the tool sandbox is unavailable on this host ({why})",
                self.config.name
            )));
        }
        let c = &self.confinement;
        let mut read_only = c.read_only.clone();
        read_only.extend(self.config.read_only.iter().map(PathBuf::from));
        let cmd = sandbox::command(
            &c.helper,
            c.mode,
            ws.root(),
            (&read_only, &c.read_write),
            self.network,
            c.limits,
            &self.config.command,
        );
        let mut cmd = tokio::process::Command::from(cmd);
        cmd.current_dir(ws.root())
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", ws.root())
            .env("TMPDIR", ws.root())
            .env("LANG", "C.UTF-8")
            .env("KURA_SESSION_ID", ws.session())
            .envs(&self.config.env)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        self.rt.block_on(async {
            let mut child = cmd
                .spawn()
                .map_err(|e| self.failed(format!("cannot start {:?}: {e}", self.config.command)))?;
            // The sandbox starts it in a process group of its own, named by its id.
            let group = child
                .id()
                .and_then(|id| i32::try_from(id).ok())
                .and_then(rustix::process::Pid::from_raw);
            let pipes = (child.stdout.take(), child.stdin.take());
            // Killed with its group when the session ends; reaped here.
            tokio::spawn(async move {
                let _ = child.wait().await;
            });
            let (Some(out), Some(inp)) = pipes else {
                kill(group);
                return Err(self.failed("no stdin or stdout".into()));
            };
            match tokio::time::timeout(self.timeout(), me.serve((out, inp))).await {
                Ok(Ok(service)) => Ok(Session { service, group }),
                Ok(Err(e)) => {
                    kill(group);
                    Err(self.failed(format!("no MCP session: {e}")))
                }
                Err(_) => {
                    kill(group);
                    Err(self.failed("it did not start an MCP session in time".into()))
                }
            }
        })
    }

    /// The session's running server, started on first use.
    fn session(&self, ws: &Workspace) -> Result<Arc<Session>, ToolError> {
        let key = ws.session().to_owned();
        if let Some(s) = self
            .lock()
            .get(&key)
            .filter(|s| !s.service.peer().is_transport_closed())
        {
            return Ok(s.clone());
        }
        let s = Arc::new(self.start(ws)?);
        self.lock().insert(key, s.clone());
        Ok(s)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stops the session's server (its turn ended, or it failed): dropped by its last
    /// holder, its process group is killed.
    pub fn stop(&self, session: &str) {
        drop(self.lock().remove(session));
    }

    /// Stops `running` if it is still the session's server (a newer one started meanwhile
    /// by another call is left alone).
    fn stop_this(&self, session: &str, running: &Arc<Session>) {
        let mut map = self.lock();
        if map.get(session).is_some_and(|s| Arc::ptr_eq(s, running)) {
            drop(map.remove(session));
        }
    }

    /// Calls `tool` with `args` in the session of `ws`; a failure stops the server so the
    /// next call starts it afresh.
    fn call(
        &self,
        ws: &Workspace,
        tool: &str,
        args: &Map<String, Value>,
    ) -> Result<Value, ToolError> {
        let session = self.session(ws)?;
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = Some(args.clone());
        let answered = self.rt.block_on(async {
            tokio::time::timeout(self.timeout(), session.service.peer().call_tool(params)).await
        });
        let outcome = match answered {
            Ok(Ok(r)) => Ok(r),
            // The server is well; the call was wrong (a model's mistake): it keeps running.
            Ok(Err(ServiceError::McpError(e))) => {
                return Err(self.failed(format!("it refused the call: {}", e.message)));
            }
            Ok(Err(e)) => Err(self.failed(format!(
                "it failed ({e}); it is started afresh on the next call"
            ))),
            Err(_) => Err(self.failed(format!(
                "no answer within {} ms: the call was cut off and the server stopped",
                self.config.call_timeout_ms
            ))),
        };
        if outcome.is_err() {
            self.stop_this(ws.session(), &session);
        }
        outcome.and_then(result_value)
    }
}

/// A tool's answer as the `tool.result` records it: its structured content when it gave
/// some, else its content blocks; a tool error is the call's failure, in its words.
fn result_value(r: CallToolResult) -> Result<Value, ToolError> {
    if r.is_error == Some(true) {
        let text: Vec<&str> = r
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
            .collect();
        return Err(ToolError::Failed(text.join("\n")));
    }
    if let Some(s) = r.structured_content {
        return Ok(s);
    }
    serde_json::to_value(&r.content).map_err(|e| ToolError::Failed(e.to_string()))
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn effect(&self) -> Effect {
        self.effect
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn parameters(&self) -> Value {
        self.schema.clone()
    }
    fn run(&self, ws: &Workspace, args: &Map<String, Value>) -> Result<Value, ToolError> {
        // The server runs for the whole turn and writes where it likes beneath the
        // workspace: the quota bounds the sum, measured around each call.
        let (guard, _) = Guard::before_run(ws)?;
        let outcome = self.server.call(ws, &self.remote, args);
        if guard.passed(ws) {
            self.server.stop(ws.session());
            return Err(ToolError::Quota(guard.roll_back(ws)));
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Review: a server named `fs` would have its tools pass for hashi's own (`fs.*` in an
    /// allow list, a writ or a rule); a tool name the model's wire cannot carry would fail
    /// every turn shown it.
    #[test]
    fn a_server_may_not_take_a_builtin_name_nor_a_tool_a_name_no_wire_carries() {
        for name in ["fs", "shell", "kura", "person", "", "Git", "a.b", "x/y"] {
            assert!(!valid_name(name), "{name:?} accepted");
        }
        assert!(valid_name("git") && valid_name("mcp-time_2"));
        for tool in ["", "a.b", "a/b", "a b", "ü", &"x".repeat(65)] {
            assert!(!valid_tool(tool), "{tool:?} accepted");
        }
        assert!(valid_tool("git_status") && valid_tool("get-current-time"));
    }
}

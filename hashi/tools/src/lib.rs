//! hashi's tools behind one trait, each with an effect class, plus the static allow/deny
//! policy: the built-ins (`fs.*`, `shell.run`), MCP servers' tools ([`mcp`]), each session's
//! workspace, and the kernel sandbox every tool child runs in ([`sandbox`]).

mod fs;
pub mod mcp;
mod output;
mod person;
mod quota;
pub mod sandbox;
mod shell;
mod workspace;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use output::{excerpt, fit};
pub use workspace::{Workspace, normalize};

use crate::sandbox::{Limits, SandboxMode, SandboxState};

pub use proto::Effect;
use proto::content::PERSON_ASK;

/// Why a tool call did not run, or failed. Its words go into the `tool.result` record as
/// they are, so each kind carries them whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The arguments are missing or malformed.
    #[error("{0}")]
    Arguments(String),
    /// A path with no normal form (absolute, climbing out, empty, NUL).
    #[error("{0}")]
    Path(#[from] kura_policy::path::PathError),
    /// Not allowed: outside the workspace, through a symlink, off the allowlist, without
    /// the sandbox, unknown or denied by policy.
    #[error("{0}")]
    Refused(String),
    /// The workspace quota would be passed (what the call wrote is rolled back).
    #[error("{0}")]
    Quota(String),
    /// The tool ran and failed: I/O, the program, a timeout.
    #[error("{0}")]
    Failed(String),
}

/// A failure of the tool's own, in words (I/O and the like).
impl From<String> for ToolError {
    fn from(message: String) -> Self {
        ToolError::Failed(message)
    }
}

/// A tool an agent can call.
pub trait Tool: Send + Sync {
    /// Its name, e.g. `fs.read`.
    fn name(&self) -> &str;
    /// What running it can do.
    fn effect(&self) -> Effect;
    /// One line for the model.
    fn description(&self) -> &str;
    /// JSON schema of the arguments (for models that call tools).
    fn parameters(&self) -> Value;
    /// Runs it inside the session's workspace. `Err` is the tool's own failure message.
    fn run(&self, ws: &Workspace, args: &Map<String, Value>) -> Result<Value, ToolError>;
}

/// Which tools exist and which may run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ToolsConfig {
    /// Each session gets `<workspace_root>/<session_id>/`; tools cannot reach outside it.
    pub workspace_root: String,
    /// Tool names (or globs like `fs.*`) that may run.
    pub allow: Vec<String>,
    /// Tool names (or globs) that may not run; checked before `allow`.
    pub deny: Vec<String>,
    /// Programs `shell.run` may start (by name as given in `argv[0]`); empty allows none.
    pub shell_allowlist: Vec<String>,
    /// `shell.run` is killed (with everything it started) after this long.
    pub shell_timeout_ms: u64,
    /// `landlock`: tool children run confined (Landlock + seccomp + rlimits) and `shell.run`
    /// is refused on a kernel without Landlock; `off`: unconfined, set only on purpose.
    pub sandbox: SandboxMode,
    /// Tool names (or globs) whose children may open network sockets.
    pub network: Vec<String>,
    /// Extra paths tool children may read (beside /usr, /bin, /lib and the loader files).
    pub sandbox_read_only: Vec<String>,
    /// Extra paths tool children may write (beside their workspace).
    pub sandbox_read_write: Vec<String>,
    /// Bytes a session's workspace may hold (enforced by `fs.write`, and as the children's
    /// largest-file rlimit), in MiB.
    pub workspace_quota_mib: u64,
    /// CPU seconds one tool child may use.
    pub cpu_seconds: u64,
    /// Processes of hashi's user a tool child may raise the count to (RLIMIT_NPROC).
    pub max_processes: u64,
    /// Address space of one tool child, in MiB.
    pub memory_mib: u64,
    /// Calls that cannot be undone (`[[tools.irreversible]] tool = "shell.run"`, `args =
    /// { argv = "*rm *" }`): their effect class is `irreversible`, which a writ's ceiling
    /// must name and policy treats as `external`.
    pub irreversible: Vec<CallPattern>,
    /// MCP servers whose tools are offered as `<name>.<tool>` (`[[tools.mcp]]`).
    pub mcp: Vec<mcp::McpServerConfig>,
}

/// A tool name glob and argument globs, as policy rules match them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallPattern {
    /// Tool name glob.
    pub tool: String,
    /// Argument globs: each named argument (a string, or the JSON text of other values)
    /// must match.
    #[serde(default)]
    pub args: std::collections::BTreeMap<String, String>,
}

impl CallPattern {
    /// Whether a call of `name` with `args` matches.
    pub fn matches(&self, name: &str, args: &Map<String, Value>) -> bool {
        kura_policy::glob(&self.tool, name)
            && self.args.iter().all(|(k, pat)| match args.get(k) {
                Some(Value::String(s)) => kura_policy::glob(pat, s),
                Some(other) => kura_policy::glob(pat, &other.to_string()),
                None => false,
            })
    }
}

impl Default for ToolsConfig {
    fn default() -> Self {
        ToolsConfig {
            workspace_root: "workspaces".into(),
            allow: vec!["fs.*".into(), "shell.run".into()],
            deny: vec![],
            shell_allowlist: vec![
                "ls".into(),
                "cat".into(),
                "wc".into(),
                "echo".into(),
                "date".into(),
            ],
            shell_timeout_ms: 30_000,
            sandbox: SandboxMode::Landlock,
            network: vec![],
            sandbox_read_only: vec![],
            sandbox_read_write: vec![],
            workspace_quota_mib: 64,
            cpu_seconds: 60,
            max_processes: 512,
            memory_mib: 2048,
            irreversible: vec![],
            mcp: vec![],
        }
    }
}

fn glob_match(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

impl ToolsConfig {
    /// The workspace quota in bytes.
    pub fn quota_bytes(&self) -> u64 {
        self.workspace_quota_mib.max(1).saturating_mul(1 << 20)
    }
}

/// The tool set with its policy.
pub struct Toolbox {
    /// Every tool.
    tools: Vec<Box<dyn Tool>>,
    /// The policy and limits.
    config: ToolsConfig,
    /// What sandbox tool children get here.
    state: SandboxState,
    /// The MCP servers whose tools are among `tools`.
    servers: Vec<std::sync::Arc<mcp::Server>>,
}

/// Why a call did not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No such tool.
    Unknown,
    /// Policy says no; the rule that decided.
    Denied(String),
}

impl Toolbox {
    /// The standard tools under `config`; `helper` is the `hashi` binary that confines tool
    /// children (`hashi sandbox-exec`). Probes the sandbox once.
    pub fn new(config: ToolsConfig, helper: PathBuf) -> Toolbox {
        let state = sandbox::probe(&helper, config.sandbox);
        Toolbox::with_state(config, helper, state)
    }

    /// As [`Toolbox::new`], with the sandbox state already known.
    pub fn with_state(config: ToolsConfig, helper: PathBuf, state: SandboxState) -> Toolbox {
        let timeout = std::time::Duration::from_millis(config.shell_timeout_ms.max(1));
        let network = config.network.iter().any(|p| glob_match(p, "shell.run"));
        let tools: Vec<Box<dyn Tool>> = vec![
            Box::new(fs::Read),
            Box::new(fs::List),
            Box::new(fs::Write),
            Box::new(shell::Run {
                allowlist: config.shell_allowlist.clone(),
                timeout,
                helper,
                mode: config.sandbox,
                state: state.clone(),
                read_only: config.sandbox_read_only.iter().map(PathBuf::from).collect(),
                read_write: config
                    .sandbox_read_write
                    .iter()
                    .map(PathBuf::from)
                    .collect(),
                network,
                limits: Limits {
                    cpu_secs: config.cpu_seconds.max(1),
                    file_bytes: config.quota_bytes(),
                    processes: config.max_processes.max(1),
                    address_space: config.memory_mib.max(16).saturating_mul(1 << 20),
                },
            }),
        ];
        let mut tools = tools;
        // A question is offered only where it may be asked: every prompt would carry it.
        if config.allow.iter().any(|p| glob_match(p, PERSON_ASK)) {
            tools.push(Box::new(person::Ask));
        }
        Toolbox {
            tools,
            config,
            state,
            servers: Vec::new(),
        }
    }

    /// Adds the tools of each `[[tools.mcp]]` server, listed by starting it once (in a
    /// workspace of its own); a server that cannot list them is left out, and says why.
    pub fn with_mcp(mut self, helper: PathBuf, rt: tokio::runtime::Handle) -> Toolbox {
        let confinement = mcp::Confinement {
            helper,
            mode: self.config.sandbox,
            state: self.state.clone(),
            read_only: self
                .config
                .sandbox_read_only
                .iter()
                .map(PathBuf::from)
                .collect(),
            read_write: self
                .config
                .sandbox_read_write
                .iter()
                .map(PathBuf::from)
                .collect(),
            limits: self.limits(),
        };
        for c in self.config.mcp.clone() {
            let name = c.name.clone();
            let probe = format!("mcp-{name}");
            let network = self
                .config
                .network
                .iter()
                .any(|p| glob_match(p, &format!("{name}.")));
            tracing::info!(server = %name, "listing the MCP server's tools");
            let listed =
                mcp::Server::new(c, network, confinement.clone(), rt.clone()).and_then(|server| {
                    let tools = server.tools(&self.workspace(&probe)?)?;
                    Ok((server, tools))
                });
            match listed {
                Ok((server, tools)) => self.offer(&name, server, tools),
                Err(e) => tracing::warn!(server = %name, error = %e, "MCP server left out"),
            }
        }
        self
    }

    /// Offers a server's tools: each wire name once (`a.b_c` and `a_b.c` both reach a model
    /// as `a_b_c`, and a call must not go to a server it was not meant for).
    fn offer(&mut self, name: &str, server: std::sync::Arc<mcp::Server>, tools: Vec<mcp::McpTool>) {
        let wire = |n: &str| n.replace('.', "_");
        let taken: std::collections::HashSet<String> =
            self.tools.iter().map(|t| wire(t.name())).collect();
        let (kept, clashing): (Vec<_>, Vec<_>) = tools
            .into_iter()
            .partition(|t| !taken.contains(&wire(t.name())));
        for t in &clashing {
            tracing::warn!(server = %name, tool = %t.name(), "MCP tool left out: its name reaches a model as another tool's");
        }
        let allowed = self
            .config
            .allow
            .iter()
            .any(|p| glob_match(p, &format!("{name}.")));
        if !kept.is_empty() && !allowed {
            tracing::warn!(server = %name, "its tools are offered but may not run: add \"{name}.*\" to [tools] allow");
        }
        tracing::info!(server = %name, tools = kept.len(), "MCP server's tools offered");
        self.tools
            .extend(kept.into_iter().map(|t| Box::new(t) as Box<dyn Tool>));
        self.servers.push(server);
    }

    /// Stops the MCP servers a session's turn started (its turn ended).
    pub fn end_session(&self, session: &str) {
        for s in &self.servers {
            s.stop(session);
        }
    }

    /// The rlimits of one tool child.
    fn limits(&self) -> Limits {
        let c = &self.config;
        Limits {
            cpu_secs: c.cpu_seconds.max(1),
            file_bytes: c.quota_bytes(),
            processes: c.max_processes.max(1),
            address_space: c.memory_mib.max(16).saturating_mul(1 << 20),
        }
    }

    /// The sandbox tool children get ("landlock v7", "off", or why it is unavailable).
    pub fn sandbox_state(&self) -> &SandboxState {
        &self.state
    }

    /// The arguments as the tool will use them: every path in its one normalised spelling,
    /// so a policy rule, the record and the tool all see the same path. A path that cannot
    /// be normalised is left as given (the tool refuses it).
    pub fn normalize_args(&self, arguments: &mut Map<String, Value>) {
        // A path with no normal form is left as given: the gate refuses the call.
        let _ = kura_policy::path::normalize_args(arguments);
    }

    /// Every tool.
    pub fn all(&self) -> impl Iterator<Item = &dyn Tool> {
        self.tools.iter().map(|t| t.as_ref())
    }

    /// Every tool as plain data, for describing them to a model.
    pub fn specs(&self) -> Vec<kura_model::ToolSpec> {
        self.all()
            .map(|t| kura_model::ToolSpec {
                name: t.name().to_owned(),
                description: t.description().to_owned(),
                parameters: t.parameters(),
            })
            .collect()
    }

    /// A call's effect class: its tool's, or `irreversible` when `[[tools.irreversible]]`
    /// matches it; `external` for a tool that does not exist (the most a writ must allow
    /// before the call is refused as unknown).
    pub fn effect_of(&self, name: &str, args: &Map<String, Value>) -> Effect {
        if self
            .config
            .irreversible
            .iter()
            .any(|p| p.matches(name, args))
        {
            return Effect::Irreversible;
        }
        self.get(name).map_or(Effect::External, |t| t.effect())
    }

    /// Looks a tool up by name.
    pub fn get(&self, name: &str) -> Option<&dyn Tool> {
        self.all().find(|t| t.name() == name)
    }

    /// The static policy: deny rules first, then allow rules; anything else is denied.
    pub fn check(&self, name: &str) -> Result<&dyn Tool, Refusal> {
        let tool = self.get(name).ok_or(Refusal::Unknown)?;
        if let Some(rule) = self.config.deny.iter().find(|p| glob_match(p, name)) {
            return Err(Refusal::Denied(format!("deny {rule}")));
        }
        if self.config.allow.iter().any(|p| glob_match(p, name)) {
            Ok(tool)
        } else {
            Err(Refusal::Denied("not in allow".into()))
        }
    }

    /// The workspace of a session (created on first use).
    pub fn workspace(&self, session: &str) -> Result<Workspace, ToolError> {
        Workspace::open(
            Path::new(&self.config.workspace_root),
            session,
            self.config.quota_bytes(),
        )
    }
}

/// A string argument.
pub(crate) fn arg_str<'a>(args: &'a Map<String, Value>, key: &str) -> Result<&'a str, ToolError> {
    args.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::Arguments(format!("argument {key:?} (a string) is required")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_deny_first_then_allow() {
        let tb = Toolbox::with_state(
            ToolsConfig {
                allow: vec!["fs.*".into()],
                deny: vec!["fs.write".into()],
                ..ToolsConfig::default()
            },
            PathBuf::from("hashi"),
            SandboxState::Off,
        );
        assert!(tb.check("fs.read").is_ok());
        assert_eq!(
            tb.check("fs.write").err(),
            Some(Refusal::Denied("deny fs.write".into()))
        );
        assert_eq!(
            tb.check("shell.run").err(),
            Some(Refusal::Denied("not in allow".into()))
        );
        assert_eq!(tb.check("net.fetch").err(), Some(Refusal::Unknown));
        assert_eq!(tb.get("fs.write").map(|t| t.effect()), Some(Effect::Write));
        assert_eq!(
            tb.get("shell.run").map(|t| t.effect()),
            Some(Effect::External)
        );
        assert_eq!(tb.get("fs.list").map(|t| t.effect()), Some(Effect::Read));
    }
}

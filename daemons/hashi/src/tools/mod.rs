//! Tools behind one trait, each with an effect class, plus the static allow/deny policy.

mod fs;
mod shell;
mod workspace;

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use workspace::Workspace;

pub use proto::Effect;

/// A tool an agent can call.
pub trait Tool: Send + Sync {
    /// Its name, e.g. `fs.read`.
    fn name(&self) -> &'static str;
    /// What running it can do.
    fn effect(&self) -> Effect;
    /// One line for the model.
    fn description(&self) -> &'static str;
    /// JSON schema of the arguments (for models that call tools).
    fn parameters(&self) -> Value;
    /// Runs it inside the session's workspace. `Err` is the tool's own failure message.
    fn run(&self, ws: &Workspace, args: &Map<String, Value>) -> Result<Value, String>;
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
    /// `shell.run` is killed after this long.
    pub shell_timeout_ms: u64,
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
        }
    }
}

fn glob_match(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// The tool set with its policy.
pub struct Toolbox {
    /// Every tool.
    tools: Vec<Box<dyn Tool>>,
    /// The policy and limits.
    config: ToolsConfig,
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
    /// The standard tools under `config`.
    pub fn new(config: ToolsConfig) -> Toolbox {
        let timeout = std::time::Duration::from_millis(config.shell_timeout_ms.max(1));
        let tools: Vec<Box<dyn Tool>> = vec![
            Box::new(fs::Read),
            Box::new(fs::List),
            Box::new(fs::Write),
            Box::new(shell::Run {
                allowlist: config.shell_allowlist.clone(),
                timeout,
            }),
        ];
        Toolbox { tools, config }
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
    pub fn workspace(&self, session: &str) -> Result<Workspace, String> {
        Workspace::open(Path::new(&self.config.workspace_root), session)
    }
}

/// A string argument.
pub(crate) fn arg_str<'a>(args: &'a Map<String, Value>, key: &str) -> Result<&'a str, String> {
    args.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("argument {key:?} (a string) is required"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_deny_first_then_allow() {
        let tb = Toolbox::new(ToolsConfig {
            allow: vec!["fs.*".into()],
            deny: vec!["fs.write".into()],
            ..ToolsConfig::default()
        });
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

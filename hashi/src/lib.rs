//! Hashi, the executor: claims turns in SQLite (lease + fencing epoch), runs the agent loop
//! (model provider + tools), writes each step as its own durable record in the turn's
//! output ledger, seals it and rings `evt.worker.complete`.

mod files;
mod replay;
pub mod roles;
pub mod secrets;
mod worker;

use std::future::Future;
use std::sync::Arc;

use kura_model as provider;
use kura_runtime::{Common, Daemon};
use proto::doorbell::WorkerDispatch;
use serde::{Deserialize, Serialize};

pub use files::{Files, FilesConfig};
pub use worker::Worker;
// The tools and their sandbox are a library of hashi's own (`hashi/tools`).
pub use hashi_tools::{self as tools, sandbox};

#[cfg(test)]
mod tests;

/// Hashi's configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Settings shared by every daemon.
    pub common: Common,
    /// The worker loop.
    pub worker: WorkerConfig,
    /// The model.
    pub provider: provider::ProviderConfig,
    /// The tools and their policy.
    pub tools: tools::ToolsConfig,
    /// Who may grant writs.
    pub writs: kura_policy::writ::WritsConfig,
    /// The roles turns run as (`[roster]`, shared with minato).
    pub roster: kura_plan::RosterConfig,
    /// What side effects did to the files, attested (`[files]`).
    pub files: FilesConfig,
}

/// How turns are worked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkerConfig {
    /// Turns this process works on at once (one thread each).
    pub workers: usize,
    /// A claimed turn is taken over by another worker this long after its last renewal.
    pub lease_ms: u64,
    /// A turn stops (with a `sys.error`) once it has made this many tool calls (or the model
    /// has answered this many times).
    pub max_steps: usize,
    /// A turn whose attempts failed this many times (an error, or its worker died) ends
    /// with one short `sys.error` instead of being tried again.
    pub max_attempts: u32,
    /// A failed attempt is retried no sooner than this, doubling with each failure (at most
    /// a minute); fresher turns are claimed first meanwhile.
    pub retry_backoff_ms: u64,
    /// Author id of the records hashi writes.
    pub author: String,
    /// `aegis`: every tool call is approved by aegis first (policy, or people); `off`: only
    /// the static `tools.allow`/`tools.deny` apply.
    pub approvals: Approvals,
    /// How long a worker waits for aegis's allow/deny before parking the turn.
    pub approval_wait_ms: u64,
    /// Environment variables whose values are secrets (credentials passed to tools, say):
    /// replaced by `[secret:NAME]` in everything recorded or logged. The model API key
    /// (`[provider] api_key_env`) always is.
    pub secret_env: Vec<String>,
    /// Model tokens (in + out) one session may spend; 0: no limit but its writ's.
    pub session_tokens: u64,
    /// Money (millionths, by `[provider] prices`) one session may spend; 0: no limit but
    /// its writ's.
    pub session_money_micros: u64,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            workers: 1,
            lease_ms: 30_000,
            max_steps: 32,
            max_attempts: 3,
            retry_backoff_ms: 1000,
            author: "agent:hashi".into(),
            approvals: Approvals::Aegis,
            approval_wait_ms: 3000,
            secret_env: vec![],
            session_tokens: 0,
            session_money_micros: 0,
        }
    }
}

/// Who approves tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Approvals {
    /// aegis rules on every call (policy, or people).
    Aegis,
    /// Only the static `tools.allow`/`tools.deny` apply.
    Off,
}

/// Runs the daemon until `shutdown` resolves.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let provider: Arc<dyn provider::Provider> = Arc::from(provider::build(
        &config.provider,
        tokio::runtime::Handle::current(),
    )?);
    // Tool children are confined by this very binary re-executed as `hashi sandbox-exec`.
    let helper = std::env::current_exe()
        .map_err(|e| anyhow::anyhow!("cannot find hashi's own binary for the tool sandbox: {e}"))?;
    // MCP servers list their tools by being started once: blocking work, off the runtime.
    let (tools_config, rt) = (config.tools.clone(), tokio::runtime::Handle::current());
    let toolbox = Arc::new(
        tokio::task::spawn_blocking(move || {
            tools::Toolbox::new(tools_config, helper.clone()).with_mcp(helper, rt)
        })
        .await?,
    );
    match toolbox.sandbox_state() {
        sandbox::SandboxState::Unavailable(why) => tracing::warn!(
            %why,
            "the tool sandbox is unavailable: shell.run will be refused (tools.sandbox = \"off\" runs tools unconfined)"
        ),
        state => tracing::info!(sandbox = %state, "tool sandbox"),
    }
    let specs: Arc<[provider::ToolSpec]> = toolbox.specs().into();
    let roles = Arc::new(roles::Roles::build(
        &config.provider,
        &config.roster,
        provider.clone(),
        specs.clone(),
        &tokio::runtime::Handle::current(),
    )?);
    let base = roles.get(None)?.clone();
    let secrets = Arc::new(secrets::Secrets::from_env(
        config
            .worker
            .secret_env
            .iter()
            .map(String::as_str)
            .chain(config.provider.api_key_env.as_deref())
            // An MCP server's token, should the server echo it.
            .chain(
                config
                    .tools
                    .mcp
                    .iter()
                    .filter_map(|m| m.secret_env.as_deref()),
            ),
    ));
    tracing::info!(
        secrets = secrets.len(),
        "secrets scrubbed from records and logs"
    );
    let files = Files::open(&config.common.db, &config.files)?.map(Arc::new);
    let mut daemon = Daemon::start("hashi", &config.common).await?;
    daemon.set_detail(format!("sandbox: {}", toolbox.sandbox_state()));
    let n = config.worker.workers.max(1);
    let mut wakers = Vec::new();
    for i in 0..n {
        let owner = if n == 1 {
            daemon.instance().to_owned()
        } else {
            format!("{}/{i}", daemon.instance())
        };
        let mut worker = Worker {
            store: daemon.open_store()?,
            renew_store: Some(daemon.open_store()?),
            owner: owner.clone(),
            config: config.worker.clone(),
            provider: base.provider.clone(),
            tools: toolbox.clone(),
            specs: base.specs.clone(),
            roles: roles.clone(),
            role: base.clone(),
            retries: config.provider.retries,
            bus: daemon.bus().clone(),
            stop: daemon.stop_signal(),
            staged: Vec::new(),
            policy: None,
            issuers: config.writs.issuers.clone().into(),
            writs: Default::default(),
            spent: Vec::new(),
            usage_note: None,
            retries_note: 0,
            mistakes: 0,
            secrets: secrets.clone(),
            files: files.clone(),
            changed: None,
        };
        wakers.push(daemon.consumer(&owner, config.common.poll_interval(), move || worker.step())?);
    }
    // Only hashi joins the `hashi` queue group: one worker process per doorbell.
    let subject = daemon.bus().subjects.worker_dispatch();
    daemon
        .wake_on::<WorkerDispatch>(subject, Some("hashi".into()), wakers)
        .await?;
    tracing::info!(workers = n, provider = %config.provider.kind, "hashi workers started");
    daemon.run(shutdown).await
}

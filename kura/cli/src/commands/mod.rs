//! One file per subcommand (or group of subcommands), each a type — its clap arguments —
//! with a `run` that opens what it needs, does the work and prints the result.
//!
//! | file | commands |
//! |---|---|
//! | `init` | `kura init` |
//! | `session`, `ledger`, `record` | `kura session …`, `kura ledger …`, `kura record add` |
//! | `log`, `diff`, `show` | reading the history |
//! | `verify` | `kura verify` |
//! | `checkpoint` | `kura checkpoint`, `kura log-key …`, `kura prove-consistency` |
//! | `export`, `query`, `search`, `status` | one command each |
//! | `prove` | `kura prove`, `kura verify-proof` |
//! | `keys` | `kura keys …` |
//! | `serve` | `kura serve` (the daemon itself is [`kura_serve::run`]) |
//! | `fleet` | `kura fleet …` (the hub's files are [`kura_serve::fleet::operator`]) |
//! | `writ`, `redact` | `kura writ grant/delegate/revoke/list/show`, `kura redact` |
//! | `bench` | `kura bench`, `kura bench-peer` |
//! | (none) | `kura mcp` and `kura hook` are the outside agent's client, [`kura_serve::client`] |

pub mod agents;
pub mod bench;
pub mod checkpoint;
pub mod diff;
pub mod export;
pub mod fleet;
pub mod init;
pub mod keys;
pub mod ledger;
pub mod log;
pub mod prove;
pub mod query;
pub mod record;
pub mod redact;
pub mod search;
pub mod serve;
pub mod session;
pub mod show;
pub mod status;
pub mod verify;
pub mod workspace;
pub mod writ;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Subcommand;
use kura_serve::client::install::HookCmd;
use kura_store::store::parse_id;
use kura_store::{Store, StoreOptions};
use proto::record::MAX_CONTENT_BYTES;
use serde_json::Value;
use uuid::Uuid;

use crate::output::Out;

/// What every command may use: the output, the global options, the store's place.
pub struct Ctx {
    /// Standard output.
    pub out: Out,
    /// `--json`: print machine-readable JSON instead of text.
    pub json: bool,
    /// The database file, given or default.
    pub db: PathBuf,
    /// The database file only when given (`--db` or `KURA_DB`).
    pub db_given: Option<PathBuf>,
    /// How to open the store (`--synchronous`).
    pub options: StoreOptions,
}

impl Ctx {
    /// Opens the store at `--db`.
    pub fn open_store(&self) -> anyhow::Result<Store> {
        Ok(Store::open(&self.db, &self.options)?)
    }
}

/// The subcommands, each a type in its own file here with its own `run`.
#[derive(Debug, Subcommand)]
pub enum Command {
    Init(init::Init),
    /// Sessions: branches of ledgers.
    #[command(subcommand)]
    Session(session::SessionCmd),
    /// Ledgers: ordered collections of records, sealed into the chain.
    #[command(subcommand)]
    Ledger(ledger::LedgerCmd),
    /// Records: the immutable entries.
    #[command(subcommand)]
    Record(record::RecordCmd),
    Log(log::Log),
    Diff(diff::Diff),
    Show(show::Show),
    Verify(verify::Verify),
    /// The log key that signs checkpoints of the seal log.
    #[command(subcommand)]
    LogKey(checkpoint::LogKeyCmd),
    Checkpoint(checkpoint::Checkpoint),
    ProveConsistency(checkpoint::ProveConsistency),
    Export(export::Export),
    Query(query::Query),
    Search(search::Search),
    Prove(prove::Prove),
    Status(status::Status),
    /// Bus identities: the nkey seeds, `identities.toml`, the local CA and server certificate.
    #[command(subcommand)]
    Keys(keys::KeysCmd),
    Serve(serve::Serve),
    /// A fleet of Pis: the hub, replicas, restore.
    #[command(subcommand)]
    Fleet(fleet::FleetCmd),
    /// Writs: bounded authority people grant, narrow and take back.
    #[command(subcommand)]
    Writ(writ::WritCmd),
    Redact(redact::Redact),
    /// A session's files as its records attest them: a ledger's tree, the workspace's
    /// moves, a file's bytes erased, unreferenced objects collected.
    #[command(subcommand)]
    Workspace(kura_serve::history::workspace_cmd::WorkspaceCmd),
    Mcp(kura_serve::client::relay::Mcp),
    /// Claude Code's hooks: what they run, their set-up and a check of it.
    #[command(subcommand)]
    Hook(HookCmd),
    /// Put Kura in front of an MCP server: serve its tools on stdio, each call gated and
    /// recorded by Kura before the server sees it.
    McpProxy(kura_serve::client::proxy::McpProxy),
    /// The whole stack on this machine: keys, config and database made once, every daemon
    /// under one supervisor, the console on loopback.
    Up(kura_serve::up::Up),
    /// Stop what `kura up` started.
    Down(kura_serve::up::Down),
    Bench(bench::Bench),
    #[command(hide = true)]
    BenchPeer(bench::BenchPeer),
    VerifyProof(prove::VerifyProof),
    Bundle(prove::Bundle),
}

/// How a successful run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Everything fine.
    Ok,
    /// A verification ran and found problems.
    VerifyFailed,
}

impl Outcome {
    /// The process exit code.
    pub fn exit_code(self) -> ExitCode {
        match self {
            Outcome::Ok => ExitCode::SUCCESS,
            Outcome::VerifyFailed => ExitCode::from(1),
        }
    }
}

impl Command {
    /// Hands the command to its type's `run`.
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        match self {
            Command::Init(c) => c.run(ctx),
            Command::Session(c) => c.run(ctx),
            Command::Ledger(c) => c.run(ctx),
            Command::Record(c) => c.run(ctx),
            Command::Log(c) => c.run(ctx),
            Command::Diff(c) => c.run(ctx),
            Command::Show(c) => c.run(ctx),
            Command::Verify(c) => c.run(ctx),
            Command::LogKey(c) => c.run(ctx),
            Command::Checkpoint(c) => c.run(ctx),
            Command::ProveConsistency(c) => c.run(ctx),
            Command::Export(c) => c.run(ctx),
            Command::Query(c) => c.run(ctx),
            Command::Search(c) => c.run(ctx),
            Command::Prove(c) => c.run(ctx),
            Command::Status(c) => c.run(ctx),
            Command::Keys(c) => c.run(ctx),
            Command::Serve(c) => c.run(ctx),
            Command::Fleet(c) => c.run(ctx),
            Command::Writ(c) => c.run(ctx),
            Command::Redact(c) => c.run(ctx),
            Command::Workspace(c) => {
                let (store, objects) = (ctx.open_store()?, workspace::objects(ctx)?);
                let json = ctx.json;
                c.run(&store, &objects, json, |m| ctx.out.message(m))
                    .map(|()| Outcome::Ok)
            }
            Command::Mcp(c) => c.run(|m| ctx.out.message(m)).map(|()| Outcome::Ok),
            Command::Hook(HookCmd::Import(i)) => {
                let mut store = ctx.open_store()?;
                use_sealer(&mut store, i.sealer_key())?;
                i.run(&mut store, |m| ctx.out.message(m))
                    .map(|()| Outcome::Ok)
            }
            Command::Hook(c) => c.run(|m| ctx.out.message(m)).map(|()| Outcome::Ok),
            Command::McpProxy(c) => c.run(|m| ctx.out.message(m)).map(|()| Outcome::Ok),
            Command::Up(c) => c.run(|m| ctx.out.message(m)).map(|()| Outcome::Ok),
            Command::Down(c) => c.run(|m| ctx.out.message(m)).map(|()| Outcome::Ok),
            Command::Bench(c) => c.run(ctx),
            Command::BenchPeer(c) => c.run(ctx),
            Command::VerifyProof(c) => c.run(ctx),
            Command::Bundle(c) => c.run(ctx),
        }
    }
}

/// An id of the kind `T` from the command line (`Uuid` where it may name a record, a
/// ledger or a session).
fn id<T: From<Uuid>>(text: &str) -> anyhow::Result<T> {
    Ok(parse_id(text)?)
}

fn parse_json(text: &str) -> anyhow::Result<Value> {
    serde_json::from_str(text).map_err(|e| anyhow::anyhow!("invalid JSON: {e}"))
}

/// A file's text (`-` for stdin), refused past the record content limit.
fn read_input(path: &Path) -> anyhow::Result<String> {
    let mut buf = Vec::new();
    let limit = MAX_CONTENT_BYTES as u64 + 1;
    if path == Path::new("-") {
        std::io::stdin()
            .take(limit)
            .read_to_end(&mut buf)
            .context("reading stdin")?;
    } else {
        std::fs::File::open(path)
            .with_context(|| format!("cannot read {}", path.display()))?
            .take(limit)
            .read_to_end(&mut buf)
            .with_context(|| format!("cannot read {}", path.display()))?;
    }
    if buf.len() as u64 >= limit {
        bail!(
            "{} is larger than the {MAX_CONTENT_BYTES}-byte content limit",
            path.display()
        );
    }
    String::from_utf8(buf).map_err(|_| anyhow::anyhow!("{} is not UTF-8 text", path.display()))
}

/// The people whose writs and redactions count: `KURA_WRITS__ISSUERS`, else `[writs]
/// issuers` in serve.toml.
fn people() -> anyhow::Result<Vec<kura_work::kura_policy::writ::Issuer>> {
    // The environment over the file, as for every daemon's config.
    #[derive(Default, serde::Serialize, serde::Deserialize)]
    #[serde(default)]
    struct Env {
        writs: kura_work::kura_policy::writ::WritsConfig,
    }
    let (env, _) = kura_serve::runtime::config::load_with_env::<Env>(None, std::env::vars())?;
    if !env.writs.issuers.is_empty() {
        return Ok(env.writs.issuers);
    }
    Ok(kura_serve::anchor::serve_config()?
        .map(|c| c.writs.issuers)
        .unwrap_or_default())
}

/// Seals with the nkey seed at `path`, when given. On an install whose serve config names a
/// keyring, `verify` checks who sealed every ledger: an unsigned seal would exit 0 here and
/// fail there, so it is refused before anything is written.
fn use_sealer(store: &mut Store, path: Option<&Path>) -> anyhow::Result<()> {
    let Some(path) = path else {
        if let Some(ring) = kura_serve::anchor::serve_config()?.and_then(|c| c.serve.keyring) {
            bail!(
                "this install checks who seals ([serve] keyring = {}): give --sealer-key with a \
                 service seed, e.g. /etc/kura/keys/operator.nk",
                ring.display()
            );
        }
        return Ok(());
    };
    let key = kura_serve::runtime::identity::read_seed(path)?;
    store.set_sealer(Some(kura_serve::tlog::sealer::Sealer::new(
        std::sync::Arc::new(key),
    )?));
    Ok(())
}

//! The global options of the `kura` binary, the list of subcommands (each defined beside its
//! `run` in [`crate::commands`]), and how a run ends: its [`Outcome`] and its one-line error.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::commands;

/// Kura: a verifiable record/ledger store for AI agents.
///
/// Every step an agent takes is an immutable, content-addressed record; records are grouped
/// into ledgers that are sealed into a hash chain anyone can verify.
#[derive(Debug, Parser)]
#[command(name = "kura", version, about, propagate_version = true)]
pub struct Args {
    /// The database file. Default: ./kura.db (for `kura serve`: its config's `db`).
    #[arg(long = "db", global = true, env = "KURA_DB")]
    pub db_given: Option<PathBuf>,
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Commit durability: full (fsync every commit, the default), normal or off.
    #[arg(long, global = true, env = "KURA_SYNCHRONOUS", default_value = "full")]
    pub synchronous: String,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

impl Args {
    /// The database file, given or default.
    pub fn db(&self) -> PathBuf {
        self.db_given
            .clone()
            .unwrap_or_else(|| PathBuf::from("kura.db"))
    }
}

/// The subcommands, each a type in [`crate::commands`] with its own `run`.
#[derive(Debug, Subcommand)]
pub enum Command {
    Init(commands::init::Init),
    /// Sessions: branches of ledgers.
    #[command(subcommand)]
    Session(commands::session::SessionCmd),
    /// Ledgers: ordered collections of records, sealed into the chain.
    #[command(subcommand)]
    Ledger(commands::ledger::LedgerCmd),
    /// Records: the immutable entries.
    #[command(subcommand)]
    Record(commands::record::RecordCmd),
    Log(commands::log::Log),
    Diff(commands::diff::Diff),
    Show(commands::show::Show),
    Verify(commands::verify::Verify),
    /// The log key that signs checkpoints of the seal log.
    #[command(subcommand)]
    LogKey(commands::checkpoint::LogKeyCmd),
    Checkpoint(commands::checkpoint::Checkpoint),
    ProveConsistency(commands::checkpoint::ProveConsistency),
    Export(commands::export::Export),
    Query(commands::query::Query),
    Search(commands::search::Search),
    Prove(commands::prove::Prove),
    Status(commands::status::Status),
    /// Bus identities: the nkey seeds, `identities.toml`, the local CA and server certificate.
    #[command(subcommand)]
    Keys(commands::keys::KeysCmd),
    Serve(commands::serve::Serve),
    Bench(commands::bench::Bench),
    #[command(hide = true)]
    BenchPeer(commands::bench::BenchPeer),
    VerifyProof(commands::prove::VerifyProof),
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

/// The error and its causes on one line.
pub fn chain(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !parts.last().is_some_and(|p| p.contains(&text)) {
            parts.push(text);
        }
    }
    parts.join(": ").replace('\n', " ")
}

/// True when the error is only stdout being closed early (e.g. `kura log | head`).
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

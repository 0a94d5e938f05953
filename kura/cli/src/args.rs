//! The global options of the `kura` binary (the subcommands are [`crate::commands`]'s) and
//! how a failed run is printed: one line.

use std::path::PathBuf;

use clap::Parser;

use crate::commands::Command;

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

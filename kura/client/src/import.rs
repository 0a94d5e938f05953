//! `kura hook import claude-code FILE`: a Claude Code session from before Kura watched it
//! (its transcript, `~/.claude/projects/<dir>/<session>.jsonl`) written into the database
//! as a session of its own, every record marked imported with the file's SHA-256.

use std::path::PathBuf;

use anyhow::Context as _;
use sha2::{Digest, Sha256};

use crate::install::Agent;

/// The most of a transcript read (a longer one is refused: split it, or raise this).
const MAX_TRANSCRIPT: u64 = 256 << 20;

/// Import an agent's past session from its transcript, marked imported.
#[derive(Debug, clap::Args)]
pub struct Import {
    /// The agent whose transcript it is.
    #[arg(value_enum)]
    agent: Agent,
    /// The transcript (`.jsonl`).
    file: PathBuf,
    /// The new session's label (default: `imported: <file name>`).
    #[arg(long)]
    label: Option<String>,
    /// Who the records are by.
    #[arg(long, default_value = "agent:claude-code")]
    author: String,
    /// An nkey seed that signs the new ledgers' seals (e.g. /etc/kura/keys/operator.nk):
    /// needed once this database signs its seals.
    #[arg(long)]
    sealer_key: Option<PathBuf>,
}

impl Import {
    /// The seed that signs the new ledgers' seals, if given (the caller sets the store's
    /// sealer, and refuses none on an install that checks who seals).
    pub fn sealer_key(&self) -> Option<&std::path::Path> {
        self.sealer_key.as_deref()
    }

    /// Imports into `store`; says what was written.
    pub fn run(
        self,
        store: &mut kura_store::Store,
        mut say: impl FnMut(&str) -> std::io::Result<()>,
    ) -> anyhow::Result<()> {
        let Agent::ClaudeCode = self.agent;
        let len = std::fs::metadata(&self.file)
            .with_context(|| format!("cannot read {}", self.file.display()))?
            .len();
        anyhow::ensure!(
            len <= MAX_TRANSCRIPT,
            "{} is {len} bytes, more than an import reads ({MAX_TRANSCRIPT})",
            self.file.display()
        );
        let bytes = std::fs::read(&self.file)
            .with_context(|| format!("cannot read {}", self.file.display()))?;
        let source = hex::encode(Sha256::digest(&bytes));
        // The bytes hashed are the bytes imported (a live session's file may grow meanwhile).
        let t = kura_history::transcript::parse(&bytes, false);
        let name = self
            .file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let label = self.label.unwrap_or_else(|| format!("imported: {name}"));
        let done = kura_history::import::claude_code(store, &t, &label, &source, &self.author)?;
        let skipped = match t.unreadable {
            0 => String::new(),
            n => format!("; {n} lines were not JSON and were skipped"),
        };
        say(&format!(
            "imported {} as session {}: {} turns, {} records ({} tool calls, marked imported){skipped}",
            self.file.display(),
            done.session_id,
            done.turns,
            done.records,
            done.calls,
        ))?;
        Ok(())
    }
}

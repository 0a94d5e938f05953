//! `kura export`: a session as a git repository, one commit per sealed ledger.

use std::path::PathBuf;

use clap::ValueEnum;

use super::Outcome;
use super::{Ctx, id};

/// Export a session as a git repository.
#[derive(Debug, clap::Args)]
pub struct Export {
    /// The session id.
    session: String,
    /// Export format.
    #[arg(long, value_enum)]
    format: ExportFormat,
    /// Target directory (created if missing; an earlier export there is updated).
    #[arg(long)]
    out: PathBuf,
}

/// Export formats.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ExportFormat {
    /// A git repository: one commit per sealed ledger.
    Git,
}

impl Export {
    /// Writes (or updates) the repository and says how many commits it holds.
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        let store = ctx.open_store()?;
        let (out, json) = (&mut ctx.out, ctx.json);
        let Export {
            session,
            format: _,
            out: dir,
        } = self;
        let e = crate::export::export_git(&store, id(&session)?, &dir)?;
        if json {
            out.json(&e)?;
        } else {
            out.line(format!(
                "exported {} commits to {} (main = {})",
                e.commits,
                dir.display(),
                e.head_commit
            ))?;
        }
        Ok(Outcome::Ok)
    }
}

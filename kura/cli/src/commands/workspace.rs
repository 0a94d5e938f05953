//! `kura workspace …`, `kura verify --workspace` and the files beside `kura diff` and
//! `kura session reset`: a session's files as its records attest them.

use kura_serve::history::objects::Objects;
use kura_serve::history::workspace::{self as ws, FileDiff};
use kura_store::Store;

use super::{Ctx, Outcome, id};
use crate::output::Out;

/// `kura workspace ...`
#[derive(Debug, clap::Subcommand)]
pub enum WorkspaceCmd {
    /// The files as of a ledger: its recorded tree, each file's blob id.
    Files {
        /// The ledger.
        ledger: String,
    },
    /// Every move of a session's workspace (a reset, a fork, a replay): the trees it left
    /// stay in the object store.
    Log {
        /// The session.
        session: String,
    },
    /// Erase a file's bytes from the object store for good (a secret written to a file), in
    /// every tree of the session that holds them; its blob id stays, so trees still verify.
    Redact {
        /// The session.
        session: String,
        /// The file's path in the workspace.
        path: String,
        /// Why (kept beside the erased id).
        #[arg(long)]
        reason: String,
    },
    /// Put a session's files as of its head into its workspace (or `--root DIR`): on a Pi
    /// restored from the hub, or to look at them elsewhere.
    Restore {
        /// The session.
        session: String,
        /// The directory (default: where its turns recorded them).
        #[arg(long)]
        root: Option<std::path::PathBuf>,
    },
    /// Remove objects no ledger, workspace head or workspace log names (older than an hour).
    Gc,
}

/// The object store beside the database.
pub fn objects(ctx: &Ctx) -> anyhow::Result<Objects> {
    Ok(Objects::open(&Objects::beside(&ctx.db))?)
}

impl WorkspaceCmd {
    /// Runs one `kura workspace` subcommand.
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        let store = ctx.open_store()?;
        let objects = objects(ctx)?;
        let (out, json) = (&mut ctx.out, ctx.json);
        match self {
            WorkspaceCmd::Files { ledger } => {
                let files = ws::files_at(&store, &objects, id(&ledger)?)?;
                if json {
                    out.json(&files)?;
                }
                for (path, blob) in files.iter().filter(|_| !json) {
                    out.line(format!("{blob}  {}", ws::shown(path)))?;
                }
            }
            WorkspaceCmd::Log { session } => {
                let moves = objects.moves(&id::<proto::SessionId>(&session)?.to_string())?;
                if json {
                    out.json(&moves)?;
                }
                for m in moves.iter().filter(|_| !json) {
                    let at = kura_work::kura_policy::writ::format_time(m.at_ms);
                    out.line(format!("{at}  {} -> {}  {}", m.from, m.to, m.why))?;
                }
            }
            WorkspaceCmd::Redact {
                session,
                path,
                reason,
            } => {
                let erased = ws::redact_path(&store, &objects, id(&session)?, &path, &reason)?;
                if erased.is_empty() {
                    anyhow::bail!(
                        "no tree of session {session} holds {path:?} (see `kura workspace files LEDGER`)"
                    );
                }
                out.line(format!(
                    "erased {} version(s) of {path}; their ids stay in the trees",
                    erased.len()
                ))?;
            }
            WorkspaceCmd::Restore { session, root } => {
                let r = ws::checkout(&store, &objects, id(&session)?, root)?;
                if json {
                    out.json(&r)?;
                } else {
                    out.line(r.line())?;
                }
            }
            WorkspaceCmd::Gc => {
                let (n, bytes) =
                    ws::collect(&store, &objects, std::time::Duration::from_secs(3600))?;
                out.line(format!("removed {n} unreferenced objects ({bytes} bytes)"))?;
            }
        }
        Ok(Outcome::Ok)
    }
}

/// `kura verify --workspace SESSION`: every recorded object whole, no drift (exit 1 if not).
pub fn verify(ctx: &mut Ctx, session: &str) -> anyhow::Result<Outcome> {
    let store = ctx.open_store()?;
    let objects = objects(ctx)?;
    let r = ws::verify(&store, &objects, id(session)?)?;
    let out = &mut ctx.out;
    if ctx.json {
        out.json(&r)?;
    }
    for line in r.lines(session).iter().filter(|_| !ctx.json) {
        out.line(line)?;
    }
    Ok(if r.ok() {
        Outcome::Ok
    } else {
        Outcome::VerifyFailed
    })
}

/// The file changes between two ledgers, under `kura diff`'s record changes.
pub fn diff(
    ctx: &Ctx,
    store: &Store,
    a: proto::LedgerId,
    b: proto::LedgerId,
) -> anyhow::Result<Option<FileDiff>> {
    // No object store here (a database copied alone, read-only media): the records only.
    if !Objects::beside(&ctx.db).is_dir() {
        return Ok(None);
    }
    Ok(Some(ws::files_between(
        store,
        &objects(ctx)?,
        a,
        b,
        64 << 10,
    )?))
}

/// Prints a file diff (nothing when neither ledger has a recorded tree).
pub fn print_diff(out: &mut Out, d: Option<&FileDiff>) -> std::io::Result<()> {
    for line in d.map(FileDiff::lines).unwrap_or_default() {
        out.line(line)?;
    }
    Ok(())
}

/// After `kura session reset`: the session's files put back as of `ledger`, said in a line
/// (`Err`: why they were not).
pub fn rewind(
    ctx: &Ctx,
    store: &Store,
    session: proto::SessionId,
    ledger: proto::LedgerId,
) -> anyhow::Result<String> {
    let o = objects(ctx)?;
    let r = ws::rewind(store, &o, session, ledger, &format!("reset to {ledger}"))
        .map_err(|e| anyhow::anyhow!("the files were not put back: {e}"))?;
    Ok(r.said(session, ledger))
}

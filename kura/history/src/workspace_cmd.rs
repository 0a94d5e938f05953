//! `kura workspace …`: a ledger's files, the workspace's moves, a file's bytes erased, a
//! session's files put in place, unreferenced objects collected — the command and its words
//! (the CLI opens the store and prints).

use kura_objects::Objects;
use kura_store::Store;
use kura_store::store::parse_id;
use serde::Serialize;

use crate::workspace as ws;

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
    /// Put a session's files as of its head into its workspace (or `--root DIR`, an empty
    /// directory): on a Pi restored from the hub, or to look at them elsewhere.
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

fn id<T: From<uuid::Uuid>>(text: &str) -> anyhow::Result<T> {
    parse_id(text).map_err(|e| anyhow::anyhow!("{e}"))
}

fn json(v: &impl Serialize) -> anyhow::Result<String> {
    Ok(serde_json::to_string_pretty(v)?)
}

impl WorkspaceCmd {
    /// Runs the subcommand on `store` and `objects`; `say` writes one whole message (JSON
    /// when `as_json`).
    pub fn run(
        self,
        store: &Store,
        objects: &Objects,
        as_json: bool,
        mut say: impl FnMut(&str) -> std::io::Result<()>,
    ) -> anyhow::Result<()> {
        let lines: Vec<String> = match self {
            WorkspaceCmd::Files { ledger } => {
                let files = ws::files_at(store, objects, id(&ledger)?)?;
                match as_json {
                    true => vec![json(&files)?],
                    false => files
                        .iter()
                        .map(|(p, b)| format!("{b}  {}", ws::shown(p)))
                        .collect(),
                }
            }
            WorkspaceCmd::Log { session } => {
                let moves = objects.moves(&id::<proto::SessionId>(&session)?.to_string())?;
                match as_json {
                    true => vec![json(&moves)?],
                    false => moves
                        .iter()
                        .map(|m| {
                            let at = kura_policy::writ::format_time(m.at_ms);
                            format!("{at}  {} -> {}  {}", m.from, m.to, ws::shown(&m.why))
                        })
                        .collect(),
                }
            }
            WorkspaceCmd::Redact {
                session,
                path,
                reason,
            } => {
                let erased = ws::redact_path(store, objects, id(&session)?, &path, &reason)?;
                anyhow::ensure!(
                    !erased.is_empty(),
                    "no tree of session {session} holds {path:?} (see `kura workspace files LEDGER`)"
                );
                vec![format!(
                    "erased {} version(s) of {path}; their ids stay in the trees",
                    erased.len()
                )]
            }
            WorkspaceCmd::Restore { session, root } => {
                let r = ws::checkout(store, objects, id(&session)?, root)?;
                vec![if as_json { json(&r)? } else { r.line() }]
            }
            WorkspaceCmd::Gc => {
                let (n, bytes) = ws::collect(store, objects, std::time::Duration::from_secs(3600))?;
                vec![format!("removed {n} unreferenced objects ({bytes} bytes)")]
            }
        };
        for l in lines {
            say(&l)?;
        }
        Ok(())
    }
}

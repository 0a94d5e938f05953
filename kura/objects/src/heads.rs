//! Where each session's workspace is and which tree Kura last left it in (its head), and a
//! log of every tree it was moved from and to (a reset's earlier files stay reachable), as
//! small files in the object store's directory.

use crate::error::{ObjectsError, Result, io};
use crate::store::Objects;
use proto::workspace::ObjectId;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::PathBuf;

/// A session's workspace as Kura last left it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    /// The workspace directory.
    pub root: PathBuf,
    /// Its tree when Kura last recorded or restored it.
    pub tree: ObjectId,
    /// The ledger that tree was recorded in or restored to, if known.
    #[serde(default)]
    pub ledger: Option<String>,
    /// Bytes this session's snapshots added to the store.
    #[serde(default)]
    pub stored_bytes: u64,
    /// Whether a snapshot left a file unstored because the session's share was spent.
    #[serde(default)]
    pub full: bool,
}

/// One move of a session's workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    /// When (ms since the epoch).
    pub at_ms: i64,
    /// The tree it was in.
    pub from: ObjectId,
    /// The tree it was put in.
    pub to: ObjectId,
    /// Why (`reset to <ledger>`, `fork of <ledger>`, `replay`).
    pub why: String,
}

fn checked(session: &str) -> Result<&str> {
    let ok = !session.is_empty()
        && session.len() <= 128
        && session
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(session)
    } else {
        Err(ObjectsError::Refused(format!(
            "{session:?} is not a session id"
        )))
    }
}

impl Objects {
    fn head_path(&self, session: &str) -> Result<PathBuf> {
        Ok(self
            .dir()
            .join("workspaces")
            .join(format!("{}.json", checked(session)?)))
    }

    /// The session's workspace head, if Kura has recorded one.
    pub fn head(&self, session: &str) -> Result<Option<Head>> {
        let path = self.head_path(session)?;
        match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).map(Some).map_err(|e| {
                ObjectsError::Refused(format!(
                    "{} is not a workspace head ({e}); remove it and the next turn rewrites it",
                    path.display()
                ))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(format!("cannot read {}", path.display()))(e)),
        }
    }

    /// Records the session's workspace head (replaced whole, durably).
    pub fn set_head(&self, session: &str, head: &Head) -> Result<()> {
        let path = self.head_path(session)?;
        let body = serde_json::to_vec(head).map_err(|e| ObjectsError::Refused(e.to_string()))?;
        let mut tmp = tempfile::NamedTempFile::new_in(self.dir().join("tmp"))
            .map_err(io("cannot write a workspace head"))?;
        tmp.write_all(&body)
            .and_then(|()| tmp.as_file().sync_data())
            .map_err(io("cannot write a workspace head"))?;
        tmp.persist(&path)
            .map_err(|e| e.error)
            .map_err(io(format!("cannot write {}", path.display())))?;
        Ok(())
    }

    /// Appends a move to the session's workspace log.
    pub fn log_move(&self, session: &str, entry: &LogEntry) -> Result<()> {
        let path = self.dir().join("logs").join(checked(session)?);
        let mut line =
            serde_json::to_vec(entry).map_err(|e| ObjectsError::Refused(e.to_string()))?;
        line.push(b'\n');
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(&line).and_then(|()| f.sync_data()))
            .map_err(io(format!("cannot append to {}", path.display())))
    }

    /// Every tree a workspace head or a workspace log names (kept by garbage collection:
    /// a reset's earlier files stay reachable).
    pub fn kept_trees(&self) -> Result<Vec<ObjectId>> {
        let mut out = Vec::new();
        for (sub, log) in [("workspaces", false), ("logs", true)] {
            let dir = self.dir().join(sub);
            let list =
                std::fs::read_dir(&dir).map_err(io(format!("cannot read {}", dir.display())))?;
            for f in list.flatten() {
                let name = f.file_name().to_string_lossy().into_owned();
                let session = name.trim_end_matches(".json");
                if log {
                    for m in self.moves(session)? {
                        out.extend([m.from, m.to]);
                    }
                } else if let Ok(Some(h)) = self.head(session) {
                    out.push(h.tree);
                }
            }
        }
        Ok(out)
    }

    /// The session's workspace log, oldest first (lines that do not parse are skipped).
    pub fn moves(&self, session: &str) -> Result<Vec<LogEntry>> {
        let path = self.dir().join("logs").join(checked(session)?);
        match std::fs::read_to_string(&path) {
            Ok(t) => Ok(t
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(io(format!("cannot read {}", path.display()))(e)),
        }
    }
}

/// A session's workspace held by one of Kura's processes (released when dropped): hashi
/// from a side effect's tree before to its tree after, a reset or restore while it moves the
/// files — so no two of them record or move the same files at once.
#[derive(Debug)]
pub struct SessionLock {
    _file: std::fs::File,
}

impl Objects {
    /// Waits for, then holds, the session's workspace (an advisory lock on
    /// `workspaces/<session>.lock`, shared by every process using this store).
    pub fn lock(&self, session: &str) -> Result<SessionLock> {
        let path = self
            .dir()
            .join("workspaces")
            .join(format!("{}.lock", checked(session)?));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io(format!("cannot open {}", path.display())))?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| io(format!("cannot lock {}", path.display()))(e.into()))?;
        Ok(SessionLock { _file: file })
    }
}

//! Each side effect's attested change to its session's files: the workspace's tree before
//! the call and after, its objects made durable in the object store before the result that
//! names them; a session that starts from another ledger's files (a fork, a replay, another
//! Pi) gets them; a replay's served result moves the files as the recorded call did.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use kura_history::workspace::tree_at;
use kura_objects::{Head, Index, Limits, LogEntry, Objects};
use kura_store::Store;
use proto::LedgerId;
use proto::workspace::{ObjectId, WorkspaceChange};
use serde::{Deserialize, Serialize};

use crate::tools::{ToolError, Workspace};

/// `[files]`: recording what side effects do to a session's workspace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FilesConfig {
    /// Record the workspace's tree before and after every side-effecting call, its files
    /// kept in the object store beside the database (`<db>.objects`); `false`: neither.
    pub record: bool,
    /// A file larger than this is named in the tree (path, size, blob id) but its bytes are
    /// not stored (so it cannot be restored).
    pub max_file_bytes: u64,
    /// Bytes one session's files may add to the object store; a side effect past it is
    /// refused, saying so.
    pub session_bytes: u64,
    /// Bytes the whole object store may hold; past it every side effect is refused.
    pub total_bytes: u64,
}

impl Default for FilesConfig {
    fn default() -> Self {
        FilesConfig {
            record: true,
            max_file_bytes: 16 << 20,
            session_bytes: 512 << 20,
            total_bytes: 4 << 30,
        }
    }
}

/// The object store and each session's index, shared by the workers.
pub struct Files {
    objects: Objects,
    config: FilesConfig,
    indexes: Mutex<HashMap<String, Index>>,
    /// Bytes the store holds (walked once at start, then counted).
    total: AtomicU64,
}

fn now_ms() -> i64 {
    kura_work::now_ms()
}

impl Files {
    /// The object store beside the database at `db`, or `None` when `[files] record` is off.
    pub fn open(db: &Path, config: &FilesConfig) -> anyhow::Result<Option<Files>> {
        if !config.record {
            return Ok(None);
        }
        let objects = Objects::open(&Objects::beside(db))?;
        let total = objects.usage()?.bytes;
        Ok(Some(Files {
            objects,
            config: config.clone(),
            indexes: Mutex::new(HashMap::new()),
            total: AtomicU64::new(total),
        }))
    }

    fn limits(&self) -> Limits {
        Limits {
            max_file_bytes: self.config.max_file_bytes,
            ..Limits::default()
        }
    }

    /// Snapshots the session's workspace with its index (taken out while in use, so two
    /// workers never share one), and counts what was stored against the session.
    fn snap(&self, ws: &Workspace) -> Result<kura_objects::Snapshot, ToolError> {
        let session = ws.session();
        let mut index = self
            .indexes
            .lock()
            .map(|mut m| m.remove(session).unwrap_or_default())
            .unwrap_or_default();
        let snap = kura_objects::snapshot(ws.root(), &self.objects, &mut index, &self.limits());
        if let Ok(mut m) = self.indexes.lock() {
            m.insert(session.to_owned(), index);
        }
        let snap =
            snap.map_err(|e| ToolError::Failed(format!("cannot record the workspace: {e}")))?;
        self.total.fetch_add(snap.new_bytes, Ordering::Relaxed);
        Ok(snap)
    }

    fn head(&self, ws: &Workspace) -> Option<Head> {
        self.objects.head(ws.session()).ok().flatten()
    }

    /// The workspace's tree before a side effect runs: refused when the session's files or
    /// the whole store are at their bound (the call is then not run).
    pub fn before(&self, ws: &Workspace) -> Result<ObjectId, ToolError> {
        let head = self.head(ws);
        let used = head.as_ref().map_or(0, |h| h.stored_bytes);
        if used >= self.config.session_bytes {
            return Err(ToolError::Quota(format!(
                "this session's files fill its share of the object store ({used} of {} bytes, \
                 [files] session_bytes); raise it, or continue in a new session",
                self.config.session_bytes
            )));
        }
        let total = self.total.load(Ordering::Relaxed);
        if total >= self.config.total_bytes {
            return Err(ToolError::Quota(format!(
                "the object store is full ({total} of {} bytes, [files] total_bytes); raise it \
                 or collect what no ledger references (`kura workspace gc`)",
                self.config.total_bytes
            )));
        }
        let snap = self.snap(ws)?;
        self.set_head(ws, head, &snap.tree, None, snap.new_bytes);
        Ok(snap.tree)
    }

    /// The workspace's tree after a side effect, attested beside the one before; `None` (and
    /// a log line) when it could not be recorded.
    pub fn after(
        &self,
        ws: &Workspace,
        before: ObjectId,
        ledger: LedgerId,
    ) -> Option<WorkspaceChange> {
        match self.snap(ws) {
            Ok(snap) => {
                self.set_head(ws, self.head(ws), &snap.tree, Some(ledger), snap.new_bytes);
                Some(WorkspaceChange {
                    before,
                    after: snap.tree,
                    unstored: snap.unstored,
                    matched: None,
                })
            }
            Err(e) => {
                tracing::error!(session = ws.session(), error = %e, "the workspace after a side effect could not be recorded");
                None
            }
        }
    }

    /// A side effect whose worker was lost mid-call: what the files did across it, from the
    /// tree last recorded before it ran to the tree now.
    pub fn across_lost(&self, ws: &Workspace, ledger: LedgerId) -> Option<WorkspaceChange> {
        let before = self.head(ws)?.tree;
        self.after(ws, before, ledger)
    }

    fn set_head(
        &self,
        ws: &Workspace,
        old: Option<Head>,
        tree: &ObjectId,
        ledger: Option<LedgerId>,
        added: u64,
    ) {
        let head = Head {
            root: ws.root().to_owned(),
            tree: tree.clone(),
            ledger: ledger
                .map(|l| l.to_string())
                .or(old.as_ref().and_then(|h| h.ledger.clone())),
            stored_bytes: old.map_or(0, |h| h.stored_bytes).saturating_add(added),
        };
        if let Err(e) = self.objects.set_head(ws.session(), &head) {
            tracing::warn!(session = ws.session(), error = %e, "cannot record the workspace head");
        }
    }

    /// At a turn's start: a session Kura has never recorded files for, whose workspace is
    /// empty, starts with the files recorded as of its context ledger (a fork, `submit
    /// --from`, an outside agent's `from_ledger`, a replay, a session continued on this Pi).
    pub fn align(&self, store: &Store, ws: &Workspace, context: LedgerId) {
        if self.head(ws).is_some() {
            return;
        }
        let tree = match tree_at(store, context) {
            Ok(Some(t)) if t != ObjectId::empty_tree() => t,
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(session = ws.session(), error = %e, "cannot read the tree this session starts from");
                return;
            }
        };
        self.restore_to(
            ws,
            &tree,
            Some(context),
            &format!("starts from ledger {context}"),
            true,
        );
    }

    /// Moves the workspace to `tree` (only when it is empty, if `only_empty`), logging the move.
    fn restore_to(
        &self,
        ws: &Workspace,
        tree: &ObjectId,
        ledger: Option<LedgerId>,
        why: &str,
        only_empty: bool,
    ) -> bool {
        let mut index = Index::default();
        if only_empty {
            let now = kura_objects::snapshot(
                ws.root(),
                &self.objects,
                &mut index,
                &Limits {
                    store: false,
                    ..self.limits()
                },
            );
            if !matches!(now, Ok(s) if s.tree == ObjectId::empty_tree()) {
                return false;
            }
        }
        match kura_objects::restore(ws.root(), &self.objects, &mut index, &self.limits(), tree) {
            Ok(done) => {
                tracing::info!(session = ws.session(), %tree, written = done.written, removed = done.removed, skipped = done.skipped.len(), why, "workspace restored");
                let entry = LogEntry {
                    at_ms: now_ms(),
                    from: done.previous.clone(),
                    to: done.tree.clone(),
                    why: why.to_owned(),
                };
                if let Err(e) = self.objects.log_move(ws.session(), &entry) {
                    tracing::warn!(error = %e, "cannot log the workspace move");
                }
                self.set_head(ws, self.head(ws), &done.tree, ledger, 0);
                if let Ok(mut m) = self.indexes.lock() {
                    m.insert(ws.session().to_owned(), index);
                }
                done.skipped.is_empty()
            }
            Err(e) => {
                tracing::warn!(session = ws.session(), %tree, error = %e, "cannot restore the workspace");
                false
            }
        }
    }

    /// Puts the workspace in `tree` unless it is there already (a replayed turn's start).
    pub fn start_at(&self, ws: &Workspace, tree: &ObjectId, why: &str) {
        let limits = Limits {
            store: false,
            ..self.limits()
        };
        let now = kura_objects::snapshot(ws.root(), &self.objects, &mut Index::default(), &limits);
        if !matches!(now, Ok(s) if &s.tree == tree) {
            self.restore_to(ws, tree, None, why, false);
        }
    }

    /// A replay serving a recorded side effect's result: the files move as the recorded
    /// call moved them (from its `before`, to its `after`); says whether the replay's files
    /// were where the record's were.
    pub fn follow(&self, ws: &Workspace, recorded: &WorkspaceChange) -> WorkspaceChange {
        let now = self.snap(ws).map(|s| s.tree).ok();
        let matched = now.as_ref() == Some(&recorded.before);
        let moved = self.restore_to(
            ws,
            &recorded.after,
            None,
            "a replay serves a recorded side effect",
            false,
        );
        WorkspaceChange {
            before: now.unwrap_or_else(|| recorded.before.clone()),
            after: recorded.after.clone(),
            unstored: recorded.unstored.clone(),
            matched: Some(matched && moved),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_past_its_share_of_the_object_store_is_refused_and_others_are_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = FilesConfig {
            session_bytes: 1000,
            total_bytes: 5000,
            ..FilesConfig::default()
        };
        let files = Files::open(&dir.path().join("kura.db"), &config)
            .expect("open")
            .expect("recording on");
        let ws = |s: &str| Workspace::open(&dir.path().join("ws"), s, 1 << 20).expect("ws");
        let a = ws("a");
        std::fs::write(a.root().join("big"), vec![b'x'; 1500]).expect("write");
        let before = files.before(&a).expect("under its share when it began");
        assert!(
            files
                .after(&a, before, LedgerId::from(uuid::Uuid::nil()))
                .is_some()
        );
        let refused = files.before(&a).map(|_| ()).map_err(|e| e.to_string());
        let why = refused.expect_err("past its share");
        assert!(
            why.contains("session_bytes") && why.contains("1000"),
            "{why}"
        );
        // Another session still has its share; then the whole store is full.
        let b = ws("b");
        std::fs::write(b.root().join("bigger"), vec![b'y'; 4000]).expect("write");
        files.before(&b).expect("b's share is its own");
        let why = files
            .before(&ws("c"))
            .map(|_| ())
            .map_err(|e| e.to_string());
        assert!(why.expect_err("full").contains("total_bytes"));
    }
}

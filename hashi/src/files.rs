//! Each side effect's attested change to its session's files: the workspace's tree before
//! the call and after, its objects made durable in the object store before the result that
//! names them; a session that starts from another ledger's files (a fork, a replay, another
//! Pi) gets them; a replay's served result moves the files as the recorded call did.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use kura_history::workspace::tree_at;
use kura_objects::{Head, Index, Limits, LogEntry, Objects, SessionLock};
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

    /// What one snapshot of the session may add: what is left of its share and of the
    /// store's total (past it, files are named in the tree, not stored).
    fn budget(&self, ws: &Workspace) -> Limits {
        let used = self.head(ws).map_or(0, |h| h.stored_bytes);
        let session = self.config.session_bytes.saturating_sub(used);
        let total = self
            .config
            .total_bytes
            .saturating_sub(self.total.load(Ordering::Relaxed));
        Limits {
            budget: session.min(total),
            ..self.limits()
        }
    }

    /// Snapshots the session's workspace with its index (taken out while in use, so two
    /// workers never share one), and counts what was stored against the session.
    fn snap(&self, ws: &Workspace) -> Result<kura_objects::Snapshot, ToolError> {
        let limits = self.budget(ws);
        let session = ws.session();
        let mut index = self
            .indexes
            .lock()
            .map(|mut m| m.remove(session).unwrap_or_default())
            .unwrap_or_default();
        let snap = kura_objects::snapshot(ws.root(), &self.objects, &mut index, &limits);
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

    /// The workspace's tree before a side effect runs, and the session's workspace held
    /// until its tree after is taken (no other call, reset or replay moves the files
    /// between). Refused when the session's files or the whole store are at their bound
    /// (the call is then not run).
    pub fn before(&self, ws: &Workspace) -> Result<(ObjectId, SessionLock), ToolError> {
        let held = self
            .objects
            .lock(ws.session())
            .map_err(|e| ToolError::Failed(format!("cannot hold the workspace: {e}")))?;
        let head = self.head(ws);
        let used = head.as_ref().map_or(0, |h| h.stored_bytes);
        if used >= self.config.session_bytes || head.as_ref().is_some_and(|h| h.full) {
            return Err(ToolError::Quota(format!(
                "this session's files fill its share of the object store ({used} of {} bytes, \
                 [files] session_bytes); raise it, or continue in a new session",
                self.config.session_bytes
            )));
        }
        if self.total.load(Ordering::Relaxed) >= self.config.total_bytes {
            // Counted again: `kura workspace gc` may have made room since.
            if let Ok(u) = self.objects.usage() {
                self.total.store(u.bytes, Ordering::Relaxed);
            }
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
        self.set_head(
            ws,
            head,
            &snap.tree,
            None,
            (snap.new_bytes, snap.over_budget),
        );
        Ok((snap.tree, held))
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
                self.set_head(
                    ws,
                    self.head(ws),
                    &snap.tree,
                    Some(ledger),
                    (snap.new_bytes, snap.over_budget),
                );
                Some(WorkspaceChange {
                    before,
                    after: snap.tree,
                    unstored: snap.unstored,
                    skipped: snap.skipped,
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
        let _held = self.objects.lock(ws.session()).ok()?;
        let before = self.head(ws)?.tree;
        self.after(ws, before, ledger)
    }

    fn set_head(
        &self,
        ws: &Workspace,
        old: Option<Head>,
        tree: &ObjectId,
        ledger: Option<LedgerId>,
        (added, full): (u64, bool),
    ) {
        let head = Head {
            root: ws.root().to_owned(),
            tree: tree.clone(),
            ledger: ledger
                .map(|l| l.to_string())
                .or(old.as_ref().and_then(|h| h.ledger.clone())),
            full: full || old.as_ref().is_some_and(|h| h.full),
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

    /// Moves the workspace to `tree` (only when it is empty, if `only_empty`), the move
    /// logged before a file is touched; whether every file is there now.
    fn restore_to(
        &self,
        ws: &Workspace,
        tree: &ObjectId,
        ledger: Option<LedgerId>,
        why: &str,
        only_empty: bool,
    ) -> bool {
        let Ok(_held) = self.objects.lock(ws.session()) else {
            return false;
        };
        let mut index = Index::default();
        if only_empty {
            let look = Limits {
                store: false,
                ..self.limits()
            };
            let now = kura_objects::snapshot(ws.root(), &self.objects, &mut index, &look);
            if !matches!(now, Ok(s) if s.tree == ObjectId::empty_tree()) {
                return false;
            }
        }
        let moved = kura_objects::plan(ws.root(), &self.objects, &mut index, &self.limits(), tree)
            .and_then(|plan| {
                let entry = LogEntry {
                    at_ms: now_ms(),
                    from: plan.previous.clone(),
                    to: tree.clone(),
                    why: why.to_owned(),
                };
                self.objects.log_move(ws.session(), &entry)?;
                kura_objects::apply(ws.root(), &self.objects, plan)
            });
        match moved {
            Ok(done) => {
                tracing::info!(session = ws.session(), %tree, written = done.written, removed = done.removed, skipped = done.skipped.len(), why, "workspace restored");
                self.set_head(ws, self.head(ws), &done.tree, ledger, (0, false));
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
    /// were where the record's were. `None` (logged) when the workspace cannot be read.
    pub fn follow(&self, ws: &Workspace, recorded: &WorkspaceChange) -> Option<WorkspaceChange> {
        let now = match self.snap(ws) {
            Ok(s) => s.tree,
            Err(e) => {
                tracing::warn!(session = ws.session(), error = %e, "a replay cannot read its workspace");
                return None;
            }
        };
        let matched = now == recorded.before;
        let moved = self.restore_to(
            ws,
            &recorded.after,
            None,
            "a replay serves a recorded side effect",
            false,
        );
        // Where the files are now, whatever the restore managed.
        let after = if moved {
            recorded.after.clone()
        } else {
            self.snap(ws).ok()?.tree
        };
        Some(WorkspaceChange {
            before: now,
            after,
            unstored: recorded.unstored.clone(),
            skipped: Vec::new(),
            matched: Some(matched && moved),
        })
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
            total_bytes: 1 << 20,
            ..FilesConfig::default()
        };
        let files = Files::open(&dir.path().join("kura.db"), &config)
            .expect("open")
            .expect("recording on");
        let ws = |s: &str| Workspace::open(&dir.path().join("ws"), s, 1 << 20).expect("ws");
        let a = ws("a");
        std::fs::write(a.root().join("small"), b"fits").expect("write");
        let (before, held) = files.before(&a).expect("under its share");
        drop(held);
        // One call writes more than the share holds: named, not stored — the share is never
        // overrun — and the session's next side effect is refused, saying why.
        std::fs::write(a.root().join("big"), vec![b'x'; 1500]).expect("write");
        let change = files
            .after(&a, before, LedgerId::from(uuid::Uuid::nil()))
            .expect("after");
        assert_eq!(
            change
                .unstored
                .iter()
                .map(|u| u.path.as_str())
                .collect::<Vec<_>>(),
            ["big"]
        );
        assert!(
            files.objects.usage().expect("usage").bytes < 1000,
            "the share was not overrun"
        );
        let why = files.before(&a).map(|_| ()).map_err(|e| e.to_string());
        let why = why.expect_err("past its share");
        assert!(
            why.contains("session_bytes") && why.contains("1000"),
            "{why}"
        );
        // Another session still has its share.
        let b = ws("b");
        std::fs::write(b.root().join("notes"), b"- rice").expect("write");
        files.before(&b).expect("b's share is its own");
    }
}

//! A session's files beside its history: the tree recorded at a ledger, the files two
//! ledgers differ by, a reset that rewinds the files with the head, and the check that every
//! recorded object is whole and the workspace holds what the records say (no drift).
//! The one place that reads trees out of records; hashi, the CLI and the console ask here.

use kura_objects::{Checked, FileChange, Index, Limits, Objects, ObjectsError};
use kura_store::{Store, StoreError};
use proto::content::ToolResultContent;
use proto::record::Record;
use proto::workspace::{ObjectId, WorkspaceChange};
use proto::{LedgerId, SessionId};
use serde::Serialize;

/// Most ledgers walked back looking for a recorded tree.
const MAX_WALK: usize = 100_000;

/// Why a workspace operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkspaceError {
    /// The record store.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The object store or the workspace on disk.
    #[error(transparent)]
    Objects(#[from] ObjectsError),
    /// Nothing on record says where, or in which state, the files are (says what).
    #[error("{0}")]
    Unknown(String),
}

/// The result of a workspace operation.
pub type Result<T> = std::result::Result<T, WorkspaceError>;

/// The attested change a record carries: a side effect's `tool.result`'s, or the tree a
/// fork from another Pi's replica starts from.
pub fn change_of(r: &Record) -> Option<WorkspaceChange> {
    proto::workspace::change_of(r.record_type, &r.content)
}

/// The workspace's tree as of `ledger`: the last tree recorded in it or its first-parent
/// ancestry; else the session's files before its first recorded side effect; `None` when
/// nothing was ever recorded.
pub fn tree_at(store: &Store, ledger: LedgerId) -> Result<Option<ObjectId>> {
    let mut at = Some(ledger);
    let mut session = None;
    for _ in 0..MAX_WALK {
        let Some(id) = at else { break };
        if let Some(c) = store.hydrate(id)?.iter().rev().find_map(change_of) {
            return Ok(Some(c.after));
        }
        let l = store.read_ledger(id)?;
        session.get_or_insert(l.session_id);
        at = l.parent_ids.first().copied();
    }
    match session {
        Some(s) => first_before(store, s),
        None => Ok(None),
    }
}

/// The session's files before its first recorded side effect.
fn first_before(store: &Store, session: SessionId) -> Result<Option<ObjectId>> {
    // Oldest first (the store lists a session's ledgers newest first).
    for l in store.session_ledgers(session)?.into_iter().rev() {
        if let Some(c) = store.hydrate(l.ledger_id)?.iter().find_map(change_of) {
            return Ok(Some(c.before));
        }
    }
    Ok(None)
}

/// Most files a diff shows with their text diffs.
const MAX_DIFFS: usize = 100;

/// The files two ledgers differ by.
#[derive(Debug, Clone, Serialize)]
pub struct FileDiff {
    /// The tree as of the first ledger.
    pub tree_a: Option<ObjectId>,
    /// The tree as of the second.
    pub tree_b: Option<ObjectId>,
    /// Each changed file, and a unified diff when it is text the store holds.
    pub files: Vec<FileDelta>,
}

impl FileDiff {
    /// The diff as `kura diff` prints it under the records (nothing when neither ledger has
    /// a tree): each file, then its unified diff; every name and line escaped.
    pub fn lines(&self) -> Vec<String> {
        if self.tree_a.is_none() && self.tree_b.is_none() {
            return Vec::new();
        }
        let tree = |t: &Option<ObjectId>| t.as_ref().map_or("-".to_owned(), |t| t.to_string());
        let mut out = vec![format!(
            "files: tree {} -> {}, {} changed",
            tree(&self.tree_a),
            tree(&self.tree_b),
            self.files.len()
        )];
        for f in &self.files {
            out.push(format!(
                "  {:<7} {}",
                f.change.change.as_str(),
                shown(&f.change.path)
            ));
            out.push(match &f.diff {
                Some(text) => shown_text(text.trim_end()),
                None => "    (binary, too large, or bytes not stored)".into(),
            });
        }
        out
    }
}

/// One changed file.
#[derive(Debug, Clone, Serialize)]
pub struct FileDelta {
    /// What changed.
    #[serde(flatten)]
    pub change: FileChange,
    /// The unified diff, for text.
    pub diff: Option<String>,
}

/// The files changed between the trees as of ledgers `a` and `b` (none when neither has a
/// tree); each text diff at most `max_text` bytes.
pub fn files_between(
    store: &Store,
    objects: &Objects,
    a: LedgerId,
    b: LedgerId,
    max_text: usize,
) -> Result<FileDiff> {
    let (tree_a, tree_b) = (tree_at(store, a)?, tree_at(store, b)?);
    let empty = ObjectId::empty_tree();
    let files = match (&tree_a, &tree_b) {
        (None, None) => Vec::new(),
        (ta, tb) => {
            let (ta, tb) = (ta.as_ref().unwrap_or(&empty), tb.as_ref().unwrap_or(&empty));
            // The first files each with its diff; past them, only what changed (a page that
            // diffs ten thousand files helps nobody and costs the console its CPU).
            kura_objects::changes(objects, ta, tb)?
                .into_iter()
                .enumerate()
                .map(|(i, change)| {
                    let diff = match i < MAX_DIFFS {
                        true => kura_objects::unified(objects, &change, max_text)?,
                        false => None,
                    };
                    Ok(FileDelta { change, diff })
                })
                .collect::<Result<Vec<_>>>()?
        }
    };
    Ok(FileDiff {
        tree_a,
        tree_b,
        files,
    })
}

/// What a rewind did to a session's files.
#[derive(Debug, Clone, Serialize)]
pub struct Rewound {
    /// The workspace directory.
    pub root: std::path::PathBuf,
    /// The tree the files were in (kept in the store and the session's workspace log).
    pub previous: ObjectId,
    /// The tree they are in now.
    pub tree: ObjectId,
    /// Files written.
    pub written: usize,
    /// Files removed.
    pub removed: usize,
    /// Files that could not be put back, and why.
    pub skipped: Vec<(String, String)>,
}

impl Rewound {
    /// What `kura workspace restore` says.
    pub fn line(&self) -> String {
        format!(
            "{}: tree {} ({} written, {} removed, {} not stored)",
            self.root.display(),
            self.tree,
            self.written,
            self.removed,
            self.skipped.len()
        )
    }

    /// What to tell the person who reset `session` to `ledger`.
    pub fn said(&self, session: SessionId, ledger: LedgerId) -> String {
        let root = self.root.display();
        let (w, r) = (self.written, self.removed);
        if self.skipped.is_empty() {
            return format!(
                "files in {root} put back as of {ledger}: {w} written, {r} removed (they were tree {}, kept: `kura workspace log {session}`)",
                self.previous
            );
        }
        let skipped: Vec<String> = self
            .skipped
            .iter()
            .map(|(p, why)| format!("{p}: {why}"))
            .collect();
        format!(
            "files in {root} put back as of {ledger} except {} ({}): {w} written, {r} removed",
            skipped.len(),
            skipped.join("; ")
        )
    }
}

/// Puts the session's workspace back to its tree as of `ledger` (after `kura session
/// reset`), logging the move so the files it replaced stay reachable.
pub fn rewind(
    store: &Store,
    objects: &Objects,
    session: SessionId,
    ledger: LedgerId,
    why: &str,
) -> Result<Rewound> {
    put_back(store, objects, session, ledger, None, why)
}

/// Puts the session's files as of its head into `root` (default: where its turns recorded
/// them) — a Pi restored from the hub, or a session's files wanted elsewhere.
pub fn checkout(
    store: &Store,
    objects: &Objects,
    session: SessionId,
    root: Option<std::path::PathBuf>,
) -> Result<Rewound> {
    let head = store.read_session(session)?.head_ledger_id.ok_or_else(|| {
        WorkspaceError::Unknown(format!("session {session} has no sealed ledger yet"))
    })?;
    put_back(store, objects, session, head, root, "checked out")
}

fn put_back(
    store: &Store,
    objects: &Objects,
    session: SessionId,
    ledger: LedgerId,
    root: Option<std::path::PathBuf>,
    why: &str,
) -> Result<Rewound> {
    let sid = session.to_string();
    let known = objects.head(&sid)?;
    let same = |a: &std::path::Path, b: &std::path::Path| {
        a == b
            || a.canonicalize()
                .ok()
                .is_some_and(|x| b.canonicalize().ok() == Some(x))
    };
    // Files go to the session's own workspace, or to an empty directory: a restore there
    // removes what the tree lacks, so it never goes where someone's other files are.
    let (dir, is_head) = match (&known, root) {
        (Some(h), None) => (h.root.clone(), true),
        (Some(h), Some(r)) if same(&h.root, &r) => (r, true),
        (known, Some(r)) => {
            let full = std::fs::read_dir(&r)
                .map(|mut d| d.next().is_some())
                .unwrap_or(false);
            if full {
                return Err(WorkspaceError::Unknown(format!(
                    "{} is not empty: files are put only into the session's own workspace or an empty directory",
                    r.display()
                )));
            }
            (r, known.is_none())
        }
        (None, None) => {
            return Err(WorkspaceError::Unknown(format!(
                "no turn of session {session} recorded its workspace here; its files were not touched (name a directory: --root)"
            )));
        }
    };
    let target = tree_at(store, ledger)?.ok_or_else(|| {
        WorkspaceError::Unknown(format!(
            "no tree is recorded as of ledger {ledger}; the files were not touched"
        ))
    })?;
    let _held = objects.lock(&sid)?;
    let plan = kura_objects::plan(
        &dir,
        objects,
        &mut Index::default(),
        &Limits::default(),
        &target,
    )?;
    // Logged before anything is touched: the files this replaces stay reachable whatever
    // happens next.
    objects.log_move(
        &sid,
        &kura_objects::LogEntry {
            at_ms: now_ms(),
            from: plan.previous.clone(),
            to: target.clone(),
            why: why.to_owned(),
        },
    )?;
    let done = kura_objects::apply(&dir, objects, plan)?;
    if is_head {
        objects.set_head(
            &sid,
            &kura_objects::Head {
                root: dir.clone(),
                tree: done.tree.clone(),
                ledger: Some(ledger.to_string()),
                stored_bytes: known.as_ref().map_or(0, |h| h.stored_bytes),
                full: known.is_some_and(|h| h.full),
            },
        )?;
    }
    Ok(Rewound {
        root: dir,
        previous: done.previous,
        tree: done.tree,
        written: done.written,
        removed: done.removed,
        skipped: done.skipped,
    })
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// What `kura verify --workspace` found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// The workspace directory, when a turn recorded it here.
    pub root: Option<std::path::PathBuf>,
    /// Distinct trees the session's records name.
    pub trees: usize,
    /// Objects read and found whole.
    pub objects_ok: usize,
    /// Objects whose bytes do not hash to their id (path, id).
    pub corrupt: Vec<(String, ObjectId)>,
    /// Objects the store lacks that no record says were left unstored (path, id).
    pub missing: Vec<(String, ObjectId)>,
    /// Objects erased by redaction (path, id).
    pub redacted: Vec<(String, ObjectId)>,
    /// The tree the records say the workspace is in.
    pub expected: Option<ObjectId>,
    /// The tree it is in.
    pub found: Option<ObjectId>,
    /// Files changed on disk that no recorded call changed: now, and between two calls.
    pub drift: Vec<Drift>,
}

/// Files changed outside Kura.
#[derive(Debug, Clone, Serialize)]
pub struct Drift {
    /// Where it was seen: `now`, or `before call <call_id>`.
    pub when: String,
    /// The files (path and how).
    pub files: Vec<FileChange>,
}

impl Report {
    /// The report as `kura verify --workspace` prints it, ending `OK` or `FAILED`.
    pub fn lines(&self, session: &str) -> Vec<String> {
        let mut out = vec![format!(
            "workspace of session {session}: {} trees, {} objects whole",
            self.trees, self.objects_ok
        )];
        for (what, list) in [
            ("TAMPERED", &self.corrupt),
            ("MISSING", &self.missing),
            ("redacted", &self.redacted),
        ] {
            out.extend(
                list.iter()
                    .map(|(path, id)| format!("  {what}: {path} ({id})")),
            );
        }
        for d in &self.drift {
            out.push(format!(
                "  DRIFT {}: files changed that no recorded call changed:",
                d.when
            ));
            out.extend(
                d.files
                    .iter()
                    .map(|f| format!("    {:<7} {}", f.change.as_str(), f.path)),
            );
        }
        if self.root.is_none() {
            out.push("  (no turn recorded where this session's files are on this machine: the disk was not compared)".into());
        }
        out.push(if self.ok() { "OK" } else { "FAILED" }.into());
        out
    }

    /// Whether every object is whole and nothing drifted.
    pub fn ok(&self) -> bool {
        self.corrupt.is_empty() && self.missing.is_empty() && self.drift.is_empty()
    }
}

/// Checks every tree the session's records name (each object against its id), that each
/// side effect began where the last one left the files, and that the workspace on disk is
/// in the tree the session's head records.
pub fn verify(store: &Store, objects: &Objects, session: SessionId) -> Result<Report> {
    let mut report = Report::default();
    let head_ledger = store.read_session(session)?.head_ledger_id;
    let chain = chain_of(store, head_ledger)?;
    check_chain(objects, &chain, &mut report);
    check_objects(store, objects, session, &mut report)?;
    report.expected = match head_ledger {
        Some(h) => tree_at(store, h)?,
        None => None,
    };
    if let (Some(h), Some(expected)) =
        (objects.head(&session.to_string())?, report.expected.clone())
    {
        check_disk(objects, &h.root, &expected, &mut report);
        report.root = Some(h.root);
    }
    Ok(report)
}

/// The attested changes along the head's history (first parents), oldest first, each with
/// its call id.
fn chain_of(store: &Store, head: Option<LedgerId>) -> Result<Vec<(String, WorkspaceChange)>> {
    let mut chain = Vec::new();
    let mut at = head;
    for _ in 0..MAX_WALK {
        let Some(id) = at else { break };
        let mut here: Vec<(String, WorkspaceChange)> = store
            .hydrate(id)?
            .iter()
            .filter_map(|r| {
                let c = change_of(r)?;
                let call = ToolResultContent::read(&r.content)?.call_id?;
                Some((call.to_string(), c))
            })
            .collect();
        here.reverse();
        chain.extend(here);
        at = store.read_ledger(id)?.parent_ids.first().copied();
    }
    chain.reverse();
    Ok(chain)
}

/// Each side effect must begin where the last left the files; a replay's served call where
/// the recorded one began.
fn check_chain(objects: &Objects, chain: &[(String, WorkspaceChange)], report: &mut Report) {
    for (call, c) in chain {
        if c.matched == Some(false) {
            report.drift.push(Drift {
                when: format!(
                    "replayed call {call}: its files were not where the recorded call began"
                ),
                files: kura_objects::changes(objects, &c.before, &c.after).unwrap_or_default(),
            });
        }
    }
    for w in chain.windows(2) {
        let ((_, prev), (call, next)) = (&w[0], &w[1]);
        if prev.after != next.before {
            // Trees that cannot be compared (missing, altered) are reported by name too.
            let (files, note) = match kura_objects::changes(objects, &prev.after, &next.before) {
                Ok(f) => (f, String::new()),
                Err(e) => (Vec::new(), format!(" (the trees cannot be compared: {e})")),
            };
            report.drift.push(Drift {
                when: format!("before call {call}{note}"),
                files,
            });
        }
    }
}

/// Every object of every tree the session's records name (reachable from its head or not:
/// a reset leaves the later ledgers, and their files, on record) read and checked.
fn check_objects(
    store: &Store,
    objects: &Objects,
    session: SessionId,
    report: &mut Report,
) -> Result<()> {
    let mut unstored = std::collections::HashSet::new();
    let mut trees = std::collections::BTreeSet::new();
    for l in store.session_ledgers(session)? {
        for c in store.hydrate(l.ledger_id)?.iter().filter_map(change_of) {
            unstored.extend(c.unstored.iter().map(|u| u.blob.clone()));
            trees.insert(c.before);
            trees.insert(c.after);
        }
    }
    report.trees = trees.len();
    for t in &trees {
        let checked = match kura_objects::check_tree(objects, t) {
            Ok(c) => c,
            // A tree that cannot be walked at all (nested past the bound, unreadable).
            Err(e) => {
                report
                    .corrupt
                    .push((format!("(the tree itself: {e})"), t.clone()));
                continue;
            }
        };
        let Checked {
            ok,
            corrupt,
            missing,
            redacted,
        } = checked;
        report.objects_ok += ok;
        report.corrupt.extend(corrupt);
        report
            .missing
            .extend(missing.into_iter().filter(|(_, id)| !unstored.contains(id)));
        report.redacted.extend(redacted);
    }
    dedup(&mut report.corrupt);
    dedup(&mut report.missing);
    dedup(&mut report.redacted);
    Ok(())
}

/// The workspace on disk against the tree the records say it is in.
fn check_disk(objects: &Objects, root: &std::path::Path, expected: &ObjectId, report: &mut Report) {
    let limits = Limits {
        store: false,
        ..Limits::default()
    };
    match kura_objects::snapshot(root, objects, &mut Index::default(), &limits) {
        Ok(snap) if &snap.tree == expected => report.found = Some(snap.tree),
        Ok(snap) => {
            let (files, note) = match changes_on_disk(objects, expected, root) {
                Ok(f) => (f, String::new()),
                Err(e) => (Vec::new(), format!(" (cannot be compared: {e})")),
            };
            report.drift.push(Drift {
                when: format!("now{note}"),
                files,
            });
            report.found = Some(snap.tree);
        }
        Err(e) => report.drift.push(Drift {
            when: format!("now: the workspace {} cannot be read ({e})", root.display()),
            files: Vec::new(),
        }),
    }
}

/// The files on disk at `root` that differ from `expected` (the disk's new bytes stored so
/// they can be compared and shown).
fn changes_on_disk(
    objects: &Objects,
    expected: &ObjectId,
    root: &std::path::Path,
) -> Result<Vec<FileChange>> {
    let now =
        kura_objects::snapshot(root, objects, &mut Index::default(), &Limits::default())?.tree;
    Ok(kura_objects::changes(objects, expected, &now)?)
}

/// A file name as a line shows it: every hidden character written as an escape, so a name
/// cannot forge a line of the report.
pub fn shown(path: &str) -> String {
    proto::text::escape_controls(path).replace('\n', "\\n")
}

/// A diff's text as lines show it: control characters escaped, lines kept.
pub fn shown_text(text: &str) -> String {
    text.lines()
        .map(|l| proto::text::escape_controls(l).into_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

fn dedup(v: &mut Vec<(String, ObjectId)>) {
    v.sort();
    v.dedup();
}

/// Every file in the tree as of `ledger`: its path and blob id.
pub fn files_at(
    store: &Store,
    objects: &Objects,
    ledger: LedgerId,
) -> Result<Vec<(String, ObjectId)>> {
    let Some(tree) = tree_at(store, ledger)? else {
        return Err(WorkspaceError::Unknown(format!(
            "no tree is recorded as of ledger {ledger}"
        )));
    };
    Ok(
        kura_objects::changes(objects, &ObjectId::empty_tree(), &tree)?
            .into_iter()
            .filter_map(|c| Some((c.path, c.after?)))
            .collect(),
    )
}

/// Every tree the session's records name.
fn session_trees(store: &Store, session: SessionId) -> Result<Vec<ObjectId>> {
    let mut trees = Vec::new();
    for l in store.session_ledgers(session)? {
        for c in store.hydrate(l.ledger_id)?.iter().filter_map(change_of) {
            trees.push(c.before);
            trees.push(c.after);
        }
    }
    trees.sort();
    trees.dedup();
    Ok(trees)
}

/// Erases the bytes of every version of `path` in the session's trees (its ids stay);
/// the ids erased.
pub fn redact_path(
    store: &Store,
    objects: &Objects,
    session: SessionId,
    path: &str,
    reason: &str,
) -> Result<Vec<ObjectId>> {
    let empty = ObjectId::empty_tree();
    let mut erased = Vec::new();
    for tree in session_trees(store, session)? {
        for c in kura_objects::changes(objects, &empty, &tree)? {
            if let Some(blob) = c.after.filter(|b| c.path == path && !erased.contains(b)) {
                objects.redact(&blob, reason)?;
                erased.push(blob);
            }
        }
    }
    Ok(erased)
}

/// Removes every object older than `grace` that no record, workspace head or workspace
/// log names (a snapshot in flight, not yet recorded, is younger): how many, and bytes.
pub fn collect(store: &Store, objects: &Objects, grace: std::time::Duration) -> Result<(u64, u64)> {
    let mut roots = Vec::new();
    for s in store.sessions()? {
        roots.extend(session_trees(store, s.session_id)?);
    }
    roots.extend(objects.kept_trees()?);
    roots.extend(objects.young_trees(grace)?);
    let mut keep = std::collections::HashSet::new();
    for t in &roots {
        kura_objects::reachable(objects, t, &mut keep)?;
    }
    Ok(objects.sweep(&keep, grace)?)
}

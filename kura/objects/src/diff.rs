//! What changed between two trees, file by file (only subtrees whose ids differ are read),
//! and a unified diff of a changed text file.

use crate::error::{ObjectsError, Result};
use crate::store::{Entry, Kind, Objects};
use gix_object::tree::EntryKind;
use proto::workspace::ObjectId;
use serde::Serialize;

/// How a file changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    /// It is new.
    Added,
    /// It is gone.
    Removed,
    /// Its bytes, mode or kind changed.
    Changed,
}

impl ChangeKind {
    /// The word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Added => "added",
            ChangeKind::Removed => "removed",
            ChangeKind::Changed => "changed",
        }
    }
}

/// One file's change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileChange {
    /// Its path (invalid UTF-8 replaced).
    pub path: String,
    /// Its path as bytes, as the file system has it.
    #[serde(skip)]
    pub raw: Vec<u8>,
    /// How it changed.
    pub change: ChangeKind,
    /// Its blob before, if it existed.
    pub before: Option<ObjectId>,
    /// Its blob after, if it exists.
    pub after: Option<ObjectId>,
    /// Its kind after (or before, when removed).
    #[serde(skip)]
    pub kind: EntryKind,
}

impl FileChange {
    /// Whether it is (or was) a symlink.
    pub fn is_link(&self) -> bool {
        self.kind == EntryKind::Link
    }
}

/// The file changes from tree `before` to tree `after`, by path.
pub fn changes(objects: &Objects, before: &ObjectId, after: &ObjectId) -> Result<Vec<FileChange>> {
    let mut c = Compare {
        objects,
        budget: MAX_ENTRIES,
        out: Vec::new(),
    };
    c.walk(Some(before), Some(after), &[], 0)?;
    Ok(c.out)
}

/// Most entries two trees are compared by: a forged tree naming one subtree twice at every
/// level would otherwise cost 2^depth.
const MAX_ENTRIES: usize = 1_000_000;

fn entries(objects: &Objects, tree: Option<&ObjectId>) -> Result<Vec<Entry>> {
    let mut e = match tree {
        Some(t) => objects.tree(t)?,
        None => Vec::new(),
    };
    e.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(e)
}

fn joined(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = prefix.to_vec();
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

fn change(
    raw: Vec<u8>,
    change: ChangeKind,
    before: Option<&Entry>,
    after: Option<&Entry>,
) -> FileChange {
    FileChange {
        path: String::from_utf8_lossy(&raw).into_owned(),
        raw,
        change,
        before: before.map(|e| e.id.clone()),
        after: after.map(|e| e.id.clone()),
        kind: after.or(before).map_or(EntryKind::Blob, |e| e.kind),
    }
}

/// One comparison: its budget of entries, and the changes found.
struct Compare<'a> {
    objects: &'a Objects,
    budget: usize,
    out: Vec<FileChange>,
}

impl Compare<'_> {
    fn walk(
        &mut self,
        a: Option<&ObjectId>,
        b: Option<&ObjectId>,
        prefix: &[u8],
        depth: usize,
    ) -> Result<()> {
        if a == b {
            return Ok(());
        }
        if depth > crate::walk::MAX_DEPTH {
            return Err(ObjectsError::Bound(format!(
                "the trees nest more than {} deep",
                crate::walk::MAX_DEPTH
            )));
        }
        let (left, right) = (entries(self.objects, a)?, entries(self.objects, b)?);
        self.budget = self
            .budget
            .checked_sub(left.len() + right.len())
            .ok_or_else(|| {
                ObjectsError::Bound(format!(
                    "the trees differ in more than {MAX_ENTRIES} entries"
                ))
            })?;
        let (mut i, mut j) = (0, 0);
        while i < left.len() || j < right.len() {
            let order = match (left.get(i), right.get(j)) {
                (Some(l), Some(r)) => l.name.cmp(&r.name),
                (Some(_), None) => std::cmp::Ordering::Less,
                _ => std::cmp::Ordering::Greater,
            };
            match order {
                std::cmp::Ordering::Less => {
                    self.one_side(&left[i], prefix, ChangeKind::Removed, depth)?;
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    self.one_side(&right[j], prefix, ChangeKind::Added, depth)?;
                    j += 1;
                }
                std::cmp::Ordering::Equal => {
                    self.both(&left[i], &right[j], prefix, depth)?;
                    i += 1;
                    j += 1;
                }
            }
        }
        Ok(())
    }

    fn one_side(&mut self, e: &Entry, prefix: &[u8], kind: ChangeKind, depth: usize) -> Result<()> {
        let path = joined(prefix, &e.name);
        match (e.is_tree(), kind) {
            (true, ChangeKind::Removed) => self.walk(Some(&e.id), None, &path, depth + 1),
            (true, _) => self.walk(None, Some(&e.id), &path, depth + 1),
            (false, ChangeKind::Removed) => {
                self.out.push(change(path, kind, Some(e), None));
                Ok(())
            }
            (false, _) => {
                self.out.push(change(path, kind, None, Some(e)));
                Ok(())
            }
        }
    }

    fn both(&mut self, l: &Entry, r: &Entry, prefix: &[u8], depth: usize) -> Result<()> {
        let path = joined(prefix, &l.name);
        match (l.is_tree(), r.is_tree()) {
            (true, true) => self.walk(Some(&l.id), Some(&r.id), &path, depth + 1),
            (false, false) => {
                if l.id != r.id || l.kind != r.kind {
                    self.out
                        .push(change(path, ChangeKind::Changed, Some(l), Some(r)));
                }
                Ok(())
            }
            // A file became a directory or the other way: the one removed, the other added.
            (true, false) => {
                self.walk(Some(&l.id), None, &path, depth + 1)?;
                self.out
                    .push(change(path, ChangeKind::Added, None, Some(r)));
                Ok(())
            }
            (false, true) => {
                self.out
                    .push(change(path.clone(), ChangeKind::Removed, Some(l), None));
                self.walk(None, Some(&r.id), &path, depth + 1)
            }
        }
    }
}

/// Whether bytes look like text (no NUL in the first 8,000, as git decides, and UTF-8).
fn text(data: &[u8]) -> Option<&str> {
    if data.iter().take(8000).any(|b| *b == 0) {
        return None;
    }
    std::str::from_utf8(data).ok()
}

/// The largest side of a text diff shown (larger: named as changed, no diff).
const MAX_DIFFED: usize = 1 << 20;

/// A unified diff of a changed text file (3 lines of context), at most `max_bytes` long;
/// `None` for a binary file, a symlink, or bytes the store no longer holds.
pub fn unified(objects: &Objects, c: &FileChange, max_bytes: usize) -> Result<Option<String>> {
    if c.is_link() {
        return Ok(None);
    }
    let read = |id: &Option<ObjectId>| -> Result<Option<Vec<u8>>> {
        match id {
            None => Ok(Some(Vec::new())),
            Some(id) => match objects.get(Kind::Blob, id) {
                Ok(d) => Ok(Some(d)),
                Err(ObjectsError::Missing { .. } | ObjectsError::Redacted { .. }) => Ok(None),
                Err(e) => Err(e),
            },
        }
    };
    let (Some(a), Some(b)) = (read(&c.before)?, read(&c.after)?) else {
        return Ok(None);
    };
    // A diff of megabytes is not read by anyone and costs the console its CPU.
    if a.len() > MAX_DIFFED || b.len() > MAX_DIFFED {
        return Ok(None);
    }
    let (Some(a), Some(b)) = (text(&a), text(&b)) else {
        return Ok(None);
    };
    let from = if c.before.is_some() {
        format!("a/{}", c.path)
    } else {
        "/dev/null".into()
    };
    let to = if c.after.is_some() {
        format!("b/{}", c.path)
    } else {
        "/dev/null".into()
    };
    let diff = similar::TextDiff::configure()
        .timeout(std::time::Duration::from_millis(500))
        .diff_lines(a, b);
    let mut text = diff
        .unified_diff()
        .context_radius(3)
        .header(&from, &to)
        .to_string();
    if text.len() > max_bytes {
        let mut cut = max_bytes;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("\n… (diff cut)\n");
    }
    Ok(Some(text))
}

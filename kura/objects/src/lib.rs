//! Workspace trees as git objects: a session's files snapshotted into a content-addressed
//! object store beside the database (git's blob and tree encoding and ids, by gitoxide),
//! restored to any recorded tree touching only the files that differ, compared tree to tree
//! with unified diffs for text, and every object checked against its id when read.
//!
//! No SQLite here: the records that name trees live in the store; this crate keeps the bytes.

mod diff;
mod error;
mod heads;
mod restore;
mod snapshot;
mod store;
pub(crate) mod walk;

pub use diff::{ChangeKind, FileChange, changes, unified};
pub use error::{ObjectsError, Result};
pub use heads::{Head, LogEntry, SessionLock};
pub use restore::{Plan, Restored, apply, plan, restore};
pub use snapshot::{Index, Limits, Snapshot, snapshot};
pub use store::{Entry, Kind, Objects, Usage, hash, parse_tree};

pub use proto::workspace::ObjectId;

/// Every object a tree reaches, and what reading each found: the check `kura verify
/// --workspace` runs on each recorded tree.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Checked {
    /// Objects read and found to hash to their ids.
    pub ok: usize,
    /// Objects whose bytes do not hash to their id (tampered with on disk).
    pub corrupt: Vec<(String, ObjectId)>,
    /// Objects the store does not hold (not stored by size, or lost).
    pub missing: Vec<(String, ObjectId)>,
    /// Objects erased by redaction (their id kept).
    pub redacted: Vec<(String, ObjectId)>,
}

impl Checked {
    /// Whether every object was there and whole (redacted ones are accounted for).
    pub fn intact(&self) -> bool {
        self.corrupt.is_empty() && self.missing.is_empty()
    }
}

/// Reads every object `tree` reaches and checks each against its id.
pub fn check_tree(objects: &Objects, tree: &ObjectId) -> Result<Checked> {
    let mut checked = Checked::default();
    let mut seen = std::collections::HashSet::new();
    check_into(objects, tree, "", &mut checked, &mut seen, 0)?;
    Ok(checked)
}

fn too_deep(depth: usize) -> Result<()> {
    if depth > walk::MAX_DEPTH {
        return Err(ObjectsError::Bound(format!(
            "a tree nests more than {} deep",
            walk::MAX_DEPTH
        )));
    }
    Ok(())
}

fn check_into(
    objects: &Objects,
    tree: &ObjectId,
    prefix: &str,
    out: &mut Checked,
    seen: &mut std::collections::HashSet<ObjectId>,
    depth: usize,
) -> Result<()> {
    too_deep(depth)?;
    // Each object is read once, however often trees name it.
    if !seen.insert(tree.clone()) {
        return Ok(());
    }
    let shown = if prefix.is_empty() { "/" } else { prefix };
    let entries = match objects.tree(tree) {
        Ok(e) => e,
        Err(e) => {
            classify(e, shown, tree, out)?;
            return Ok(());
        }
    };
    out.ok += 1;
    for entry in entries {
        let path = format!("{prefix}{}", entry.name_lossy());
        if entry.is_tree() {
            check_into(
                objects,
                &entry.id,
                &format!("{path}/"),
                out,
                seen,
                depth + 1,
            )?;
        } else if seen.insert(entry.id.clone()) {
            match objects.get(Kind::Blob, &entry.id) {
                Ok(_) => out.ok += 1,
                Err(e) => classify(e, &path, &entry.id, out)?,
            }
        }
    }
    Ok(())
}

fn classify(e: ObjectsError, path: &str, id: &ObjectId, out: &mut Checked) -> Result<()> {
    match e {
        ObjectsError::Corrupt { .. } => out.corrupt.push((path.to_owned(), id.clone())),
        ObjectsError::Missing { .. } => out.missing.push((path.to_owned(), id.clone())),
        ObjectsError::Redacted { .. } => out.redacted.push((path.to_owned(), id.clone())),
        other => return Err(other),
    }
    Ok(())
}

/// Adds every object `tree` reaches to `seen` (objects the store lacks are skipped).
pub fn reachable(
    objects: &Objects,
    tree: &ObjectId,
    seen: &mut std::collections::HashSet<ObjectId>,
) -> Result<()> {
    reachable_at(objects, tree, seen, 0)
}

fn reachable_at(
    objects: &Objects,
    tree: &ObjectId,
    seen: &mut std::collections::HashSet<ObjectId>,
    depth: usize,
) -> Result<()> {
    too_deep(depth)?;
    if !seen.insert(tree.clone()) {
        return Ok(());
    }
    let entries = match objects.tree(tree) {
        Ok(e) => e,
        Err(ObjectsError::Missing { .. } | ObjectsError::Redacted { .. }) => return Ok(()),
        Err(e) => return Err(e),
    };
    for e in entries {
        if e.is_tree() {
            reachable_at(objects, &e.id, seen, depth + 1)?;
        } else {
            seen.insert(e.id);
        }
    }
    Ok(())
}

/// What a copy of a tree from one store to another did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Copied {
    /// Objects written to the destination.
    pub objects: u64,
    /// Objects the source lacks (not stored, redacted, lost).
    pub missing: u64,
}

/// Copies every object `tree` reaches from `from` to `to` (each checked on read), children
/// before their tree, so a tree in `to` always has all it names that `from` had.
pub fn copy_tree(from: &Objects, to: &Objects, tree: &ObjectId) -> Result<Copied> {
    let mut done = Copied::default();
    let mut seen = std::collections::HashSet::new();
    copy_into(from, to, tree, &mut done, &mut seen, 0)?;
    to.sync()?;
    Ok(done)
}

/// Every tree is walked (a tree the destination holds may lack a child an earlier copy
/// could not get), each once.
fn copy_into(
    from: &Objects,
    to: &Objects,
    tree: &ObjectId,
    done: &mut Copied,
    seen: &mut std::collections::HashSet<ObjectId>,
    depth: usize,
) -> Result<()> {
    too_deep(depth)?;
    if *tree == ObjectId::empty_tree() || !seen.insert(tree.clone()) {
        return Ok(());
    }
    let held = to.has(tree);
    let got = if held {
        to.get(Kind::Tree, tree)
    } else {
        from.get(Kind::Tree, tree)
    };
    let data = match got {
        Ok(d) => d,
        Err(ObjectsError::Missing { .. } | ObjectsError::Redacted { .. }) => {
            done.missing += 1;
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    for e in parse_tree(tree, &data)? {
        if e.is_tree() {
            copy_into(from, to, &e.id, done, seen, depth + 1)?;
        } else if !to.has(&e.id) && !to.is_redacted(&e.id) {
            match from.get(Kind::Blob, &e.id) {
                Ok(b) => {
                    to.put_verified(Kind::Blob, &e.id, &b)?;
                    done.objects += 1;
                }
                Err(ObjectsError::Missing { .. } | ObjectsError::Redacted { .. }) => {
                    done.missing += 1
                }
                Err(e) => return Err(e),
            }
        }
    }
    if !held {
        to.put_verified(Kind::Tree, tree, &data)?;
        done.objects += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests;

//! Puts a workspace back to a recorded tree: its present state is snapshotted first (so it
//! stays reachable), then only the files that differ are removed or written — each written
//! beside its name and renamed over it, every directory opened without following symlinks.

use crate::diff::{ChangeKind, FileChange, changes};
use crate::error::{ObjectsError, Result, sys};
use crate::snapshot::{Index, Limits, snapshot};
use crate::store::{Kind, Objects};
use crate::walk;
use gix_object::tree::EntryKind;
use proto::workspace::ObjectId;
use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

/// What a restore did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// The workspace's tree before (stored, so it stays reachable).
    pub previous: ObjectId,
    /// Its tree after: the target, unless files were skipped.
    pub tree: ObjectId,
    /// Files written.
    pub written: usize,
    /// Files removed.
    pub removed: usize,
    /// Files that could not be put back (path, and why: not stored, redacted).
    pub skipped: Vec<(String, String)>,
}

/// What a restore will do, checked before anything is touched: the workspace's present
/// tree (stored), and every file to remove or write — each object to write read and checked
/// against its id, so a missing or altered one stops the restore before it begins.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The workspace's tree now (stored, so it stays reachable: log it before applying).
    pub previous: ObjectId,
    /// The tree it is to be in.
    pub target: ObjectId,
    removes: Vec<FileChange>,
    writes: Vec<FileChange>,
    skipped: Vec<(String, String)>,
}

/// Plans putting the workspace at `root` (created if absent) back to `target`.
pub fn plan(
    root: &Path,
    objects: &Objects,
    index: &mut Index,
    limits: &Limits,
    target: &ObjectId,
) -> Result<Plan> {
    std::fs::create_dir_all(root).map_err(crate::error::io(format!(
        "cannot create the workspace {}",
        root.display()
    )))?;
    let limits = Limits {
        store: true,
        ..*limits
    };
    let previous = snapshot(root, objects, index, &limits)?.tree;
    let todo = changes(objects, &previous, target)?;
    let (removes, maybe): (Vec<FileChange>, Vec<FileChange>) = todo
        .into_iter()
        .partition(|c| c.change == ChangeKind::Removed);
    let mut plan = Plan {
        previous,
        target: target.clone(),
        removes,
        writes: Vec::new(),
        skipped: Vec::new(),
    };
    for c in maybe {
        let Some(id) = &c.after else { continue };
        match objects.get(Kind::Blob, id) {
            Ok(_) => plan.writes.push(c),
            Err(ObjectsError::Missing { .. }) => plan
                .skipped
                .push((c.path.clone(), "its bytes were not stored".into())),
            Err(ObjectsError::Redacted { reason, .. }) => plan
                .skipped
                .push((c.path.clone(), format!("redacted: {reason}"))),
            Err(e) => return Err(e),
        }
    }
    Ok(plan)
}

/// Applies a plan: removes, then writes.
pub fn apply(root: &Path, objects: &Objects, plan: Plan) -> Result<Restored> {
    let top = walk::open_root(root)?;
    let mut done = Restored {
        previous: plan.previous.clone(),
        tree: plan.previous,
        written: 0,
        removed: 0,
        skipped: plan.skipped,
    };
    for c in plan.removes.iter().rev() {
        if remove(&top, &c.raw)? {
            done.removed += 1;
        }
        prune(&top, &c.raw);
    }
    for c in &plan.writes {
        let Some(id) = &c.after else { continue };
        write(&top, objects, &c.raw, c.kind, id)?;
        done.written += 1;
    }
    // Every file the target names was written or already there: the workspace is in the
    // target (rehashing 50 MB to say so again would double a restore's cost).
    done.tree = if done.skipped.is_empty() {
        plan.target
    } else {
        let limits = Limits {
            store: false,
            ..Limits::default()
        };
        snapshot(root, objects, &mut Index::default(), &limits)?.tree
    };
    Ok(done)
}

/// Puts the workspace at `root` back to `target`: [`plan`], then [`apply`].
pub fn restore(
    root: &Path,
    objects: &Objects,
    index: &mut Index,
    limits: &Limits,
    target: &ObjectId,
) -> Result<Restored> {
    let p = plan(root, objects, index, limits, target)?;
    apply(root, objects, p)
}

/// The directory holding `path` (its parents created; a file or symlink in the way is
/// removed), and the file's name.
fn parent<'a>(top: &OwnedFd, path: &'a [u8], create: bool) -> Result<Option<(OwnedFd, &'a [u8])>> {
    let mut parts: Vec<&[u8]> = path.split(|b| *b == b'/').collect();
    let Some(name) = parts.pop() else {
        return Ok(None);
    };
    let shown = || String::from_utf8_lossy(path).into_owned();
    let mut dir = walk::open_dir(top, b".").map_err(sys("cannot open the workspace"))?;
    for part in parts {
        let next = match walk::open_dir(&dir, part) {
            Ok(d) => d,
            Err(Errno::NOENT) if create => mkdir(&dir, part, &shown())?,
            Err(Errno::NOTDIR | Errno::LOOP) if create => {
                // A file or a symlink stands where the tree has a directory.
                let c = walk::cstr(part).map_err(sys(shown()))?;
                rustix::fs::unlinkat(&dir, c.as_c_str(), AtFlags::empty())
                    .map_err(sys(format!("cannot remove {}", shown())))?;
                mkdir(&dir, part, &shown())?
            }
            Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => return Ok(None),
            Err(e) => return Err(sys(format!("cannot open the directory of {}", shown()))(e)),
        };
        dir = next;
    }
    Ok(Some((dir, name)))
}

fn mkdir(dir: &OwnedFd, name: &[u8], shown: &str) -> Result<OwnedFd> {
    let c = walk::cstr(name).map_err(sys(shown))?;
    match rustix::fs::mkdirat(dir, c.as_c_str(), Mode::from_raw_mode(0o755)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => return Err(sys(format!("cannot create the directory of {shown}"))(e)),
    }
    walk::open_dir(dir, name).map_err(sys(format!("cannot open the directory of {shown}")))
}

/// Removes the file or symlink at `path` (a directory there is left); whether it was there.
fn remove(top: &OwnedFd, path: &[u8]) -> Result<bool> {
    let Some((dir, name)) = parent(top, path, false)? else {
        return Ok(false);
    };
    let c = walk::cstr(name).map_err(sys("a file name holds a NUL byte"))?;
    match rustix::fs::unlinkat(&dir, c.as_c_str(), AtFlags::empty()) {
        Ok(()) => Ok(true),
        Err(Errno::NOENT | Errno::ISDIR) => Ok(false),
        Err(e) => Err(sys(format!(
            "cannot remove {}",
            String::from_utf8_lossy(path)
        ))(e)),
    }
}

/// Removes the now-empty directories above `path` (those still holding anything stay).
fn prune(top: &OwnedFd, path: &[u8]) {
    let mut p = path;
    while let Some(cut) = p.iter().rposition(|b| *b == b'/') {
        p = &p[..cut];
        let Ok(Some((dir, name))) = parent(top, p, false) else {
            return;
        };
        let Ok(c) = walk::cstr(name) else { return };
        if rustix::fs::unlinkat(&dir, c.as_c_str(), AtFlags::REMOVEDIR).is_err() {
            return;
        }
    }
}

static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Writes the blob `id` at `path` with `kind`'s mode: beside its name first, then renamed
/// over it, so nobody reads half a file.
fn write(
    top: &OwnedFd,
    objects: &Objects,
    path: &[u8],
    kind: EntryKind,
    id: &ObjectId,
) -> Result<()> {
    let data = objects.get(Kind::Blob, id)?;
    let shown = String::from_utf8_lossy(path).into_owned();
    let Some((dir, name)) = parent(top, path, true)? else {
        return Err(ObjectsError::Refused(format!("cannot place {shown}")));
    };
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = format!(".kura-restore.{}.{seq}", std::process::id());
    if kind == EntryKind::Link {
        let target = walk::cstr(&data).map_err(sys(format!("the symlink {shown}")))?;
        rustix::fs::symlinkat(target.as_c_str(), &dir, tmp.as_str())
            .map_err(sys(format!("cannot write {shown}")))?;
    } else {
        let mode = if kind == EntryKind::BlobExecutable {
            0o755
        } else {
            0o644
        };
        let fd = rustix::fs::openat(
            &dir,
            tmp.as_str(),
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::from_raw_mode(mode),
        )
        .map_err(sys(format!("cannot write {shown}")))?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))
            .map_err(sys(format!("cannot write {shown}")))?;
        let mut f = std::fs::File::from(fd);
        std::io::Write::write_all(&mut f, &data)
            .map_err(crate::error::io(format!("cannot write {shown}")))?;
    }
    let c = walk::cstr(name).map_err(sys(shown.clone()))?;
    match rustix::fs::renameat(&dir, tmp.as_str(), &dir, c.as_c_str()) {
        Ok(()) => Ok(()),
        // A directory the tree does not have stands at its name (holding what no tree
        // names, e.g. a FIFO): it goes, then the file takes its place.
        Err(Errno::ISDIR | Errno::NOTEMPTY | Errno::EXIST) => {
            remove_all(&dir, name)?;
            rustix::fs::renameat(&dir, tmp.as_str(), &dir, c.as_c_str())
                .map_err(sys(format!("cannot write {shown}")))
        }
        Err(e) => {
            let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), AtFlags::empty());
            Err(sys(format!("cannot write {shown}"))(e))
        }
    }
}

/// Removes the directory `name` in `dir` and all it holds (by descriptor, no symlink
/// followed).
fn remove_all(dir: impl AsFd, name: &[u8]) -> Result<()> {
    let shown = String::from_utf8_lossy(name).into_owned();
    let sub = match walk::open_dir(dir.as_fd(), name) {
        Ok(s) => s,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(sys(format!("cannot open {shown}"))(e)),
    };
    for n in walk::names(&sub, &shown)? {
        let c = walk::cstr(&n).map_err(sys(shown.clone()))?;
        match rustix::fs::unlinkat(&sub, c.as_c_str(), AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(Errno::ISDIR | Errno::PERM) => remove_all(&sub, &n)?,
            Err(e) => return Err(sys(format!("cannot remove {shown}"))(e)),
        }
    }
    let c = walk::cstr(name).map_err(sys(shown.clone()))?;
    rustix::fs::unlinkat(dir, c.as_c_str(), AtFlags::REMOVEDIR)
        .map_err(sys(format!("cannot remove {shown}")))
}

//! A workspace's tree: every regular file a blob, every symlink its target, every directory
//! a tree, as git would write them. An index of what each file's status was when it was last
//! hashed makes the next snapshot read only the files that changed (as git's index does).

use crate::error::{ObjectsError, Result};
use crate::store::{Entry, Kind, Objects, encode_tree, hash};
use crate::walk::{self, MAX_DEPTH};
use gix_object::tree::EntryKind;
use proto::workspace::{ObjectId, Unstored};
use rustix::fs::FileType;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::Path;

/// What a file's status was when it was hashed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cached {
    size: u64,
    mtime: i128,
    ctime: i128,
    ino: u64,
    kind: EntryKind,
    id: ObjectId,
    stored: bool,
}

/// The statuses of one workspace's files when last hashed (git's index, in memory).
#[derive(Debug, Default, Clone)]
pub struct Index {
    files: HashMap<Vec<u8>, Cached>,
}

/// Bounds on a snapshot.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// A file larger than this is named (path, size, id) but its bytes are not stored.
    pub max_file_bytes: u64,
    /// A file larger than this is not even hashed (a sparse petabyte would hold a worker
    /// for ever): it is left out of the tree, and said so.
    pub max_hash_bytes: u64,
    /// Most files and directories walked (past it the rest is left out, and said so).
    pub max_entries: usize,
    /// Whether to store new objects (false: only hash, as a drift check does).
    pub store: bool,
    /// New bytes this snapshot may add to the store; past it files are named, not stored.
    pub budget: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_file_bytes: 64 << 20,
            max_hash_bytes: 1 << 30,
            max_entries: 200_000,
            store: true,
            budget: u64::MAX,
        }
    }
}

/// A workspace's tree, and what taking it stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The tree.
    pub tree: ObjectId,
    /// Bytes newly written to the store.
    pub new_bytes: u64,
    /// Files the tree names whose bytes were not stored (too large).
    pub unstored: Vec<Unstored>,
    /// Regular files and symlinks in it.
    pub files: usize,
    /// Files read and hashed (the rest were unchanged since the index saw them).
    pub hashed: usize,
    /// What the tree leaves out, and why (`path: why`): a directory nested too deep or that
    /// cannot be opened, a file that cannot be read or is too large to hash, past the entry
    /// bound. The tree says what it saw; this says what it did not.
    pub skipped: Vec<String>,
    /// Whether a file was left unstored because the snapshot's budget was spent.
    pub over_budget: bool,
}

/// How far back from a snapshot's start a file's change must be for its status to be
/// trusted next time: file times tick coarsely (4 ms at HZ=250), so a file written in the
/// same tick as it was read may change again without its times changing ("racy git").
const RACY_NANOS: i128 = 20_000_000;

struct Walk<'a> {
    objects: &'a Objects,
    limits: Limits,
    old: Index,
    new: Index,
    started: i128,
    out: Snapshot,
    entries: usize,
}

/// The tree of the workspace at `root` (objects stored when `limits.store`, and made
/// durable before this returns); `index` is read to skip unchanged files and updated.
pub fn snapshot(
    root: &Path,
    objects: &Objects,
    index: &mut Index,
    limits: &Limits,
) -> Result<Snapshot> {
    let top = walk::open_root(root)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0);
    let mut w = Walk {
        objects,
        limits: *limits,
        old: std::mem::take(index),
        new: Index::default(),
        started: now,
        out: Snapshot {
            tree: ObjectId::empty_tree(),
            new_bytes: 0,
            unstored: Vec::new(),
            files: 0,
            hashed: 0,
            skipped: Vec::new(),
            over_budget: false,
        },
        entries: 0,
    };
    let tree = w.dir(&top, "", 0);
    // The index survives a failed walk only in what was walked; the rest is re-hashed.
    *index = std::mem::take(&mut w.new);
    w.out.tree = tree?;
    if limits.store {
        objects.sync()?;
    }
    Ok(w.out)
}

impl Walk<'_> {
    /// Bounds on what fits in one snapshot, shared by every skip.
    fn skip(&mut self, path: &str, why: impl std::fmt::Display) {
        if self.out.skipped.len() < 1000 {
            self.out.skipped.push(format!("{path}: {why}"));
        }
    }

    fn dir(&mut self, fd: &OwnedFd, prefix: &str, depth: usize) -> Result<ObjectId> {
        let shown = if prefix.is_empty() {
            "the workspace"
        } else {
            prefix
        };
        let mut entries = Vec::new();
        let names = match walk::names(fd, shown) {
            Ok(n) => n,
            Err(e) => {
                self.skip(shown, e);
                Vec::new()
            }
        };
        for name in names {
            self.entries += 1;
            if self.entries > self.limits.max_entries {
                if self.entries == self.limits.max_entries + 1 {
                    let bound = self.limits.max_entries;
                    self.skip(
                        shown,
                        format!("more than {bound} files and directories; the rest is left out"),
                    );
                }
                break;
            }
            let path = format!("{prefix}{}", String::from_utf8_lossy(&name));
            let st = match walk::stat(fd, &name) {
                Ok(Some(st)) => st,
                Ok(None) => continue,
                Err(e) => {
                    self.skip(&path, e);
                    continue;
                }
            };
            let entry = match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory if depth >= MAX_DEPTH => {
                    self.skip(
                        &path,
                        format!("nested more than {MAX_DEPTH} deep; left out"),
                    );
                    continue;
                }
                FileType::Directory => {
                    let sub = match walk::open_dir(fd, &name) {
                        Ok(s) => s,
                        // Replaced while we walked.
                        Err(rustix::io::Errno::NOENT) => continue,
                        Err(e) => {
                            self.skip(&path, std::io::Error::from(e));
                            continue;
                        }
                    };
                    let id = self.dir(&sub, &format!("{path}/"), depth + 1)?;
                    // git keeps no empty directories.
                    if id == ObjectId::empty_tree() {
                        continue;
                    }
                    (EntryKind::Tree, id)
                }
                FileType::RegularFile | FileType::Symlink => {
                    let key = path.as_bytes().to_vec();
                    match self.file(fd, &name, key, &st) {
                        Ok(found) => {
                            self.out.files += 1;
                            found
                        }
                        // Unreadable, changed while read, too large to hash: said, left out.
                        Err(ObjectsError::Io { source, .. }) => {
                            self.skip(&path, source);
                            continue;
                        }
                        Err(ObjectsError::Refused(why) | ObjectsError::Bound(why)) => {
                            self.skip(&path, why);
                            continue;
                        }
                        Err(e) => return Err(e),
                    }
                }
                // FIFOs, sockets, devices: not files a tool's work is made of.
                _ => continue,
            };
            entries.push(Entry {
                name,
                kind: entry.0,
                id: entry.1,
            });
        }
        if entries.is_empty() {
            return Ok(ObjectId::empty_tree());
        }
        let data = encode_tree(entries)?;
        if self.limits.store {
            let (id, n) = self.objects.put(Kind::Tree, &data)?;
            self.out.new_bytes += n;
            Ok(id)
        } else {
            hash(Kind::Tree, &data)
        }
    }

    fn file(
        &mut self,
        fd: &OwnedFd,
        name: &[u8],
        key: Vec<u8>,
        st: &rustix::fs::Stat,
    ) -> Result<(EntryKind, ObjectId)> {
        let kind = if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
            EntryKind::Link
        } else if st.st_mode & 0o100 != 0 {
            EntryKind::BlobExecutable
        } else {
            EntryKind::Blob
        };
        let now = Cached {
            size: st.st_size as u64,
            mtime: walk::nanos(st.st_mtime, st.st_mtime_nsec as i64),
            ctime: walk::nanos(st.st_ctime, st.st_ctime_nsec as i64),
            ino: st.st_ino,
            kind,
            id: ObjectId::empty_tree(),
            stored: false,
        };
        let path = String::from_utf8_lossy(&key).into_owned();
        if let Some(c) = self.old.files.remove(&key)
            && (Cached {
                id: c.id.clone(),
                stored: c.stored,
                ..now.clone()
            }) == c
            && (c.stored || !self.limits.store || now.size > self.limits.max_file_bytes)
        {
            self.note_unstored(&c, &path);
            let id = c.id.clone();
            self.keep(key, c);
            return Ok((kind, id));
        }
        if now.size > self.limits.max_hash_bytes {
            return Err(ObjectsError::Bound(format!(
                "{} bytes, more than a snapshot hashes ({}); left out",
                now.size, self.limits.max_hash_bytes
            )));
        }
        self.out.hashed += 1;
        let data = if kind == EntryKind::Link {
            walk::read_link(fd, name)?
        } else {
            // Read past the limit by one byte only to know it was passed.
            walk::read_file(fd, name, self.limits.max_file_bytes.saturating_add(1))?
        };
        let too_big = data.len() as u64 > self.limits.max_file_bytes;
        // Past the snapshot's budget a file is named, not stored.
        let over = self.out.new_bytes.saturating_add(data.len() as u64) > self.limits.budget;
        self.out.over_budget |= over && !too_big && self.limits.store;
        let (id, stored) = if too_big {
            // Hash it all without holding it all.
            (self.hash_large(fd, name)?, false)
        } else if self.limits.store && (!over || self.objects.has(&hash(Kind::Blob, &data)?)) {
            let id = hash(Kind::Blob, &data)?;
            self.out.new_bytes += self.objects.put_as(&id, &data)?;
            (id, true)
        } else {
            (hash(Kind::Blob, &data)?, false)
        };
        let cached = Cached {
            id: id.clone(),
            stored,
            ..now
        };
        self.note_unstored(&cached, &path);
        if cached.ctime < self.started - RACY_NANOS {
            self.keep(key, cached);
        }
        Ok((kind, id))
    }

    /// A large file's blob id, read in 64 KiB pieces rather than held whole.
    fn hash_large(&self, fd: &OwnedFd, name: &[u8]) -> Result<ObjectId> {
        let (mut file, size) = walk::open_file(fd, name)?;
        let shown = String::from_utf8_lossy(name);
        let mut hasher = gix_hash::hasher(gix_hash::Kind::Sha1);
        hasher.update(&gix_object::encode::loose_header(
            gix_object::Kind::Blob,
            size,
        ));
        let mut buf = vec![0u8; 64 << 10];
        let mut seen = 0u64;
        loop {
            let n = std::io::Read::read(&mut file, &mut buf)
                .map_err(crate::error::io(format!("cannot read {shown}")))?;
            if n == 0 {
                break;
            }
            seen += n as u64;
            hasher.update(&buf[..n]);
        }
        if seen != size {
            return Err(ObjectsError::Refused(format!(
                "{shown} changed while it was read; take the snapshot again"
            )));
        }
        hasher
            .try_finalize()
            .map(|id| crate::store::from_gix(&id))
            .map_err(|e| ObjectsError::Refused(format!("cannot hash {shown}: {e}")))
    }

    fn note_unstored(&mut self, c: &Cached, path: &str) {
        if self.limits.store && !c.stored {
            self.out.unstored.push(Unstored {
                path: path.to_owned(),
                bytes: c.size,
                blob: c.id.clone(),
            });
        }
    }

    fn keep(&mut self, key: Vec<u8>, c: Cached) {
        self.new.files.insert(key, c);
    }
}

impl Index {
    /// Forgets every file (the next snapshot hashes them all).
    pub fn clear(&mut self) {
        self.files.clear();
    }

    /// Files it knows.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether it knows none.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

//! The object store: git objects (blobs and trees) as files named by their id under a
//! directory beside the database, each made durable before any record names it, each
//! checked against its id whenever it is read. A redacted object's bytes are gone and a
//! tombstone keeps its id and why.

use crate::error::{ObjectsError, Result, io};
use gix_object::WriteTo;
use gix_object::bstr::{BString, ByteSlice};
use gix_object::tree::{EntryKind, EntryMode};
use proto::workspace::ObjectId;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The kinds of object a workspace tree is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A file's bytes (or a symlink's target).
    Blob,
    /// A directory.
    Tree,
}

impl Kind {
    fn gix(self) -> gix_object::Kind {
        match self {
            Kind::Blob => gix_object::Kind::Blob,
            Kind::Tree => gix_object::Kind::Tree,
        }
    }
}

/// One entry of a stored tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its name in the directory (bytes, as the file system gave them).
    pub name: Vec<u8>,
    /// File, executable, symlink or directory.
    pub kind: EntryKind,
    /// Its object.
    pub id: ObjectId,
}

impl Entry {
    /// Whether it is a directory.
    pub fn is_tree(&self) -> bool {
        self.kind == EntryKind::Tree
    }

    /// Its name as text (invalid UTF-8 replaced), for people.
    pub fn name_lossy(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }
}

/// What the store holds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Objects held.
    pub objects: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// The object store at one directory.
#[derive(Debug)]
pub struct Objects {
    dir: PathBuf,
    /// Fan-out directories written to since the last [`Objects::sync`]: their entries are
    /// made durable together, one fsync each, instead of one per object.
    unsynced: Mutex<std::collections::BTreeSet<PathBuf>>,
}

pub(crate) fn to_gix(id: &ObjectId) -> Result<gix_hash::ObjectId> {
    gix_hash::ObjectId::from_hex(id.as_str().as_bytes()).map_err(|e| ObjectsError::Corrupt {
        id: id.clone(),
        why: e.to_string(),
    })
}

pub(crate) fn from_gix(id: &gix_hash::oid) -> ObjectId {
    // A gix id's hex is always 40 lowercase digits (SHA-1 only is enabled).
    ObjectId::parse(&id.to_hex().to_string()).unwrap_or_else(|_| ObjectId::empty_tree())
}

/// The id git gives `data` as an object of `kind`.
pub fn hash(kind: Kind, data: &[u8]) -> Result<ObjectId> {
    gix_object::compute_hash(gix_hash::Kind::Sha1, kind.gix(), data)
        .map(|id| from_gix(&id))
        .map_err(|e| ObjectsError::Refused(format!("cannot hash an object: {e}")))
}

/// A tree's encoding as git writes it, from entries in any order.
pub fn encode_tree(entries: Vec<Entry>) -> Result<Vec<u8>> {
    let mut tree = gix_object::Tree {
        entries: entries
            .into_iter()
            .map(|e| {
                Ok(gix_object::tree::Entry {
                    mode: EntryMode::from(e.kind),
                    filename: BString::from(e.name),
                    oid: to_gix(&e.id)?,
                })
            })
            .collect::<Result<Vec<_>>>()?,
    };
    // git's order: by name, a directory as if its name ended in '/'.
    tree.entries.sort();
    let mut out = Vec::with_capacity(tree.size() as usize);
    tree.write_to(&mut out)
        .map_err(|e| ObjectsError::Refused(format!("cannot encode a tree: {e}")))?;
    Ok(out)
}

impl Objects {
    /// Where the object store of the database at `db` lives: `kura.db` → `kura.objects`.
    pub fn beside(db: &Path) -> PathBuf {
        db.with_extension("objects")
    }

    /// Opens (creating if needed) the store at `dir`.
    pub fn open(dir: &Path) -> Result<Objects> {
        for sub in ["objects", "tmp", "redacted", "workspaces", "logs"] {
            let d = dir.join(sub);
            std::fs::create_dir_all(&d).map_err(io(format!(
                "cannot create the object store at {}",
                d.display()
            )))?;
        }
        Ok(Objects {
            dir: dir.to_owned(),
            unsynced: Mutex::new(Default::default()),
        })
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, id: &ObjectId) -> PathBuf {
        let hex = id.as_str();
        self.dir.join("objects").join(&hex[..2]).join(&hex[2..])
    }

    fn tombstone(&self, id: &ObjectId) -> PathBuf {
        self.dir.join("redacted").join(id.as_str())
    }

    /// Whether the store holds `id`'s bytes.
    pub fn has(&self, id: &ObjectId) -> bool {
        self.path(id).is_file()
    }

    /// Stores `data` as an object of `kind`; its id, and the bytes newly written (0 when the
    /// store held it already or it was redacted). Not durable until [`Objects::sync`].
    pub fn put(&self, kind: Kind, data: &[u8]) -> Result<(ObjectId, u64)> {
        let id = hash(kind, data)?;
        self.put_as(&id, data).map(|n| (id, n))
    }

    /// Stores `data` received from elsewhere as object `id` of `kind`, refused unless it
    /// hashes to `id`.
    pub fn put_verified(&self, kind: Kind, id: &ObjectId, data: &[u8]) -> Result<u64> {
        let found = hash(kind, data)?;
        if &found != id {
            return Err(ObjectsError::Corrupt {
                id: id.clone(),
                why: format!("the bytes received hash to {found}"),
            });
        }
        self.put_as(id, data)
    }

    /// Whether `id`'s bytes were erased by redaction.
    pub fn is_redacted(&self, id: &ObjectId) -> bool {
        self.tombstone(id).exists()
    }

    /// Stores `data` known to hash to `id` (the caller hashed it).
    pub(crate) fn put_as(&self, id: &ObjectId, data: &[u8]) -> Result<u64> {
        let path = self.path(id);
        // A redacted object is never written back: erasure outlives a file that reappears.
        if path.is_file() || self.tombstone(id).exists() {
            return Ok(0);
        }
        let fan = path.parent().map(Path::to_owned).unwrap_or_default();
        std::fs::create_dir_all(&fan).map_err(io(format!("cannot create {}", fan.display())))?;
        let mut tmp = tempfile::NamedTempFile::new_in(self.dir.join("tmp"))
            .map_err(io("cannot write to the object store"))?;
        tmp.write_all(data)
            .and_then(|()| tmp.as_file().sync_data())
            .map_err(io("cannot write to the object store"))?;
        tmp.persist(&path)
            .map_err(|e| e.error)
            .map_err(io(format!("cannot store object {id}")))?;
        if let Ok(mut dirs) = self.unsynced.lock() {
            dirs.insert(fan);
        }
        Ok(data.len() as u64)
    }

    /// Makes every object written since the last call durable (their directory entries).
    pub fn sync(&self) -> Result<()> {
        let dirs = match self.unsynced.lock() {
            Ok(mut d) => std::mem::take(&mut *d),
            Err(_) => return Ok(()),
        };
        for d in dirs {
            std::fs::File::open(&d)
                .and_then(|f| f.sync_all())
                .map_err(io(format!("cannot make {} durable", d.display())))?;
        }
        Ok(())
    }

    /// An object's bytes, checked against its id.
    pub fn get(&self, kind: Kind, id: &ObjectId) -> Result<Vec<u8>> {
        let data = match std::fs::read(self.path(id)) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(match std::fs::read_to_string(self.tombstone(id)) {
                    Ok(reason) => ObjectsError::Redacted {
                        id: id.clone(),
                        reason: reason.trim().to_owned(),
                    },
                    Err(_) => ObjectsError::Missing { id: id.clone() },
                });
            }
            Err(e) => return Err(io(format!("cannot read object {id}"))(e)),
        };
        let found = hash(kind, &data)?;
        if &found != id {
            return Err(ObjectsError::Corrupt {
                id: id.clone(),
                why: format!("its bytes hash to {found}"),
            });
        }
        Ok(data)
    }

    /// A tree's entries, checked against its id.
    pub fn tree(&self, id: &ObjectId) -> Result<Vec<Entry>> {
        if *id == ObjectId::empty_tree() {
            return Ok(Vec::new());
        }
        parse_tree(id, &self.get(Kind::Tree, id)?)
    }
}

/// The entries of tree `id`'s bytes.
///
/// A tree that did not come from a snapshot (a peer's, one altered on disk) may name
/// anything: an entry that is not one plain name (empty, `.`, `..`, holding `/` or NUL), a
/// submodule, or a name twice is refused, so nothing read from a tree can lead a restore
/// outside the workspace.
pub fn parse_tree(id: &ObjectId, data: &[u8]) -> Result<Vec<Entry>> {
    let corrupt = |why: String| ObjectsError::Corrupt {
        id: id.clone(),
        why,
    };
    let tree = gix_object::TreeRef::from_bytes(data, gix_hash::Kind::Sha1)
        .map_err(|e| corrupt(format!("not a tree: {e}")))?;
    let mut names = std::collections::HashSet::new();
    tree.entries
        .iter()
        .map(|e| {
            let name = e.filename.as_bytes();
            if name.is_empty()
                || name == b"."
                || name == b".."
                || name.contains(&b'/')
                || name.contains(&0)
            {
                return Err(corrupt(format!(
                    "an entry named {:?} is not a file name",
                    String::from_utf8_lossy(name)
                )));
            }
            if e.mode.kind() == EntryKind::Commit {
                return Err(corrupt("a submodule entry is not a workspace file".into()));
            }
            if !names.insert(name) {
                return Err(corrupt(format!(
                    "{:?} is named twice",
                    String::from_utf8_lossy(name)
                )));
            }
            Ok(Entry {
                name: name.to_vec(),
                kind: e.mode.kind(),
                id: from_gix(e.oid),
            })
        })
        .collect()
}

impl Objects {
    /// Erases an object's bytes for good, keeping its id and why (a secret written to a
    /// file). Trees naming it still verify: their bytes hold only its id.
    pub fn redact(&self, id: &ObjectId, reason: &str) -> Result<bool> {
        let reason = if reason.trim().is_empty() {
            "redacted"
        } else {
            reason.trim()
        };
        std::fs::write(self.tombstone(id), reason)
            .map_err(io(format!("cannot record the redaction of {id}")))?;
        let erased = match std::fs::remove_file(self.path(id)) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(io(format!("cannot erase object {id}"))(e)),
        };
        std::fs::File::open(self.dir.join("redacted"))
            .and_then(|f| f.sync_all())
            .map_err(io("cannot make the redaction durable"))?;
        Ok(erased)
    }

    /// Objects held and their bytes (a walk of the store).
    pub fn usage(&self) -> Result<Usage> {
        let mut usage = Usage::default();
        let top = self.dir.join("objects");
        let fans = std::fs::read_dir(&top).map_err(io(format!("cannot read {}", top.display())))?;
        for fan in fans.flatten() {
            for obj in std::fs::read_dir(fan.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                if let Ok(m) = obj.metadata() {
                    usage.objects += 1;
                    usage.bytes += m.len();
                }
            }
        }
        Ok(usage)
    }

    /// Every object id the store holds.
    pub fn ids(&self) -> Result<Vec<ObjectId>> {
        let mut out = Vec::new();
        let top = self.dir.join("objects");
        let fans = std::fs::read_dir(&top).map_err(io(format!("cannot read {}", top.display())))?;
        for fan in fans.flatten() {
            let prefix = fan.file_name().to_string_lossy().into_owned();
            for obj in std::fs::read_dir(fan.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let name = format!("{prefix}{}", obj.file_name().to_string_lossy());
                if let Ok(id) = ObjectId::parse(&name) {
                    out.push(id);
                }
            }
        }
        Ok(out)
    }

    /// The trees written less than `grace` ago: a snapshot in flight, not yet on record, is
    /// kept whole by collection (its old children with it).
    pub fn young_trees(&self, grace: std::time::Duration) -> Result<Vec<ObjectId>> {
        let mut out = Vec::new();
        for id in self.ids()? {
            let young = std::fs::metadata(self.path(&id))
                .ok()
                .and_then(|m| m.modified().ok())
                .and_then(|m| m.elapsed().ok())
                .is_none_or(|age| age < grace);
            if young && self.get(Kind::Tree, &id).is_ok() {
                out.push(id);
            }
        }
        Ok(out)
    }

    /// Removes every object not in `keep` written more than `grace` ago (garbage
    /// collection's sweep): how many, and their bytes.
    pub fn sweep(
        &self,
        keep: &std::collections::HashSet<ObjectId>,
        grace: std::time::Duration,
    ) -> Result<(u64, u64)> {
        let (mut n, mut bytes) = (0, 0);
        for id in self.ids()? {
            if keep.contains(&id) {
                continue;
            }
            let path = self.path(&id);
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            let young = meta
                .modified()
                .ok()
                .and_then(|m| m.elapsed().ok())
                .is_none_or(|age| age < grace);
            if young {
                continue;
            }
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    n += 1;
                    bytes += meta.len();
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(format!("cannot remove object {id}"))(e)),
            }
        }
        Ok((n, bytes))
    }
}

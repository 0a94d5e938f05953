//! Keeping the log honest from outside the database: the signer refuses to sign a tree that
//! does not extend its last checkpoint, witness directories keep each checkpoint and a copy
//! of the leaves (a USB stick, a mounted backup), and `verify` checks the store against the
//! newest checkpoint it can find, naming the first leaf that changed.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::checkpoint::{self, LogKey, Signed};
use crate::error::{Result, TlogError};
use crate::storage::LogStorage;

/// A witness directory's latest checkpoint (a signed note).
pub const CHECKPOINT_FILE: &str = "checkpoint";
/// A witness directory's copy of the leaves, one leaf's data per line, in order.
pub const LEAVES_FILE: &str = "leaves";

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TlogError + '_ {
    move |source| TlogError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Hands a new file to the owner of the directory it is made in, when they differ: root
/// writing the signer's head by hand must leave a file the signer can read. Only root can
/// do this; for anyone else the file is theirs already, so a failure changes nothing.
fn give_to_owner_of(dir: &Path, file: &std::fs::File) {
    use std::os::unix::fs::MetadataExt as _;
    let (Ok(d), Ok(f)) = (std::fs::metadata(dir), file.metadata()) else {
        return;
    };
    if (d.uid(), d.gid()) != (f.uid(), f.gid()) {
        let _ = std::os::unix::fs::fchown(file, Some(d.uid()), Some(d.gid()));
    }
}

/// Replaces `path` with `text` atomically (write beside it, fsync, rename).
fn replace(path: &Path, text: &str) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io(dir))?;
    give_to_owner_of(dir, tmp.as_file());
    tmp.write_all(text.as_bytes()).map_err(io(path))?;
    tmp.as_file().sync_all().map_err(io(path))?;
    tmp.persist(path).map_err(|e| TlogError::Io {
        path: path.to_path_buf(),
        source: e.error,
    })?;
    Ok(())
}

/// Why the signer will not sign.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The last checkpoint (the signer's head) does not open under this key.
    HeadUnopenable(String),
    /// The log does not extend the head: it was rewritten or truncated.
    NotExtended {
        /// The head's size.
        size: u64,
        /// How the log fails to extend it.
        why: checkpoint::Inconsistency,
    },
    /// There is no head, yet the log has leaves: the head may have been deleted to hide a
    /// rewrite, so a fresh log is started only when a person says so.
    NoHead {
        /// Leaves in the log now.
        leaves: u64,
    },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::HeadUnopenable(e) => write!(f, "the last checkpoint does not open: {e}"),
            Refusal::NotExtended { size, why } => write!(
                f,
                "refusing to sign: the log does not extend the last signed checkpoint (size {size}): {why}"
            ),
            Refusal::NoHead { leaves } => write!(
                f,
                "refusing to sign: the signer's last checkpoint is missing but the seal log has {leaves} leaves (was it deleted to hide a rewrite?)"
            ),
        }
    }
}

/// Signs a checkpoint of the log as it is now, unless it does not extend `last` (the last
/// checkpoint this key signed, kept outside the database): then the answer is the refusal,
/// and nothing is signed. A `last` that is not this key's is refused the same way. Without
/// a `last`, only an empty log is signed, unless `trust_current` (a person's explicit act).
pub fn sign_next(
    log: &dyn LogStorage,
    key: &LogKey,
    last: Option<&str>,
    trust_current: bool,
) -> Result<std::result::Result<(String, Signed), Refusal>> {
    match last {
        Some(last) => {
            let prev = match checkpoint::open(last, key.verifier()) {
                Ok(cp) => cp,
                Err(e) => return Ok(Err(Refusal::HeadUnopenable(e.to_string()))),
            };
            if let Err(why) = checkpoint::extends(log, &prev)? {
                return Ok(Err(Refusal::NotExtended {
                    size: prev.size,
                    why,
                }));
            }
        }
        None => {
            let leaves = crate::seallog::size(log)?;
            if leaves > 0 && !trust_current {
                return Ok(Err(Refusal::NoHead { leaves }));
            }
        }
    }
    let size = crate::seallog::size(log)?;
    let root = crate::seallog::root(log, size)?;
    let note = key.sign(size, root)?;
    Ok(Ok((
        note,
        Signed {
            origin: key.name().to_owned(),
            size,
            root,
        },
    )))
}

/// Where a signer keeps its last checkpoint (its head): `configured`, else beside the
/// database `db` as `<db>.checkpoint`.
pub fn head_file(configured: Option<&Path>, db: &Path) -> std::path::PathBuf {
    configured.map(Path::to_path_buf).unwrap_or_else(|| {
        let mut p = db.as_os_str().to_owned();
        p.push(".checkpoint");
        std::path::PathBuf::from(p)
    })
}

/// Writes the signer's state file (its last signed checkpoint). Written by root (a person
/// trusting the log by hand), it is given to the directory's owner, the signer.
pub fn save_last(path: &Path, note: &str) -> Result<()> {
    replace(path, note)
}

/// Why a witness directory refuses a checkpoint: an alarm, not an outage.
#[derive(Debug)]
#[non_exhaustive]
pub enum DirRefusal {
    /// It holds a checkpoint the log no longer extends.
    NotExtended {
        /// The witness directory.
        dir: PathBuf,
        /// The size of the checkpoint it holds.
        size: u64,
        /// How the log fails to extend it.
        why: checkpoint::Inconsistency,
    },
    /// It holds a checkpoint that does not open under the log key.
    Unopenable {
        /// The witness directory.
        dir: PathBuf,
        /// Why it does not open.
        error: TlogError,
    },
    /// It has fewer leaves than the checkpoint it holds: it lost leaves it had copied.
    LostLeaves {
        /// The witness directory.
        dir: PathBuf,
    },
}

impl std::fmt::Display for DirRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DirRefusal::NotExtended { dir, size, why } => write!(
                f,
                "witness {} holds a checkpoint of size {size} the log no longer extends: {why}",
                dir.display()
            ),
            DirRefusal::Unopenable { dir, error } => write!(
                f,
                "witness {} holds a checkpoint that does not open: {error}",
                dir.display()
            ),
            DirRefusal::LostLeaves { dir } => {
                write!(f, "witness {} lost leaves it had copied", dir.display())
            }
        }
    }
}

/// Hands a checkpoint to a witness directory: the directory's own last checkpoint must open
/// under `vkey` and be extended by the store (else `Err`, nothing written); then the leaves
/// it lacks are appended and the checkpoint replaced.
pub fn publish(
    dir: &Path,
    log: &dyn LogStorage,
    note: &str,
    cp: &Signed,
    vkey: &str,
) -> Result<std::result::Result<(), DirRefusal>> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let cp_path = dir.join(CHECKPOINT_FILE);
    let had = match std::fs::read_to_string(&cp_path) {
        Ok(text) => match checkpoint::open(&text, vkey) {
            Ok(prev) => {
                if let Err(why) = checkpoint::extends(log, &prev)? {
                    return Ok(Err(DirRefusal::NotExtended {
                        dir: dir.to_path_buf(),
                        size: prev.size,
                        why,
                    }));
                }
                Some(prev.size)
            }
            Err(error) => {
                return Ok(Err(DirRefusal::Unopenable {
                    dir: dir.to_path_buf(),
                    error,
                }));
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io(&cp_path)(e)),
    };
    let leaves_path = dir.join(LEAVES_FILE);
    let have = match std::fs::read_to_string(&leaves_path) {
        Ok(t) => t.lines().count() as u64,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(io(&leaves_path)(e)),
    };
    if had.is_some_and(|h| h > have) {
        return Ok(Err(DirRefusal::LostLeaves {
            dir: dir.to_path_buf(),
        }));
    }
    // The same checkpoint again (the log did not grow): nothing to write on the SD card.
    if have >= cp.size && std::fs::read_to_string(&cp_path).is_ok_and(|t| t == note) {
        return Ok(Ok(()));
    }
    let mut new = Vec::new();
    log.scan_leaves(have, cp.size, &mut |_, _, data| {
        new.push(data);
        Ok(true)
    })?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&leaves_path)
        .map_err(io(&leaves_path))?;
    for line in new {
        writeln!(f, "{line}").map_err(io(&leaves_path))?;
    }
    f.sync_all().map_err(io(&leaves_path))?;
    replace(&cp_path, note)?;
    Ok(Ok(()))
}

/// A checkpoint found for `verify`.
#[derive(Debug, Clone)]
pub struct Found {
    /// Where it was read.
    pub source: PathBuf,
    /// What it commits to.
    pub checkpoint: Signed,
}

/// The newest (largest) checkpoint among `files` and the witness `dirs` that opens under
/// `vkey`, and what was refused (unreadable or not signed by the log key).
pub fn newest(files: &[PathBuf], dirs: &[PathBuf], vkey: &str) -> (Option<Found>, Vec<String>) {
    let mut best: Option<Found> = None;
    let mut refused = Vec::new();
    let candidates = files
        .iter()
        .cloned()
        .chain(dirs.iter().map(|d| d.join(CHECKPOINT_FILE)));
    for path in candidates {
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                refused.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        match checkpoint::open(&text, vkey) {
            Ok(cp) if best.as_ref().is_none_or(|b| cp.size > b.checkpoint.size) => {
                best = Some(Found {
                    source: path,
                    checkpoint: cp,
                });
            }
            Ok(_) => {}
            Err(e) => refused.push(format!("{}: {e}", path.display())),
        }
    }
    (best, refused)
}

/// The first leaf (index, ledger id, what changed) whose data in the store differs from a
/// witness's copy, within the first `size` leaves.
pub fn first_difference(
    log: &dyn LogStorage,
    dirs: &[PathBuf],
    size: u64,
) -> Result<Option<(u64, String, String)>> {
    for dir in dirs {
        let Ok(text) = std::fs::read_to_string(dir.join(LEAVES_FILE)) else {
            continue;
        };
        let mut copied = text.lines();
        let mut found = None;
        log.scan_leaves(0, size, &mut |i, ledger, data| match copied.next() {
            Some(w) if w == data => Ok(true),
            Some(w) => {
                found = Some((
                    i,
                    ledger,
                    format!("the witness copied {w}; the store now says {data}"),
                ));
                Ok(false)
            }
            None => Ok(false),
        })?;
        if found.is_some() {
            return Ok(found);
        }
    }
    Ok(None)
}

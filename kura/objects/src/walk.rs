//! Reading and changing a workspace by descriptor: every directory opened beneath the last
//! without following symlinks, so nothing a tool planted (a symlink to `/etc`) leads a
//! snapshot or a restore outside the workspace.

use crate::error::{ObjectsError, Result, sys};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;
use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

/// Deepest directory nesting walked.
pub(crate) const MAX_DEPTH: usize = 64;

/// Opens the workspace directory itself (never through a symlink).
pub(crate) fn open_root(root: &Path) -> Result<OwnedFd> {
    rustix::fs::open(
        root,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )
    .map_err(sys(format!("cannot open the workspace {}", root.display())))
}

/// Opens the directory `name` in `dir` (never a symlink).
pub(crate) fn open_dir(dir: impl AsFd, name: &[u8]) -> std::result::Result<OwnedFd, Errno> {
    rustix::fs::openat(
        dir,
        cstr(name)?.as_c_str(),
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )
}

pub(crate) fn cstr(name: &[u8]) -> std::result::Result<CString, Errno> {
    CString::new(name).map_err(|_| Errno::INVAL)
}

/// The names in `dir` (without `.` and `..`), sorted so walks are repeatable.
pub(crate) fn names(dir: &OwnedFd, shown: &str) -> Result<Vec<Vec<u8>>> {
    let entries = rustix::fs::Dir::read_from(dir).map_err(sys(format!("cannot list {shown}")))?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(sys(format!("cannot list {shown}")))?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            out.push(name.to_vec());
        }
    }
    out.sort();
    Ok(out)
}

/// `name`'s status in `dir` (a symlink's own), `None` when it is gone.
pub(crate) fn stat(dir: &OwnedFd, name: &[u8]) -> Result<Option<Stat>> {
    match rustix::fs::statat(
        dir,
        cstr(name).map_err(bad_name)?.as_c_str(),
        AtFlags::SYMLINK_NOFOLLOW,
    ) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(sys(format!(
            "cannot stat {}",
            String::from_utf8_lossy(name)
        ))(e)),
    }
}

fn bad_name(_: Errno) -> ObjectsError {
    ObjectsError::Refused("a file name holds a NUL byte".into())
}

/// A regular file opened for reading (without following a symlink, never blocking on a
/// FIFO swapped in), and its size.
pub(crate) fn open_file(dir: &OwnedFd, name: &[u8]) -> Result<(std::fs::File, u64)> {
    let shown = String::from_utf8_lossy(name).into_owned();
    let fd = rustix::fs::openat(
        dir,
        cstr(name).map_err(bad_name)?.as_c_str(),
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK,
        Mode::empty(),
    )
    .map_err(sys(format!("cannot read {shown}")))?;
    let st = rustix::fs::fstat(&fd).map_err(sys(format!("cannot read {shown}")))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(ObjectsError::Refused(format!(
            "{shown} is no longer a regular file"
        )));
    }
    Ok((std::fs::File::from(fd), st.st_size as u64))
}

/// A regular file's bytes, at most `limit` of them (see [`open_file`]).
pub(crate) fn read_file(dir: &OwnedFd, name: &[u8], limit: u64) -> Result<Vec<u8>> {
    let shown = String::from_utf8_lossy(name).into_owned();
    let (file, size) = open_file(dir, name)?;
    let mut out = Vec::with_capacity(usize::try_from(size.min(limit)).unwrap_or(0).min(1 << 26));
    std::io::Read::read_to_end(&mut std::io::Read::take(file, limit), &mut out)
        .map_err(crate::error::io(format!("cannot read {shown}")))?;
    Ok(out)
}

/// A symlink's target, as bytes.
pub(crate) fn read_link(dir: &OwnedFd, name: &[u8]) -> Result<Vec<u8>> {
    rustix::fs::readlinkat(dir, cstr(name).map_err(bad_name)?.as_c_str(), Vec::new())
        .map(CString::into_bytes)
        .map_err(sys(format!(
            "cannot read the symlink {}",
            String::from_utf8_lossy(name)
        )))
}

/// Nanoseconds since the epoch of a status time.
pub(crate) fn nanos(sec: i64, nsec: i64) -> i128 {
    i128::from(sec) * 1_000_000_000 + i128::from(nsec)
}

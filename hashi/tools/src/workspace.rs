//! A session's workspace: a directory handle, and every file tool's path opened beneath it by
//! the kernel (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`), never re-resolved by
//! name after a check, so no symlink swapped in between can lead a tool outside.

use crate::ToolError;
use proto::CallId;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// One session's directory.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// Canonical path of the directory (for the sandbox and `cwd` of tool children).
    root: PathBuf,
    /// The directory itself; every file tool opens beneath it.
    dir: Arc<OwnedFd>,
    /// The session it belongs to; `shell.run` passes it on as `KURA_SESSION_ID`.
    session: String,
    /// The `call_id` of the tool call being run, if any; `shell.run` passes it on as
    /// `KURA_CALL_ID` so an external program can make its effect idempotent.
    call_id: Option<CallId>,
    /// Bytes the workspace may hold.
    quota: u64,
}

/// What kind of file a path names, for refusals that say what they refused.
pub fn kind_name(t: FileType) -> &'static str {
    match t {
        FileType::RegularFile => "regular file",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        _ => "special file",
    }
}

/// The one spelling of a workspace path that policy rules, records and the tool all use
/// (shared with aegis, which rules on edits: see [`kura_policy::path`]).
pub fn normalize(rel: &str) -> Result<String, ToolError> {
    Ok(kura_policy::path::normalize(rel)?)
}

/// Why opening beneath the workspace failed, in words about the path.
fn open_error(rel: &str, e: Errno) -> ToolError {
    match e {
        Errno::LOOP => ToolError::Refused(format!("path {rel:?} goes through a symlink; refused")),
        Errno::XDEV => {
            ToolError::Refused(format!("path {rel:?} leads outside the workspace; refused"))
        }
        Errno::NOENT => ToolError::Failed(format!("{rel}: no such file or directory")),
        Errno::NOTDIR => ToolError::Failed(format!("{rel}: a part of it is not a directory")),
        Errno::ISDIR => ToolError::Failed(format!("{rel}: is a directory")),
        Errno::NOSYS => ToolError::Refused(
            "this kernel lacks openat2 (Linux 5.6+); file tools are refused".into(),
        ),
        other => ToolError::Failed(format!("{rel}: {}", std::io::Error::from(other))),
    }
}

impl Workspace {
    /// Creates (if needed) and opens `<root>/<session>`, with room for `quota` bytes.
    pub fn open(root: &Path, session: &str, quota: u64) -> Result<Workspace, ToolError> {
        if session.is_empty() || session.contains(['/', '\\', '\0']) || session.starts_with('.') {
            return Err(ToolError::Refused(format!(
                "invalid session directory name {session:?}"
            )));
        }
        std::fs::create_dir_all(root)
            .map_err(|e| format!("cannot create workspace root {}: {e}", root.display()))?;
        let root = root
            .canonicalize()
            .map_err(|e| format!("cannot open workspace root {}: {e}", root.display()))?;
        let top = rustix::fs::open(
            &root,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("cannot open workspace root {}: {e}", root.display()))?;
        match rustix::fs::mkdirat(&top, session, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => {
                return Err(ToolError::Failed(format!(
                    "cannot create workspace {session}: {e}"
                )));
            }
        }
        // The session directory itself may not be a symlink someone planted (one component:
        // O_NOFOLLOW is enough).
        let dir = rustix::fs::openat(
            &top,
            session,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )
        .map_err(|e| open_error(session, e))?;
        Ok(Workspace {
            root: root.join(session),
            dir: Arc::new(dir),
            session: session.to_owned(),
            call_id: None,
            quota,
        })
    }

    /// The same workspace, for running the tool call `call_id`.
    pub fn for_call(mut self, call_id: &CallId) -> Workspace {
        self.call_id = Some(call_id.clone());
        self
    }

    /// The session this workspace belongs to.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The tool call being run, if one is.
    pub fn call_id(&self) -> Option<&CallId> {
        self.call_id.as_ref()
    }

    /// The workspace directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Bytes the workspace may hold.
    pub fn quota(&self) -> u64 {
        self.quota
    }

    /// Opens the normalised path `rel` beneath the workspace. Non-blocking, so a FIFO is
    /// opened (and then refused by its type) instead of hanging the worker.
    pub fn open_beneath(&self, rel: &str, flags: OFlags, mode: u32) -> Result<OwnedFd, ToolError> {
        self.open_in(self.dir.as_fd(), rel, flags, mode)
    }

    fn open_in(
        &self,
        dir: impl AsFd,
        rel: &str,
        flags: OFlags,
        mode: u32,
    ) -> Result<OwnedFd, ToolError> {
        let flags = flags | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::NOFOLLOW;
        let mode = Mode::from_raw_mode(mode);
        match rustix::fs::openat2(
            &dir,
            rel,
            flags,
            mode,
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        ) {
            // Kernels before 5.6 (and qemu-user) lack openat2: walk the normalised path one
            // component at a time instead, each opened relative to the last without
            // following symlinks — `..` never occurs in it, so this stays beneath too.
            Err(Errno::NOSYS) => walk_beneath(dir.as_fd(), rel, flags, mode),
            other => other,
        }
        .map_err(|e| open_error(rel, e))
    }

    /// The directory that will hold the normalised path `rel` (created beneath the
    /// workspace one component at a time, each opened by the kernel without following
    /// symlinks), and the file's name in it.
    pub fn parent_for_write<'a>(&self, rel: &'a str) -> Result<(OwnedFd, &'a str), ToolError> {
        if rel == "." {
            return Err(ToolError::Refused(
                "path names the workspace itself, not a file".into(),
            ));
        }
        let (dirs, name) = match rel.rsplit_once('/') {
            Some((d, n)) => (Some(d), n),
            None => (None, rel),
        };
        let mut current = self.open_beneath(".", OFlags::DIRECTORY | OFlags::RDONLY, 0)?;
        for part in dirs.into_iter().flat_map(|d| d.split('/')) {
            match rustix::fs::mkdirat(&current, part, Mode::from_raw_mode(0o700)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(open_error(rel, e)),
            }
            current = self.open_in(&current, part, OFlags::DIRECTORY | OFlags::RDONLY, 0)?;
        }
        Ok((current, name))
    }

    /// Bytes held by regular files in the workspace (walked by descriptor; symlinks are
    /// not followed).
    pub fn usage(&self) -> Result<u64, ToolError> {
        let mut total = 0u64;
        self.walk(&mut |_, size, _| total = total.saturating_add(size))?;
        Ok(total)
    }

    /// Calls `visit` with the normal-form path, size and inode number of every regular file
    /// in the workspace (walked by descriptor; symlinks are not followed).
    pub fn walk(&self, visit: &mut dyn FnMut(&str, u64, u64)) -> Result<(), ToolError> {
        let top = self.open_beneath(".", OFlags::DIRECTORY | OFlags::RDONLY, 0)?;
        walk_files(top, "", 0, visit)
    }

    /// Cuts the regular file at normal-form `rel` back to `len` bytes (never through a
    /// symlink; a file that is gone is left alone).
    pub fn truncate_file(&self, rel: &str, len: u64) -> Result<(), ToolError> {
        let fd = self.open_beneath(rel, OFlags::WRONLY | OFlags::NONBLOCK, 0)?;
        rustix::fs::ftruncate(&fd, len).map_err(|e| open_error(rel, e))
    }

    /// Removes the regular file at normal-form `rel` (nothing else: a directory, a symlink
    /// or a file that is gone is left alone).
    pub fn remove_file(&self, rel: &str) -> Result<(), ToolError> {
        let (dir, name) = self.parent_for_write(rel)?;
        match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile => {
                rustix::fs::unlinkat(&dir, name, AtFlags::empty()).map_err(|e| open_error(rel, e))
            }
            _ => Ok(()),
        }
    }
}

/// Opens the normalised `rel` beneath `dir` component by component with `O_NOFOLLOW`.
fn walk_beneath(
    dir: std::os::fd::BorrowedFd<'_>,
    rel: &str,
    flags: OFlags,
    mode: Mode,
) -> Result<OwnedFd, Errno> {
    let parts: Vec<&str> = rel
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    let Some((last, dirs)) = parts.split_last() else {
        return rustix::fs::openat(dir, ".", flags, mode);
    };
    if parts.contains(&"..") {
        return Err(Errno::XDEV);
    }
    let mut current: Option<OwnedFd> = None;
    for part in dirs {
        let next = rustix::fs::openat(
            current.as_ref().map_or(dir, |c| c.as_fd()),
            *part,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )?;
        current = Some(next);
    }
    rustix::fs::openat(
        current.as_ref().map_or(dir, |c| c.as_fd()),
        *last,
        flags,
        mode,
    )
}

/// Deepest directory nesting [`walk_files`] walks; deeper trees count as over quota.
const MAX_DEPTH: usize = 64;

fn walk_files(
    dir: OwnedFd,
    prefix: &str,
    depth: usize,
    visit: &mut dyn FnMut(&str, u64, u64),
) -> Result<(), ToolError> {
    if depth > MAX_DEPTH {
        return Err(ToolError::Quota(
            "the workspace nests directories too deeply to measure".into(),
        ));
    }
    let entries = rustix::fs::Dir::read_from(&dir).map_err(|e| e.to_string())?;
    for entry in entries {
        let entry = entry.map_err(|e| e.to_string())?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let st = match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            // Removed while we walked.
            Err(Errno::NOENT) => continue,
            Err(e) => return Err(ToolError::Failed(e.to_string())),
        };
        let rel = format!("{prefix}{}", name.to_string_lossy());
        match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => visit(&rel, u64::try_from(st.st_size).unwrap_or(0), st.st_ino),
            FileType::Directory => {
                let sub = rustix::fs::openat(
                    &dir,
                    name,
                    OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
                    Mode::empty(),
                )
                .map_err(|e| e.to_string())?;
                walk_files(sub, &format!("{rel}/"), depth + 1, visit)?;
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_spelling_per_path() {
        for (raw, norm) in [
            ("a", "a"),
            ("./a", "a"),
            ("a//b", "a/b"),
            ("a/./b", "a/b"),
            ("a/../b", "b"),
            ("a/b/", "a/b"),
            ("./secrets/api-key", "secrets/api-key"),
            ("secrets//api-key", "secrets/api-key"),
            ("x/../secrets/api-key", "secrets/api-key"),
            (".", "."),
            ("./", "."),
            ("a/..", "."),
            // Literal names: no case folding, no Unicode look-alike folding.
            ("Secrets/api-key", "Secrets/api-key"),
            ("secrets\u{2215}api-key", "secrets\u{2215}api-key"),
            ("ѕecrets/api-key", "ѕecrets/api-key"),
            ("a\\b", "a\\b"),
            ("...", "..."),
        ] {
            assert_eq!(normalize(raw).as_deref(), Ok(norm), "{raw:?}");
        }
        for bad in ["", "/etc/passwd", "..", "../x", "a/../../x", "a\0b", "//x"] {
            assert!(normalize(bad).is_err(), "{bad:?} must be refused");
        }
    }

    /// The fallback for kernels without openat2 refuses symlinks at every component.
    #[test]
    fn walk_beneath_refuses_symlinks_anywhere() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("outside");
        std::fs::write(outside.path().join("f"), "OUT").expect("write");
        std::fs::create_dir(dir.path().join("a")).expect("mkdir");
        std::fs::write(dir.path().join("a/f"), "IN").expect("write");
        std::os::unix::fs::symlink(outside.path(), dir.path().join("a/door")).expect("symlink");
        std::os::unix::fs::symlink(outside.path().join("f"), dir.path().join("a/link"))
            .expect("symlink");
        let top = rustix::fs::open(
            dir.path(),
            OFlags::DIRECTORY | OFlags::RDONLY,
            Mode::empty(),
        )
        .expect("open");
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = walk_beneath(top.as_fd(), "a/f", flags, Mode::empty()).expect("inside");
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(fd), &mut text).expect("read");
        assert_eq!(text, "IN");
        for bad in ["a/door/f", "a/link"] {
            // ELOOP for the last component, ENOTDIR for a directory one.
            let err = walk_beneath(top.as_fd(), bad, flags, Mode::empty()).err();
            assert!(
                matches!(err, Some(Errno::LOOP | Errno::NOTDIR)),
                "{bad}: {err:?}"
            );
        }
    }
}

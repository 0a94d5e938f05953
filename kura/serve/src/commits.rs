//! Waking on another process's commit: an inotify watch on the database's directory, so the
//! fleet publisher runs the moment a ledger is sealed in any process (every commit writes
//! the WAL), with a timer only as the fallback — inotify unavailable, or an event missed.
//! Before, the publisher read SQLite's change counter every 2 ms: about 1 ms of every
//! replication's lag was that timer.

use std::ffi::OsString;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use kura_runtime::Stop;
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::fs::inotify::{self, CreateFlags, WatchFlags};

/// How long one wait may go without looking at the stop signal.
const SLICE: Duration = Duration::from_millis(50);

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waited {
    /// The stop signal was set.
    Stopped,
    /// One of the database's files was written.
    Written,
    /// The time given passed.
    Timeout,
}

/// Commits to one database, as the kernel reports writes to its files.
pub(crate) struct Commits {
    fd: Option<OwnedFd>,
    /// The database's file names (`kura.db`, `kura.db-wal`).
    names: [OsString; 2],
}

impl Commits {
    /// Watches the directory of `db` (a directory watch survives the WAL being removed and
    /// made again). Without inotify, [`Commits::wait`] is the fallback timer alone.
    pub(crate) fn watch(db: &Path) -> Commits {
        // Where the files really are (a symlinked database keeps its WAL beside its target).
        let real = std::fs::canonicalize(db).unwrap_or_else(|_| db.to_path_buf());
        let db = real.as_path();
        let name = db.file_name().map(OsString::from).unwrap_or_default();
        let mut wal = name.clone();
        wal.push("-wal");
        let dir = db
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)
            .and_then(|fd| {
                let mask = WatchFlags::MODIFY | WatchFlags::CREATE | WatchFlags::MOVED_TO;
                inotify::add_watch(&fd, dir, mask).map(|_| fd)
            })
            .map_err(|e| tracing::warn!(error = %e, dir = %dir.display(), "no inotify on the database's directory: the fleet publisher polls"))
            .ok();
        Commits {
            fd,
            names: [name, wal],
        }
    }

    /// Waits until the database's files are written, `max` passes or `stop` is set.
    pub(crate) fn wait(&self, max: Duration, stop: &Stop) -> Waited {
        let slept = |d| match stop.sleep(d) {
            true => Waited::Stopped,
            false => Waited::Timeout,
        };
        let Some(fd) = &self.fd else {
            return slept(max);
        };
        let deadline = Instant::now() + max;
        loop {
            if stop.is_set() {
                return Waited::Stopped;
            }
            if self.written(fd) {
                return Waited::Written;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Waited::Timeout;
            }
            let slice = left.min(SLICE);
            let timeout = Timespec {
                tv_sec: 0,
                tv_nsec: i64::from(slice.subsec_nanos()),
            };
            let mut fds = [PollFd::new(fd, PollFlags::IN)];
            if let Err(e) = poll(&mut fds, Some(&timeout))
                && e != rustix::io::Errno::INTR
            {
                return slept(left);
            }
        }
    }

    /// Drains what the kernel reported; true if one of the database's files was written.
    fn written(&self, fd: &OwnedFd) -> bool {
        let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
        let mut events = inotify::Reader::new(fd.as_fd(), &mut buf);
        let mut hit = false;
        // Non-blocking: `AGAIN` once drained.
        while let Ok(e) = events.next() {
            let ours = e.file_name().is_some_and(|n| {
                let n = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(n.to_bytes());
                self.names.iter().any(|x| x.as_os_str() == n)
            });
            hit |= ours;
        }
        hit
    }
}

//! The workspace quota for tool children: a `shell.run` may not leave its workspace fuller
//! than the quota, however many files it writes. The kernel bounds one file (RLIMIT_FSIZE is
//! what is left); a watcher measures the total while the program runs and stops it once the
//! workspace passes the quota; such a run is then undone as far as sizes go — the files it
//! created (or replaced) are removed and the ones it grew are cut back to their size before —
//! and a workspace still over its quota takes no further writes until something is deleted.

use crate::ToolError;
use std::collections::BTreeMap;
use std::time::Duration;

use super::Workspace;

/// How often the total is measured while a program runs, at most. Page-cache writes are fast,
/// so a run can pass the quota between two checks; that is why such a run is undone after.
/// In a workspace whose walk takes longer, checks are spaced to four walks' time, so the
/// watcher takes at most a fifth of a core.
pub const CHECK_EVERY: Duration = Duration::from_millis(10);

/// Most files remembered before a run; a workspace with more is refused for `shell.run`
/// rather than walked without bound.
const MAX_FILES: usize = 100_000;

/// What the workspace held before a run (each file's inode and size), to undo a run that
/// passed the quota.
#[derive(Debug)]
pub struct Guard {
    before: BTreeMap<String, (u64, u64)>,
    quota: u64,
    /// The wait before the next check (see [`CHECK_EVERY`]).
    every: std::cell::Cell<Duration>,
}

impl Guard {
    /// Takes stock before a run; refuses when the workspace is already full. Returns the
    /// guard and the bytes left (the largest file the program may write).
    pub fn before_run(ws: &Workspace) -> Result<(Guard, u64), ToolError> {
        let (mut before, mut used, mut too_many) = (BTreeMap::new(), 0u64, false);
        ws.walk(&mut |rel, size, ino| {
            used = used.saturating_add(size);
            if before.len() < MAX_FILES {
                before.insert(rel.to_owned(), (ino, size));
            } else {
                too_many = true;
            }
        })?;
        if too_many {
            return Err(ToolError::Quota(format!(
                "the workspace holds more than {MAX_FILES} files; remove some before running programs"
            )));
        }
        let quota = ws.quota();
        if used >= quota {
            return Err(ToolError::Quota(full(used, quota)));
        }
        Ok((
            Guard {
                before,
                quota,
                every: std::cell::Cell::new(CHECK_EVERY),
            },
            quota - used,
        ))
    }

    /// Whether the workspace is past its quota now (a workspace that cannot be measured
    /// counts as past it).
    pub fn passed(&self, ws: &Workspace) -> bool {
        let t = std::time::Instant::now();
        let passed = ws.usage().map_or(true, |used| used > self.quota);
        self.every.set(CHECK_EVERY.max(t.elapsed() * 4));
        passed
    }

    /// How long to wait before the next check.
    pub fn every(&self) -> Duration {
        self.every.get()
    }

    /// After a run that passed the quota: removes the files it created or replaced (a new
    /// inode under an old name), cuts the ones it grew back to their size before, and says
    /// what is left, as the call's error.
    pub fn roll_back(&self, ws: &Workspace) -> String {
        let (mut made, mut grown) = (Vec::new(), Vec::new());
        let _ = ws.walk(&mut |rel, size, ino| match self.before.get(rel) {
            Some(&(was_ino, was_size)) if was_ino == ino => {
                if size > was_size {
                    grown.push((rel.to_owned(), was_size));
                }
            }
            _ => made.push(rel.to_owned()),
        });
        let removed = made
            .iter()
            .filter(|rel| ws.remove_file(rel).is_ok())
            .count();
        let cut = grown
            .iter()
            .filter(|(rel, len)| ws.truncate_file(rel, *len).is_ok())
            .count();
        let used = ws.usage().unwrap_or(u64::MAX);
        let mut message = format!(
            "the program was stopped: it filled the workspace past its quota of {} bytes; \
             the {removed} file(s) it created or replaced were removed and the {cut} it grew \
             were cut back to their earlier size",
            self.quota
        );
        if used > self.quota {
            message.push_str(&format!("; {}", full(used, self.quota)));
        }
        message
    }
}

fn full(used: u64, quota: u64) -> String {
    format!(
        "the workspace quota is used up ({used} of {quota} bytes); remove files from the \
         workspace before anything more is written"
    )
}

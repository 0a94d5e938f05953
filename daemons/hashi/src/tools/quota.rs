//! The workspace quota for tool children: a `shell.run` may not leave its workspace fuller
//! than the quota, however many files it writes. The kernel bounds one file (RLIMIT_FSIZE is
//! what is left); a watcher measures the total while the program runs and stops it once the
//! workspace passes the quota; the files such a run created are then removed, and a
//! workspace still over its quota takes no further writes until something is deleted.

use std::collections::BTreeSet;
use std::time::Duration;

use super::Workspace;

/// How often the total is measured while a program runs. Page-cache writes are fast, so a
/// run can pass the quota between two checks; that is why its new files are removed after.
pub const CHECK_EVERY: Duration = Duration::from_millis(10);

/// Most files remembered before a run; a workspace with more is refused for `shell.run`
/// rather than walked without bound.
const MAX_FILES: usize = 100_000;

/// What the workspace held before a run, to undo a run that passed the quota.
#[derive(Debug)]
pub struct Guard {
    before: BTreeSet<String>,
    quota: u64,
}

impl Guard {
    /// Takes stock before a run; refuses when the workspace is already full. Returns the
    /// guard and the bytes left (the largest file the program may write).
    pub fn before_run(ws: &Workspace) -> Result<(Guard, u64), String> {
        let (mut before, mut used, mut too_many) = (BTreeSet::new(), 0u64, false);
        ws.walk(&mut |rel, size| {
            used = used.saturating_add(size);
            if before.len() < MAX_FILES {
                before.insert(rel.to_owned());
            } else {
                too_many = true;
            }
        })?;
        if too_many {
            return Err(format!(
                "the workspace holds more than {MAX_FILES} files; remove some before running programs"
            ));
        }
        let quota = ws.quota();
        if used >= quota {
            return Err(full(used, quota));
        }
        Ok((Guard { before, quota }, quota - used))
    }

    /// Whether the workspace is past its quota now (a workspace that cannot be measured
    /// counts as past it).
    pub fn passed(&self, ws: &Workspace) -> bool {
        ws.usage().map_or(true, |used| used > self.quota)
    }

    /// After a run that passed the quota: removes the files it created and says what is
    /// left, as the call's error.
    pub fn roll_back(&self, ws: &Workspace) -> String {
        let mut created = Vec::new();
        let _ = ws.walk(&mut |rel, _| {
            if !self.before.contains(rel) {
                created.push(rel.to_owned());
            }
        });
        let removed = created
            .iter()
            .filter(|rel| ws.remove_file(rel).is_ok())
            .count();
        let used = ws.usage().unwrap_or(u64::MAX);
        let mut message = format!(
            "the program was stopped: it filled the workspace past its quota of {} bytes; \
             the {removed} file(s) it created were removed",
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

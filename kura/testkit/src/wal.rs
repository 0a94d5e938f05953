//! Counting commits from outside: every SQLite commit in WAL mode ends with a frame whose
//! "database size after commit" field is set, so the commits since the WAL last restarted
//! are the commit frames that carry the WAL header's salts. Any process's commits count.

use std::path::Path;

/// Where the WAL is: its salts (they change when it restarts after a checkpoint) and the
/// commits it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalMark {
    /// The header's salt-1 and salt-2.
    pub salt: (u32, u32),
    /// Commit frames with those salts.
    pub commits: u64,
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The WAL of `db` as it is now; `None` when it is missing or empty.
pub fn mark(db: &Path) -> Option<WalMark> {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    let bytes = std::fs::read(wal).ok()?;
    let page = be32(&bytes, 8)? as usize;
    let salt = (be32(&bytes, 16)?, be32(&bytes, 20)?);
    let mut commits = 0;
    let mut at = 32;
    // Frames past the last one written since the restart still hold older salts.
    while at + 24 + page <= bytes.len() && (be32(&bytes, at + 8)?, be32(&bytes, at + 12)?) == salt {
        if be32(&bytes, at + 4)? != 0 {
            commits += 1;
        }
        at += 24 + page;
    }
    Some(WalMark { salt, commits })
}

/// Commits between two marks, if the WAL did not restart in between.
pub fn commits_between(before: Option<WalMark>, after: Option<WalMark>) -> Option<u64> {
    let (b, a) = (before?, after?);
    (b.salt == a.salt && a.commits >= b.commits).then(|| a.commits - b.commits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_commit_is_counted_once_whatever_it_writes() {
        let dir = tempfile::tempdir().expect("tmp");
        let db = dir.path().join("w.db");
        let c = rusqlite::Connection::open(&db).expect("open");
        c.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; CREATE TABLE t (x BLOB);",
        )
        .expect("setup");
        let before = mark(&db);
        c.execute("INSERT INTO t VALUES (zeroblob(100000))", [])
            .expect("big");
        c.execute_batch("BEGIN; INSERT INTO t VALUES (1); INSERT INTO t VALUES (2); COMMIT;")
            .expect("two rows, one commit");
        c.execute("INSERT INTO t VALUES (3)", []).expect("small");
        assert_eq!(commits_between(before, mark(&db)), Some(3));
        // A restarted WAL is not compared with the old one.
        let mid = mark(&db);
        c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
            .expect("checkpoint");
        c.execute("INSERT INTO t VALUES (4)", []).expect("after");
        assert_eq!(commits_between(mid, mark(&db)), None);
    }
}

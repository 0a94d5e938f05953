//! `kura export --format=git`: a session as a real git repository, one commit per sealed
//! ledger; sessions forked from it are branches (`fork/<session>`) sharing its commits.
//!
//! Built with `git fast-import` from a fully determined stream (fixed author, commit time =
//! seal time, parents = ledger parents), so exporting the same session twice gives the same
//! commit ids, and `git fsck` passes.

use proto::{LedgerId, SessionId};
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use proto::ledger::{Ledger, LedgerState};
use serde::Serialize;

use kura_store::{Result, Store, StoreError, time};

/// What an export produced.
#[derive(Debug, Clone, Serialize)]
pub struct Exported {
    /// Commits written, one per sealed ledger.
    pub commits: usize,
    /// The commit id of the session head (`refs/heads/main`).
    pub head_commit: String,
}

#[derive(Serialize)]
struct RecordFile<'a> {
    position: u64,
    record_id: &'a str,
    hash: &'a str,
    record_type: &'a str,
    author_id: &'a str,
    created_at: &'a str,
    metadata: serde_json::Value,
    content: serde_json::Value,
}

fn git(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("-C")
        .arg(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE");
    cmd
}

fn run(mut cmd: Command, what: &str) -> Result<String> {
    let out = cmd.output().map_err(|e| {
        StoreError::Invalid(format!("cannot run git ({e}); export needs git installed"))
    })?;
    if !out.status.success() {
        return Err(StoreError::Invalid(format!(
            "git {what} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn data(stream: &mut Vec<u8>, bytes: &[u8]) {
    stream.extend_from_slice(format!("data {}\n", bytes.len()).as_bytes());
    stream.extend_from_slice(bytes);
    stream.push(b'\n');
}

fn json_pretty<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec_pretty(v).map_err(|e| StoreError::Invalid(e.to_string()))?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Exports the sealed ledgers of `session_id` into the git repository at `out` (created if
/// missing; an existing export there is updated in place).
pub fn export_git(store: &Store, session_id: SessionId, out: &Path) -> Result<Exported> {
    let session = store.read_session(session_id)?;
    let Some(head) = session.head_ledger_id else {
        return Err(StoreError::Invalid(format!(
            "session {session_id} has no sealed ledger to export"
        )));
    };
    let (ledgers, mut branches) = history(store, session_id)?;
    prepare_repository(out)?;
    let mut stream = Vec::new();
    let mut marks: HashMap<LedgerId, usize> = HashMap::new();
    for (i, ledger) in ledgers.iter().enumerate() {
        let mark = i + 1;
        commit(store, &mut stream, &marks, ledger, mark)?;
        stream.push(b'\n');
        marks.insert(ledger.ledger_id, mark);
    }
    let head_mark = marks.get(&head).ok_or_else(|| {
        StoreError::Invalid(format!(
            "session head {head} is not a sealed ledger of the session"
        ))
    })?;
    stream.extend_from_slice(format!("reset refs/heads/main\nfrom :{head_mark}\n\n").as_bytes());
    branches.sort();
    for (name, h) in &branches {
        if let Some(m) = marks.get(h) {
            stream.extend_from_slice(format!("reset refs/heads/{name}\nfrom :{m}\n\n").as_bytes());
        }
    }
    stream.extend_from_slice(b"done\n");
    fast_import(out, &stream)?;
    let mut rev = git(out);
    rev.args(["rev-parse", "refs/heads/main"]);
    let head_commit = run(rev, "rev-parse")?;
    // Give the work tree the head's files, so the export is browsable without git commands.
    let mut checkout = git(out);
    checkout.args(["checkout", "--quiet", "--force", "main"]);
    run(checkout, "checkout")?;
    Ok(Exported {
        commits: ledgers.len(),
        head_commit,
    })
}

/// Fork branches to export: (`fork/<session>`, head ledger).
type Branches = Vec<(String, LedgerId)>;

/// The sealed ledgers to export, oldest first — the session's, those of every session
/// forked from it (and from those), and all the history they grow from — and the fork
/// branches (`fork/<session>`, head ledger).
fn history(store: &Store, session_id: SessionId) -> Result<(Vec<Ledger>, Branches)> {
    // A fork is a branch sharing the origin's commits, not a copy.
    let mut sessions = vec![session_id];
    let mut branches: Vec<(String, LedgerId)> = Vec::new();
    let mut i = 0;
    while i < sessions.len() {
        for f in kura_serve::history::fork::forks_of(store.conn(), sessions[i])? {
            if !sessions.contains(&f.session_id) {
                sessions.push(f.session_id);
                if let Some(h) = store.read_session(f.session_id)?.head_ledger_id {
                    branches.push((format!("fork/{}", f.session_id), h));
                }
            }
        }
        i += 1;
    }
    let mut wanted = std::collections::HashSet::new();
    for s in &sessions {
        for l in store.session_ledgers(*s)? {
            if l.state == LedgerState::Sealed {
                wanted.extend(kura_store::branch::ancestors(store.conn(), l.ledger_id)?);
            }
        }
    }
    let mut ledgers: Vec<Ledger> = Vec::new();
    for id in wanted {
        let l = store.read_ledger(id)?;
        if l.state == LedgerState::Sealed {
            ledgers.push(l);
        }
    }
    // Oldest first (UUIDv7): parents before children, and the same stream every time.
    ledgers.sort_by_key(|l| l.ledger_id);
    Ok((ledgers, branches))
}

/// Makes `out` a git repository, refusing a directory that holds anything else.
fn prepare_repository(out: &Path) -> Result<()> {
    if out.exists() {
        let empty = out
            .read_dir()
            .map(|mut d| d.next().is_none())
            .unwrap_or(false);
        if !empty && !out.join(".git").exists() {
            return Err(StoreError::Invalid(format!(
                "{} exists and is not empty or a git repository",
                out.display()
            )));
        }
    } else {
        std::fs::create_dir_all(out)
            .map_err(|e| StoreError::Invalid(format!("cannot create {}: {e}", out.display())))?;
    }
    if !out.join(".git").exists() {
        let mut init = git(out);
        init.args(["init", "--quiet", "--initial-branch=main"]);
        run(init, "init")?;
    }
    Ok(())
}

/// Appends `ledger`'s commit (`mark`) to the fast-import stream: its message, parents
/// among the commits already written, `ledger.json` and one file per record.
fn commit(
    store: &Store,
    stream: &mut Vec<u8>,
    marks: &HashMap<LedgerId, usize>,
    ledger: &Ledger,
    mark: usize,
) -> Result<()> {
    let when = ledger
        .sealed_at
        .as_deref()
        .and_then(time::unix_seconds)
        .unwrap_or(0);
    let mut msg = format!(
        "{}\n\nledger: {}\nsession: {}\nrecords: {}\nroot_hash: {}\nledger_hash: {}\nsealed_at: {}\n",
        ledger.label,
        ledger.ledger_id,
        ledger.session_id,
        ledger.record_count,
        ledger.root_hash.as_deref().unwrap_or(""),
        ledger.ledger_hash.as_deref().unwrap_or(""),
        ledger.sealed_at.as_deref().unwrap_or(""),
    );
    let mut in_export = Vec::new();
    for p in &ledger.parent_ids {
        match marks.get(p) {
            Some(m) => in_export.push(*m),
            None => msg.push_str(&format!("parent (outside this export): {p}\n")),
        }
    }
    stream.extend_from_slice(
        format!(
            "commit refs/tags/ledger/{}\nmark :{mark}\n",
            ledger.ledger_id
        )
        .as_bytes(),
    );
    let who = format!("kura <kura@localhost> {when} +0000\n");
    stream.extend_from_slice(format!("author {who}committer {who}").as_bytes());
    data(stream, msg.as_bytes());
    for (n, m) in in_export.iter().enumerate() {
        let verb = if n == 0 { "from" } else { "merge" };
        stream.extend_from_slice(format!("{verb} :{m}\n").as_bytes());
    }
    stream.extend_from_slice(b"deleteall\n");
    stream.extend_from_slice(b"M 100644 inline ledger.json\n");
    data(stream, &json_pretty(ledger)?);
    for m in store.members(ledger.ledger_id)? {
        let c = &m.columns;
        let file = RecordFile {
            position: m.position,
            record_id: &c.record_id,
            hash: &c.hash,
            record_type: &c.record_type,
            author_id: &c.author_id,
            created_at: &c.created_at,
            metadata: serde_json::from_str(&c.metadata).unwrap_or(serde_json::Value::Null),
            content: serde_json::from_str(&c.content).unwrap_or(serde_json::Value::Null),
        };
        stream.extend_from_slice(
            format!(
                "M 100644 inline records/{:06}-{}.json\n",
                m.position, c.record_type
            )
            .as_bytes(),
        );
        data(stream, &json_pretty(&file)?);
    }
    Ok(())
}

/// Runs `git fast-import` on `stream` in `out`.
fn fast_import(out: &Path, stream: &[u8]) -> Result<()> {
    let mut cmd = git(out);
    cmd.args(["fast-import", "--quiet", "--force", "--done"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| {
        StoreError::Invalid(format!("cannot run git ({e}); export needs git installed"))
    })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(stream)
            .map_err(|e| StoreError::Invalid(format!("git fast-import: {e}")))?;
    }
    let result = child
        .wait_with_output()
        .map_err(|e| StoreError::Invalid(format!("git fast-import: {e}")))?;
    if !result.status.success() {
        return Err(StoreError::Invalid(format!(
            "git fast-import failed: {}",
            String::from_utf8_lossy(&result.stderr).trim()
        )));
    }
    Ok(())
}

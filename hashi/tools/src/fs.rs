//! `fs.read`, `fs.list`, `fs.write`: files inside the session's workspace only, each opened
//! beneath the workspace handle and used through the very descriptor that was checked;
//! anything that is not a regular file or a directory is refused by name.

use crate::ToolError;
use std::io::Write as _;
use std::os::fd::OwnedFd;

use proto::content::{FsEntry, FsListing, FsWritten, to_json};
use rustix::fs::{AtFlags, FileType, OFlags};
use serde_json::{Map, Value, json};

use super::output::capture;
use super::workspace::{kind_name, normalize};
use super::{Effect, Tool, Workspace, arg_str};

/// Largest part of a file `fs.read` returns; the rest is summarised by size and digest.
const MAX_READ: usize = 256 * 1024;

/// Most entries `fs.list` returns.
const MAX_ENTRIES: usize = 1000;

/// `fs.read {path}` → `{content}`.
pub struct Read;
/// `fs.list {path?}` → `{entries: [{name, kind, size}]}`.
pub struct List;
/// `fs.write {path, content, append?}` → `{bytes}`.
pub struct Write;

/// The type of an open descriptor, refusing what is not `want`.
fn expect_kind(fd: &OwnedFd, rel: &str, want: FileType) -> Result<rustix::fs::Stat, ToolError> {
    let st = rustix::fs::fstat(fd).map_err(|e| format!("{rel}: {e}"))?;
    let kind = FileType::from_raw_mode(st.st_mode);
    if kind == want {
        Ok(st)
    } else {
        Err(ToolError::Refused(format!(
            "{rel} is a {}, not a {}; refused",
            kind_name(kind),
            kind_name(want)
        )))
    }
}

impl Tool for Read {
    fn name(&self) -> &str {
        "fs.read"
    }
    fn effect(&self) -> Effect {
        Effect::Read
    }
    fn description(&self) -> &str {
        "Read a UTF-8 text file from the workspace."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
    }
    fn run(&self, ws: &Workspace, args: &Map<String, Value>) -> Result<Value, ToolError> {
        let rel = normalize(arg_str(args, "path")?)?;
        let fd = ws.open_beneath(&rel, OFlags::RDONLY, 0)?;
        expect_kind(&fd, &rel, FileType::RegularFile)?;
        let got = capture(std::fs::File::from(fd), MAX_READ).map_err(|e| format!("{rel}: {e}"))?;
        let mut out = Map::new();
        got.fields("content", &mut out);
        out.insert("path".into(), Value::String(rel));
        Ok(Value::Object(out))
    }
}

impl Tool for List {
    fn name(&self) -> &str {
        "fs.list"
    }
    fn effect(&self) -> Effect {
        Effect::Read
    }
    fn description(&self) -> &str {
        "List a directory of the workspace (default: its top)."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"path": {"type": "string"}}})
    }
    fn run(&self, ws: &Workspace, args: &Map<String, Value>) -> Result<Value, ToolError> {
        let rel = match args.get("path") {
            None | Some(Value::Null) => ".".to_owned(),
            Some(Value::String(p)) => normalize(p)?,
            Some(_) => {
                return Err(ToolError::Arguments(
                    "argument \"path\" must be a string".into(),
                ));
            }
        };
        let fd = ws.open_beneath(&rel, OFlags::DIRECTORY | OFlags::RDONLY, 0)?;
        expect_kind(&fd, &rel, FileType::Directory)?;
        let mut entries = Vec::new();
        let mut truncated = false;
        for e in rustix::fs::Dir::read_from(&fd).map_err(|e| format!("{rel}: {e}"))? {
            let e = e.map_err(|e| format!("{rel}: {e}"))?;
            let name = e.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            if entries.len() == MAX_ENTRIES {
                truncated = true;
                break;
            }
            let Ok(st) = rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            let kind = match FileType::from_raw_mode(st.st_mode) {
                FileType::RegularFile => "file",
                FileType::Directory => "dir",
                FileType::Symlink => "symlink",
                other => kind_name(other),
            };
            entries.push(FsEntry {
                name: name.to_string_lossy().into_owned(),
                kind: kind.to_owned(),
                size: st.st_size,
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(to_json(&FsListing {
            path: rel,
            entries,
            truncated,
        }))
    }
}

impl Tool for Write {
    fn name(&self) -> &str {
        "fs.write"
    }
    fn effect(&self) -> Effect {
        Effect::Write
    }
    fn description(&self) -> &str {
        "Write (or append to) a text file in the workspace."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "path": {"type": "string"}, "content": {"type": "string"}, "append": {"type": "boolean"}
        }, "required": ["path", "content"]})
    }
    fn run(&self, ws: &Workspace, args: &Map<String, Value>) -> Result<Value, ToolError> {
        let rel = normalize(arg_str(args, "path")?)?;
        let content = arg_str(args, "content")?;
        let append = args.get("append").and_then(Value::as_bool).unwrap_or(false);
        let (parent, name) = ws.parent_for_write(&rel)?;
        // `name` is one component: O_NOFOLLOW alone keeps this open in `parent`.
        let fd = rustix::fs::openat(
            &parent,
            name,
            OFlags::WRONLY
                | OFlags::CREATE
                | OFlags::CLOEXEC
                | OFlags::NONBLOCK
                | OFlags::NOCTTY
                | OFlags::NOFOLLOW,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .map_err(|e| match e {
            rustix::io::Errno::LOOP => {
                format!("path {rel:?} is a symlink; refusing to write through it")
            }
            rustix::io::Errno::NXIO => format!("{rel} is a FIFO or socket; refused"),
            e => format!("{rel}: {e}"),
        })?;
        let st = expect_kind(&fd, &rel, FileType::RegularFile)?;
        let old = u64::try_from(st.st_size).unwrap_or(0);
        let added = content.len() as u64;
        let used = ws.usage()?;
        let after = if append {
            used + added
        } else {
            used - old.min(used) + added
        };
        if after > ws.quota() {
            return Err(ToolError::Quota(format!(
                "the workspace quota of {} bytes would be exceeded ({} in use, this write makes {after}); refused",
                ws.quota(),
                used
            )));
        }
        if !append {
            rustix::fs::ftruncate(&fd, 0).map_err(|e| format!("{rel}: {e}"))?;
        }
        let mut f = std::fs::File::from(fd);
        if append {
            use std::io::Seek as _;
            f.seek(std::io::SeekFrom::End(0))
                .map_err(|e| format!("{rel}: {e}"))?;
        }
        f.write_all(content.as_bytes())
            .map_err(|e| format!("{rel}: {e}"))?;
        f.sync_all().map_err(|e| format!("{rel}: {e}"))?;
        Ok(to_json(&FsWritten {
            path: rel,
            bytes: content.len() as u64,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUOTA: u64 = 1 << 20;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().cloned().expect("object")
    }

    fn ws(root: &std::path::Path) -> Workspace {
        Workspace::open(root, "s1", QUOTA).expect("ws")
    }

    #[test]
    fn write_read_list_inside_the_workspace() {
        let root = tempfile::tempdir().expect("tempdir");
        let ws = ws(root.path());
        Write
            .run(
                &ws,
                &args(json!({"path": "notes/a.md", "content": "hello"})),
            )
            .expect("write");
        Write
            .run(
                &ws,
                &args(json!({"path": "./notes//a.md", "content": " world", "append": true})),
            )
            .expect("append");
        let r = Read
            .run(&ws, &args(json!({"path": "notes/x/../a.md"})))
            .expect("read");
        assert_eq!(r["content"], "hello world");
        assert_eq!(r["path"], "notes/a.md");
        let l = List
            .run(&ws, &args(json!({"path": "notes"})))
            .expect("list");
        assert_eq!(l["entries"][0]["name"], "a.md");
        assert_eq!(l["entries"][0]["size"], 11);
        let top = List.run(&ws, &args(json!({}))).expect("list top");
        assert_eq!(top["entries"][0]["kind"], "dir");
        // Overwrite truncates.
        Write
            .run(&ws, &args(json!({"path": "notes/a.md", "content": "hi"})))
            .expect("overwrite");
        let r = Read
            .run(&ws, &args(json!({"path": "notes/a.md"})))
            .expect("read");
        assert_eq!(r["content"], "hi");
    }

    #[test]
    fn escapes_are_refused() {
        let root = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("outside");
        std::fs::write(outside.path().join("secret"), "s3cret").expect("write");
        let ws = ws(root.path());
        std::os::unix::fs::symlink(outside.path(), ws.root().join("door")).expect("symlink dir");
        std::os::unix::fs::symlink(outside.path().join("secret"), ws.root().join("link"))
            .expect("symlink file");
        for bad in [
            "../s2/x",
            "/etc/passwd",
            "a/../../x",
            "",
            "door/secret",
            "link",
        ] {
            let err = Read.run(&ws, &args(json!({"path": bad}))).expect_err(bad);
            assert!(!err.to_string().contains("s3cret"), "{bad}: {err}");
        }
        for bad in [
            "../x",
            "/tmp/x",
            "door/new-file",
            "door/sub/new-file",
            "link",
        ] {
            assert!(
                Write
                    .run(&ws, &args(json!({"path": bad, "content": "x"})))
                    .is_err(),
                "{bad}"
            );
        }
        assert!(List.run(&ws, &args(json!({"path": "door"}))).is_err());
        assert_eq!(
            std::fs::read_to_string(outside.path().join("secret")).expect("read"),
            "s3cret"
        );
        assert_eq!(
            std::fs::read_dir(outside.path()).expect("dir").count(),
            1,
            "nothing created outside"
        );
        assert!(Read.run(&ws, &args(json!({"path": 5}))).is_err());
    }

    /// Attack: a FIFO in the workspace hung the worker forever on `fs.read`.
    #[test]
    fn fs_read_of_a_fifo_is_refused_not_hung() {
        let root = tempfile::tempdir().expect("tempdir");
        let ws = ws(root.path());
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            ws.root().join("pipe"),
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .expect("mkfifo");
        let (tx, rx) = std::sync::mpsc::channel();
        let ws2 = ws.clone();
        std::thread::spawn(move || {
            let _ = tx.send(Read.run(&ws2, &args(json!({"path": "pipe"}))));
        });
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("fs.read of a FIFO must return, not hang");
        let err = got.expect_err("a FIFO is not a regular file");
        assert!(err.to_string().contains("FIFO"), "{err}");
        let err = Write
            .run(&ws, &args(json!({"path": "pipe", "content": "x"})))
            .expect_err("no writes to a FIFO");
        assert!(err.to_string().contains("FIFO"), "{err}");
    }

    /// Attack: swapping a directory for a symlink between the check and the open sent
    /// `fs.read`s and an `fs.write` outside the workspace.
    #[test]
    fn symlink_swap_race_never_leaves_the_workspace() {
        let root = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("outside");
        std::fs::write(outside.path().join("f"), "OUTSIDE").expect("write");
        let ws = ws(root.path());
        let d = ws.root().join("d");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        // `d` flips between a real directory (holding `f`) and a symlink to the outside,
        // atomically (renameat2 RENAME_EXCHANGE), as fast as it can.
        std::fs::create_dir(&d).expect("dir");
        std::fs::write(d.join("f"), "inside").expect("write");
        let link = ws.root().join("link");
        std::os::unix::fs::symlink(outside.path(), &link).expect("symlink");
        let swapper = {
            let (d, link, stop) = (d.clone(), link.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = rustix::fs::renameat_with(
                        rustix::fs::CWD,
                        &d,
                        rustix::fs::CWD,
                        &link,
                        rustix::fs::RenameFlags::EXCHANGE,
                    );
                }
            })
        };
        let (mut outside_reads, mut inside_reads) = (0, 0);
        for i in 0..2000 {
            match Read.run(&ws, &args(json!({"path": "d/f"}))) {
                Ok(v) if v["content"] == "OUTSIDE" => outside_reads += 1,
                Ok(_) => inside_reads += 1,
                Err(_) => {}
            }
            let _ = Write.run(
                &ws,
                &args(json!({"path": "d/w", "content": format!("{i}")})),
            );
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        swapper.join().expect("swapper");
        // The code before descriptor-based tools leaked 691 of 2000 reads here.
        assert_eq!(outside_reads, 0, "fs.read followed a swapped-in symlink");
        assert!(inside_reads > 0, "the race never let a read through at all");
        let names: Vec<_> = std::fs::read_dir(outside.path())
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["f"], "fs.write created a file outside");
        assert_eq!(
            std::fs::read_to_string(outside.path().join("f")).expect("read"),
            "OUTSIDE"
        );
    }

    /// Attack: one turn wrote 38 MiB to the workspace; nothing bounded it.
    #[test]
    fn workspace_quota_stops_fs_write() {
        let root = tempfile::tempdir().expect("tempdir");
        let ws = ws(root.path());
        let half = "x".repeat((QUOTA / 2) as usize);
        Write
            .run(&ws, &args(json!({"path": "a", "content": half})))
            .expect("half the quota");
        // Rewriting the same file does not count twice.
        Write
            .run(&ws, &args(json!({"path": "a", "content": half})))
            .expect("rewrite");
        Write
            .run(
                &ws,
                &args(json!({"path": "b", "content": "y".repeat((QUOTA / 2 - 10) as usize)})),
            )
            .expect("just under the quota");
        let err = Write
            .run(&ws, &args(json!({"path": "c", "content": "z".repeat(100)})))
            .expect_err("over the quota");
        assert!(err.to_string().contains("quota"), "{err}");
        assert!(
            !ws.root().join("c").exists()
                || std::fs::metadata(ws.root().join("c")).expect("meta").len() == 0
        );
        let err = Write
            .run(
                &ws,
                &args(json!({"path": "a", "content": "q".repeat(100), "append": true})),
            )
            .expect_err("append over the quota");
        assert!(err.to_string().contains("quota"), "{err}");
    }

    /// Attack: reading a ~1 MiB binary file produced a result too big to store.
    #[test]
    fn fs_read_of_a_big_binary_file_is_bounded() {
        let root = tempfile::tempdir().expect("tempdir");
        let ws = ws(root.path());
        let bytes: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
        std::fs::write(ws.root().join("blob"), &bytes).expect("write");
        let v = Read.run(&ws, &args(json!({"path": "blob"}))).expect("read");
        assert_eq!(v["content_binary"], true);
        assert_eq!(v["content_bytes"], 1 << 20);
        assert_eq!(
            v["content_sha256"],
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes))
        );
        assert!(
            v.to_string().len() < 64 * 1024,
            "{} bytes",
            v.to_string().len()
        );
    }
}

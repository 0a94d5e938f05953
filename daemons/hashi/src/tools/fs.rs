//! `fs.read`, `fs.list`, `fs.write`: files inside the session's workspace only.

use std::io::{Read as _, Write as _};

use serde_json::{Map, Value, json};

use super::{Effect, Tool, Workspace, arg_str};

/// Largest file `fs.read` returns.
const MAX_READ: u64 = 1024 * 1024;

/// `fs.read {path}` → `{content}`.
pub struct Read;
/// `fs.list {path?}` → `{entries: [{name, kind, size}]}`.
pub struct List;
/// `fs.write {path, content, append?}` → `{bytes}`.
pub struct Write;

impl Tool for Read {
    fn name(&self) -> &'static str {
        "fs.read"
    }
    fn effect(&self) -> Effect {
        Effect::Read
    }
    fn description(&self) -> &'static str {
        "Read a UTF-8 text file from the workspace."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
    }
    fn run(&self, ws: &Workspace, args: &Map<String, Value>) -> Result<Value, String> {
        let path = ws.existing(arg_str(args, "path")?)?;
        let mut buf = Vec::new();
        std::fs::File::open(&path)
            .and_then(|f| f.take(MAX_READ + 1).read_to_end(&mut buf))
            .map_err(|e| e.to_string())?;
        let truncated = buf.len() as u64 > MAX_READ;
        buf.truncate(MAX_READ as usize);
        Ok(json!({"content": String::from_utf8_lossy(&buf), "truncated": truncated}))
    }
}

impl Tool for List {
    fn name(&self) -> &'static str {
        "fs.list"
    }
    fn effect(&self) -> Effect {
        Effect::Read
    }
    fn description(&self) -> &'static str {
        "List a directory of the workspace (default: its top)."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"path": {"type": "string"}}})
    }
    fn run(&self, ws: &Workspace, args: &Map<String, Value>) -> Result<Value, String> {
        let rel = args.get("path").and_then(Value::as_str).unwrap_or(".");
        let dir = ws.existing(rel)?;
        let mut entries = Vec::new();
        for e in std::fs::read_dir(&dir).map_err(|e| e.to_string())? {
            let e = e.map_err(|e| e.to_string())?;
            let meta = std::fs::symlink_metadata(e.path()).map_err(|e| e.to_string())?;
            let kind = if meta.file_type().is_symlink() {
                "symlink"
            } else if meta.is_dir() {
                "dir"
            } else {
                "file"
            };
            entries.push(
                json!({"name": e.file_name().to_string_lossy(), "kind": kind, "size": meta.len()}),
            );
        }
        entries.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        Ok(json!({"entries": entries}))
    }
}

impl Tool for Write {
    fn name(&self) -> &'static str {
        "fs.write"
    }
    fn effect(&self) -> Effect {
        Effect::Write
    }
    fn description(&self) -> &'static str {
        "Write (or append to) a text file in the workspace."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "path": {"type": "string"}, "content": {"type": "string"}, "append": {"type": "boolean"}
        }, "required": ["path", "content"]})
    }
    fn run(&self, ws: &Workspace, args: &Map<String, Value>) -> Result<Value, String> {
        let path = ws.for_write(arg_str(args, "path")?)?;
        let content = arg_str(args, "content")?;
        let append = args.get("append").and_then(Value::as_bool).unwrap_or(false);
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(&path)
            .map_err(|e| e.to_string())?;
        f.write_all(content.as_bytes()).map_err(|e| e.to_string())?;
        f.sync_all().map_err(|e| e.to_string())?;
        Ok(json!({"bytes": content.len()}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().cloned().expect("object")
    }

    #[test]
    fn write_read_list_inside_the_workspace() {
        let root = tempfile::tempdir().expect("tempdir");
        let ws = Workspace::open(root.path(), "s1").expect("ws");
        Write
            .run(
                &ws,
                &args(json!({"path": "notes/a.md", "content": "hello"})),
            )
            .expect("write");
        Write
            .run(
                &ws,
                &args(json!({"path": "notes/a.md", "content": " world", "append": true})),
            )
            .expect("append");
        let r = Read
            .run(&ws, &args(json!({"path": "notes/a.md"})))
            .expect("read");
        assert_eq!(r["content"], "hello world");
        let l = List
            .run(&ws, &args(json!({"path": "notes"})))
            .expect("list");
        assert_eq!(l["entries"][0]["name"], "a.md");
        assert_eq!(l["entries"][0]["size"], 11);
        let top = List.run(&ws, &args(json!({}))).expect("list top");
        assert_eq!(top["entries"][0]["kind"], "dir");
    }

    #[test]
    fn escapes_are_refused() {
        let root = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("outside");
        std::fs::write(outside.path().join("secret"), "s3cret").expect("write");
        let ws = Workspace::open(root.path(), "s1").expect("ws");
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
            assert!(!err.contains("s3cret"), "{bad}: {err}");
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
}

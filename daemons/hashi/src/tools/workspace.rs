//! A session's workspace directory, and path confinement: no absolute paths, no `..`, no
//! way out through a symlink.

use std::path::{Component, Path, PathBuf};

/// One session's directory.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// Canonical path of the directory.
    root: PathBuf,
    /// The session it belongs to; `shell.run` passes it on as `KURA_SESSION_ID`.
    session: String,
    /// The `call_id` of the tool call being run, if any; `shell.run` passes it on as
    /// `KURA_CALL_ID` so an external program can make its effect idempotent.
    call_id: Option<String>,
}

impl Workspace {
    /// Creates (if needed) and opens `<root>/<session>`.
    pub fn open(root: &Path, session: &str) -> Result<Workspace, String> {
        if session.is_empty() || session.contains(['/', '\\']) || session.starts_with('.') {
            return Err(format!("invalid session directory name {session:?}"));
        }
        let dir = root.join(session);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create workspace {}: {e}", dir.display()))?;
        let root = dir
            .canonicalize()
            .map_err(|e| format!("cannot open workspace {}: {e}", dir.display()))?;
        Ok(Workspace {
            root,
            session: session.to_owned(),
            call_id: None,
        })
    }

    /// The same workspace, for running the tool call `call_id`.
    pub fn for_call(mut self, call_id: &str) -> Workspace {
        self.call_id = Some(call_id.to_owned());
        self
    }

    /// The session this workspace belongs to.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The tool call being run, if one is.
    pub fn call_id(&self) -> Option<&str> {
        self.call_id.as_deref()
    }

    /// The workspace directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Checks a relative path lexically: not empty, not absolute, no `..`.
    fn lexical(&self, rel: &str) -> Result<PathBuf, String> {
        if rel.is_empty() {
            return Err("path is empty".into());
        }
        let p = Path::new(rel);
        for c in p.components() {
            match c {
                Component::Normal(_) | Component::CurDir => {}
                Component::ParentDir => {
                    return Err(format!("path {rel:?} leaves the workspace (..)"));
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(format!(
                        "path {rel:?} is absolute; paths are relative to the workspace"
                    ));
                }
            }
        }
        Ok(self.root.join(p))
    }

    fn inside(&self, resolved: &Path, rel: &str) -> Result<(), String> {
        if resolved.starts_with(&self.root) {
            Ok(())
        } else {
            Err(format!(
                "path {rel:?} leads outside the workspace (through a symlink)"
            ))
        }
    }

    /// An existing path to read, with every symlink resolved and checked.
    pub fn existing(&self, rel: &str) -> Result<PathBuf, String> {
        let joined = self.lexical(rel)?;
        let resolved = joined.canonicalize().map_err(|e| format!("{rel}: {e}"))?;
        self.inside(&resolved, rel)?;
        Ok(resolved)
    }

    /// A path to write: parents are created inside the workspace only, and the target may
    /// not be a symlink.
    pub fn for_write(&self, rel: &str) -> Result<PathBuf, String> {
        let joined = self.lexical(rel)?;
        let file_name = joined
            .file_name()
            .ok_or_else(|| format!("path {rel:?} names no file"))?
            .to_owned();
        let parent = joined.parent().unwrap_or(&self.root).to_path_buf();
        // Find the deepest existing ancestor and check it before creating anything below it.
        let mut existing = parent.clone();
        while !existing.exists() {
            match existing.parent() {
                Some(p) => existing = p.to_path_buf(),
                None => break,
            }
        }
        let existing = existing.canonicalize().map_err(|e| format!("{rel}: {e}"))?;
        self.inside(&existing, rel)?;
        std::fs::create_dir_all(&parent).map_err(|e| format!("{rel}: {e}"))?;
        let parent = parent.canonicalize().map_err(|e| format!("{rel}: {e}"))?;
        self.inside(&parent, rel)?;
        let target = parent.join(file_name);
        if let Ok(meta) = std::fs::symlink_metadata(&target)
            && meta.file_type().is_symlink()
        {
            return Err(format!(
                "path {rel:?} is a symlink; refusing to write through it"
            ));
        }
        Ok(target)
    }
}

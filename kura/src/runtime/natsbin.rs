//! Finding the `nats-server` binary: a configured path, then `$NATS_SERVER_BIN`, then the
//! bundle next to our own binaries, then `$PATH`.

use std::path::{Path, PathBuf};

/// Where to look, in order, and what was found.
pub fn find(configured: &str) -> Result<PathBuf, String> {
    let mut tried = Vec::new();
    let mut candidates: Vec<PathBuf> = Vec::new();
    if !configured.is_empty() {
        candidates.push(PathBuf::from(configured));
    }
    if let Some(env) = std::env::var_os("NATS_SERVER_BIN").filter(|v| !v.is_empty()) {
        candidates.push(PathBuf::from(env));
    }
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        candidates.push(dir.join("nats-server"));
        // Test binaries live one level deeper (target/debug/deps).
        if let Some(up) = dir.parent() {
            candidates.push(up.join("nats-server"));
        }
    }
    for c in candidates {
        if is_executable(&c) {
            return Ok(c);
        }
        tried.push(c.display().to_string());
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let c = dir.join("nats-server");
            if is_executable(&c) {
                return Ok(c);
            }
        }
    }
    tried.push("$PATH".into());
    Err(format!(
        "nats-server not found (tried {}); fetch it with deploy/fetch-nats-server",
        tried.join(", ")
    ))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

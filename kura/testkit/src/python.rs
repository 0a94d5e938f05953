//! The Pythons the tests and benches run: venvs under `target/`, each made once from its
//! pinned requirements (pip from PyPI) — the official `mcp` SDK and MCP servers, and Arize
//! Phoenix (an OpenTelemetry receiver).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The venv `target/<name>`, made from `tests/e2e/agents/<requirements>` unless `check`
/// (Python code) already runs in it.
fn venv(name: &str, requirements: &str, check: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let venv = root.join("target").join(name);
    let ready = Command::new(venv.join("bin/python"))
        .args(["-c", check])
        .status()
        .is_ok_and(|s| s.success());
    if !ready {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("python3");
        assert!(
            made.success(),
            "python3 -m venv failed (Debian: apt-get install python3-venv)"
        );
        // No pip cache: CI's disk holds the venv once, not twice.
        let pip = Command::new(venv.join("bin/pip"))
            .args([
                "install",
                "--quiet",
                "--no-cache-dir",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(root.join("tests/e2e/agents").join(requirements))
            .status()
            .expect("pip");
        assert!(pip.success(), "pip install of {requirements} failed");
    }
    venv
}

/// The venv's python, with the pinned `mcp` client and server SDK and the MCP servers the
/// tests use installed.
pub fn mcp_python() -> PathBuf {
    let check = "import mcp, httpx2, mcp_server_time, mcp_server_git";
    venv("mcp-venv", "requirements.txt", check).join("bin/python")
}

/// The `phoenix` command of Arize Phoenix (an OpenTelemetry receiver people watch agents
/// with), pinned.
pub fn phoenix() -> PathBuf {
    venv("phoenix-venv", "phoenix-requirements.txt", "import phoenix").join("bin/phoenix")
}

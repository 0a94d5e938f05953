//! The Python the MCP tests and benches run the official `mcp` SDK with: a venv under
//! `target/`, made once from the pinned requirements (pip from PyPI).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The venv's python, with the pinned `mcp` client and server SDK and the MCP servers the
/// tests use installed.
pub fn mcp_python() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let venv = root.join("target/mcp-venv");
    let python = venv.join("bin/python");
    let ready = Command::new(&python)
        .args(["-c", "import mcp, httpx2, mcp_server_time, mcp_server_git"])
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
        let pip = Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
            .arg(root.join("tests/e2e/agents/requirements.txt"))
            .status()
            .expect("pip");
        assert!(pip.success(), "pip install of the pinned mcp client failed");
    }
    python
}

/// The `phoenix` command of Arize Phoenix (an OpenTelemetry receiver people watch agents
/// with), pinned, in a venv under `target/` made once from PyPI.
pub fn phoenix() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let venv = root.join("target/phoenix-venv");
    let bin = venv.join("bin/phoenix");
    let ready = Command::new(venv.join("bin/python"))
        .args(["-c", "import phoenix"])
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
        let pip = Command::new(venv.join("bin/pip"))
            .args([
                "install",
                "--quiet",
                "--no-cache-dir",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(root.join("tests/e2e/agents/phoenix-requirements.txt"))
            .status()
            .expect("pip");
        assert!(
            pip.success(),
            "pip install of the pinned arize-phoenix failed"
        );
    }
    bin
}

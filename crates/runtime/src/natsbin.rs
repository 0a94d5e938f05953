//! Finding the `nats-server` binary (a configured path, then `$NATS_SERVER_BIN`, then the
//! bundle next to our own binaries, then `$PATH`), and a throwaway loopback server for
//! `kura bench` and the test suites.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where to look, in order, and what was found.
pub fn find(configured: Option<&Path>) -> Result<PathBuf, String> {
    let mut tried = Vec::new();
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(path) = configured {
        candidates.push(path.to_path_buf());
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
        "nats-server not found (tried {}); fetch it with scripts/fetch-nats-server",
        tried.join(", ")
    ))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// A running `nats-server` child process.
#[derive(Debug)]
pub struct NatsServer {
    /// The child; killed on drop.
    child: Option<Child>,
    /// The port it listens on (kept across restarts).
    pub port: u16,
    /// The binary, for restarts.
    bin: PathBuf,
}

/// A TCP port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

impl NatsServer {
    /// Starts `nats-server` on a free loopback port and waits until it accepts connections.
    /// Panics (test helper) if the binary is missing or it does not come up.
    pub fn start() -> NatsServer {
        NatsServer::try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`NatsServer::start`] without panicking (for `kura bench`).
    pub fn try_start() -> Result<NatsServer, String> {
        let bin = find(None)?;
        let mut s = NatsServer {
            child: None,
            port: free_port(),
            bin,
        };
        s.try_restart()?;
        Ok(s)
    }

    /// The client URL.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kills the server (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// (Re)starts the server on the same port. Panics (test helper) if it does not come up.
    pub fn restart(&mut self) {
        self.try_restart().unwrap_or_else(|e| panic!("{e}"));
    }

    /// [`NatsServer::restart`] without panicking.
    pub fn try_restart(&mut self) -> Result<(), String> {
        self.kill();
        let child = Command::new(&self.bin)
            .args(["-a", "127.0.0.1", "-p", &self.port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.bin.display()))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if Instant::now() >= deadline {
                return Err(format!("nats-server did not start on port {}", self.port));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

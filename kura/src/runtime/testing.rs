//! Test support used by several crates' integration tests: a real `nats-server` on a free
//! port, killed on drop (in the style of nats.rs's own test helper).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
        let bin = super::natsbin::find("").unwrap_or_else(|e| panic!("{e}"));
        let mut s = NatsServer {
            child: None,
            port: free_port(),
            bin,
        };
        s.restart();
        s
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

    /// (Re)starts the server on the same port.
    pub fn restart(&mut self) {
        self.kill();
        let child = Command::new(&self.bin)
            .args(["-a", "127.0.0.1", "-p", &self.port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.bin.display()));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nats-server did not start on {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

//! Finding the `nats-server` binary (a configured path, then `$NATS_SERVER_BIN`, then the
//! bundle next to our own binaries, then `$PATH`), and a throwaway loopback server for
//! `kura bench` and the test suites (authenticated and TLS like an installed Pi).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bus::Credentials;
use crate::identity::{self, Role};

/// Why the binary was not found, or the throwaway server not started or changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NatsError {
    /// No `nats-server` binary where one was looked for.
    #[error("nats-server not found (tried {0}); fetch it with scripts/fetch-nats-server")]
    NotFound(String),
    /// Its keys directory or config could not be made or read.
    #[error("{0}")]
    Keys(String),
    /// The binary could not be started.
    #[error("cannot start {bin}: {message}")]
    Spawn {
        /// The binary.
        bin: String,
        /// Why.
        message: String,
    },
    /// It did not come up in time.
    #[error("nats-server did not start on port {0}")]
    NotUp(u16),
    /// It is not running (so cannot be reloaded).
    #[error("nats-server is not running")]
    NotRunning,
    /// It could not be told to reload.
    #[error("cannot signal nats-server")]
    Signal,
    /// A client could not connect (or not after a reload).
    #[error("{0}")]
    Connect(String),
}

/// Where to look, in order, and what was found.
pub fn find(configured: Option<&Path>) -> Result<PathBuf, NatsError> {
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
    Err(NatsError::NotFound(tried.join(", ")))
}

fn keys_error(e: impl std::fmt::Display) -> NatsError {
    NatsError::Keys(e.to_string())
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// A running `nats-server` child process with authentication and TLS on: its own keys
/// directory (a seed per service, the CA clients pin), like an installed Pi.
#[derive(Debug)]
pub struct NatsServer {
    /// The child; killed on drop.
    child: Option<Child>,
    /// The port it listens on (kept across restarts).
    pub port: u16,
    /// The address it listens on.
    listen: String,
    /// The binary, for restarts.
    bin: PathBuf,
    /// Seeds, identities, CA and server certificate; the config file too.
    keys: tempfile::TempDir,
    /// The fleet hub it joins as a leaf node, if any.
    hub: Option<identity::HubLink>,
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
    pub fn try_start() -> Result<NatsServer, NatsError> {
        NatsServer::try_start_on("127.0.0.1", &[])
    }

    /// Starts it listening on `listen` (e.g. `0.0.0.0`), its certificate also valid for
    /// `hosts` (the addresses other machines use).
    pub fn try_start_on(listen: &str, hosts: &[String]) -> Result<NatsServer, NatsError> {
        let bin = find(None)?;
        let keys = tempfile::tempdir()
            .map_err(|e| NatsError::Keys(format!("cannot make a keys dir: {e}")))?;
        identity::init(keys.path(), hosts).map_err(keys_error)?;
        let mut s = NatsServer {
            child: None,
            port: free_port(),
            listen: listen.to_owned(),
            bin,
            keys,
            hub: None,
        };
        s.try_restart()?;
        Ok(s)
    }

    /// The client URL (loopback).
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The keys directory (`kura keys` layout).
    pub fn keys_dir(&self) -> &Path {
        self.keys.path()
    }

    /// A service's seed file.
    pub fn seed(&self, role: Role) -> PathBuf {
        identity::seed_path(self.keys.path(), role)
    }

    /// The CA clients pin.
    pub fn ca(&self) -> PathBuf {
        self.keys.path().join(identity::CA_FILE)
    }

    /// The public bus nkey of service `role` (what logs in).
    pub fn nkey(&self, role: Role) -> String {
        identity::Identities::load(self.keys.path())
            .ok()
            .and_then(|ids| ids.get(role.name()).map(|i| i.nkey.clone()))
            .unwrap_or_default()
    }

    /// The statement key of service `role` (what signs its seals and replies).
    pub fn signer(&self, role: Role) -> String {
        identity::Identities::load(self.keys.path())
            .ok()
            .and_then(|ids| ids.get(role.name()).and_then(|i| i.signer.clone()))
            .unwrap_or_default()
    }

    /// Credentials of service `role`.
    pub fn credentials(&self, role: Role) -> Result<Credentials, NatsError> {
        let key = identity::read_seed(&self.seed(role)).map_err(keys_error)?;
        Ok(Credentials {
            key: Some(Arc::new(key)),
            ca: Some(self.ca()),
        })
    }

    /// Connects as service `role`.
    pub async fn client(&self, role: Role) -> Result<async_nats::Client, NatsError> {
        self.credentials(role)?
            .connect_once(role.name(), &self.url())
            .await
            .map_err(|e| NatsError::Connect(format!("{e:#}")))
    }

    /// Lists an approver by the bus key derived from their root `key` and reloads the
    /// server; returns once they can connect.
    pub fn add_approver(&self, name: &str, key: &nkeys::KeyPair) -> Result<(), NatsError> {
        let bus = identity::bus_key(key).map_err(keys_error)?;
        identity::add_approver(self.keys.path(), name, &bus.public_key()).map_err(keys_error)?;
        self.reloaded_for(name, key)
    }

    /// Lists another Kura (its `serve` key) as a peer that may ask for cosignatures, and
    /// reloads the server; returns once `key` can connect.
    pub fn add_peer(&self, name: &str, key: &nkeys::KeyPair) -> Result<(), NatsError> {
        let bus = identity::bus_key(key).map_err(keys_error)?;
        identity::add_peer(self.keys.path(), name, &bus.public_key()).map_err(keys_error)?;
        self.reloaded_for(name, key)
    }

    fn reloaded_for(&self, name: &str, key: &nkeys::KeyPair) -> Result<(), NatsError> {
        self.reload()?;
        let creds = Credentials {
            key: Some(Arc::new(
                nkeys::KeyPair::from_seed(&key.seed().map_err(keys_error)?).map_err(keys_error)?,
            )),
            ca: Some(self.ca()),
        };
        let url = self.url();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| NatsError::Connect(e.to_string()))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if rt.block_on(creds.connect_once("probe", &url)).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(NatsError::Connect(format!(
                    "{name} cannot connect after the reload"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Rewrites the config from the keys directory and signals the server to reload it.
    pub fn reload(&self) -> Result<(), NatsError> {
        self.write_config()?;
        let pid = self
            .child
            .as_ref()
            .map(Child::id)
            .ok_or(NatsError::NotRunning)?;
        let ok = Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .map_err(|_| NatsError::Signal)?
            .success();
        if ok { Ok(()) } else { Err(NatsError::Signal) }
    }

    fn config_path(&self) -> PathBuf {
        self.keys.path().join("nats-server.conf")
    }

    fn write_config(&self) -> Result<(), NatsError> {
        let text = identity::server_config(
            &self.listen,
            self.port,
            self.keys.path(),
            &proto::subjects::Subjects::default(),
            self.hub.as_ref(),
        )
        .map_err(keys_error)?;
        std::fs::write(self.config_path(), text).map_err(keys_error)
    }

    /// Joins (or leaves, with `None`) a fleet's hub as a leaf node; takes effect on the next
    /// restart or reload.
    pub fn set_hub(&mut self, hub: Option<identity::HubLink>) {
        self.hub = hub;
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
    pub fn try_restart(&mut self) -> Result<(), NatsError> {
        self.kill();
        self.write_config()?;
        let child = Command::new(&self.bin)
            .arg("-c")
            .arg(self.config_path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| NatsError::Spawn {
                bin: self.bin.display().to_string(),
                message: e.to_string(),
            })?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if Instant::now() >= deadline {
                return Err(NatsError::NotUp(self.port));
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

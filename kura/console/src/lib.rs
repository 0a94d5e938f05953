//! Kura's console, served by `kura serve`: sessions, history, diffs, verification, daemon
//! status and memory search for people in a browser, live, and approvals signed in the
//! browser with a key the server never sees.
//!
//! The server holds no key that can approve anything: a decision is signed by the person's
//! WebCrypto Ed25519 key over the bytes PROTOCOL.md defines, from the record content the page
//! displays and hashes itself; the server only relays it to aegis, which verifies it like the
//! CLI's. Viewing needs a login — the same browser key signs a server challenge.

// What the pages show is read by kura-history (its named reads; the console writes no SQL).
use kura_history::records;
use kura_history::sessions as data;
mod auth;
mod conn;
mod pages;
mod relay;
mod server;
mod text;
mod views;
mod writs;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

pub use server::{Listening, bind};

/// `[console]`: where and for whom the console is served.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsoleConfig {
    /// Address to listen on; unset: no console. Anything but loopback needs TLS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    /// People who may log in (their browser keys); approving also needs aegis to trust them.
    pub users: Vec<User>,
    /// TLS certificate (PEM), required for a non-loopback address: the console's own
    /// (`console.pem` from `kura keys init`, never the bus server's), which browsers trust
    /// through the local CA.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<PathBuf>,
    /// A login lasts this long.
    pub session_ms: u64,
    /// Records per page of history.
    pub page_records: usize,
    /// aegis's public nkey, which signs its verdicts; unset: `aegis` in the keyring.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aegis_key: Option<String>,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig {
            listen: None,
            users: Vec::new(),
            tls_cert: None,
            tls_key: None,
            session_ms: 12 * 3_600_000,
            page_records: 200,
            aegis_key: None,
        }
    }
}

/// A person who may use the console: their name (as aegis knows them) and the public key
/// their browser made (64 hex digits, Ed25519).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct User {
    /// The approver name.
    pub name: String,
    /// Ed25519 public key, hex.
    pub public_key: String,
}

/// What the console shows beside the store: the verification settings `kura serve` uses.
#[derive(Debug, Clone, Default)]
pub struct Trust {
    /// The signer's last checkpoint file.
    pub checkpoint_file: Option<PathBuf>,
    /// Witness directories and git work trees.
    pub witnesses: Vec<String>,
    /// Peer witnesses by name.
    pub peers: Vec<String>,
    /// The pinned log verifier key (`[serve] log_verifier`) the checkpoint is checked against.
    pub log_verifier: Option<String>,
    /// Names for sealing keys (`[serve] keyring`), so a page says "sealed by hashi".
    pub sealers: Option<kura_tlog::sealer::Keyring>,
    /// The fleet (`[fleet]`) and this Pi's database, for the fleet page and the replicas.
    pub fleet: Option<(kura_fleet::FleetConfig, PathBuf)>,
    /// Whose writs and revocations count (`[writs] issuers`): a person grants from the
    /// console only when they are one of them, with the key they logged in with.
    pub issuers: Vec<kura_policy::writ::Issuer>,
    /// The object store beside the database (the files a diff shows).
    pub objects: Option<PathBuf>,
}

/// Everything a request handler needs.
pub struct Console {
    config: ConsoleConfig,
    store: Mutex<kura_store::Store>,
    bus: Option<kura_runtime::Bus>,
    aegis_key: Option<String>,
    trust: Trust,
    auth: auth::Logins,
    /// Wakes live pages: bumped by doorbells and by the database's own change counter.
    changes: tokio::sync::watch::Sender<u64>,
    tls: bool,
}

/// Shared state of the console.
pub type Shared = Arc<Console>;

impl Console {
    /// A console on `store`; `bus` relays decisions to aegis (without it the console shows
    /// but cannot decide).
    pub fn new(
        config: ConsoleConfig,
        store: kura_store::Store,
        bus: Option<kura_runtime::Bus>,
        aegis_key: Option<String>,
        trust: Trust,
    ) -> anyhow::Result<Shared> {
        for u in &config.users {
            auth::parse_key(&u.public_key)
                .map_err(|e| anyhow::anyhow!("[console] user {}: {e}", u.name))?;
        }
        let tls = config.listen.is_some_and(|a| !a.ip().is_loopback());
        Ok(Arc::new(Console {
            auth: auth::Logins::new(std::time::Duration::from_millis(config.session_ms)),
            config,
            store: Mutex::new(store),
            bus,
            aegis_key,
            trust,
            changes: tokio::sync::watch::channel(0).0,
            tls,
        }))
    }

    /// Runs `f` on the store on a blocking thread.
    /// Reads a replica of the configured peer `pi` (a name from the URL, matched against
    /// the configured peers: never a path).
    async fn read_replica<T: Send + 'static>(
        self: &Arc<Self>,
        pi: &str,
        f: impl FnOnce(&kura_store::Store) -> anyhow::Result<T> + Send + 'static,
    ) -> anyhow::Result<T> {
        let Some((config, db)) = &self.trust.fleet else {
            anyhow::bail!("this Pi is not in a fleet");
        };
        let Some(peer) = config.peers.iter().find(|p| p.name == pi) else {
            anyhow::bail!("no replica of that Pi here");
        };
        let path = kura_fleet::receive::replica_path(&config.replicas_dir(db), &peer.name);
        tokio::task::spawn_blocking(move || {
            anyhow::ensure!(path.exists(), "no replica of that Pi yet");
            let store = kura_store::Store::open(&path, &kura_store::StoreOptions::default())?;
            f(&store)
        })
        .await?
    }

    /// Runs `f` on the store, writable, on a blocking thread.
    async fn write<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&mut kura_store::Store) -> anyhow::Result<T> + Send + 'static,
    ) -> anyhow::Result<T> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            let mut store = me
                .store
                .lock()
                .map_err(|_| anyhow::anyhow!("the console's store lock is poisoned"))?;
            f(&mut store)
        })
        .await?
    }

    async fn read<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&kura_store::Store) -> anyhow::Result<T> + Send + 'static,
    ) -> anyhow::Result<T> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            let store = me
                .store
                .lock()
                .map_err(|_| anyhow::anyhow!("the console's store lock is poisoned"))?;
            f(&store)
        })
        .await?
    }
}

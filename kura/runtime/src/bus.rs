//! The NATS doorbell bus: connect as this service's identity (nkey, own inbox, pinned CA)
//! with unlimited reconnect, subscribe to pointer-only doorbells (bad messages logged with
//! their subject and counted, never fatal), ring them, answer requests with signed replies.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use base64::Engine as _;

use async_nats::{ConnectOptions, Event};
use futures::StreamExt;
use proto::doorbell::Verdicted;
use proto::subjects::Subjects;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Common, Waker};
use crate::identity;

/// What one connection authenticates with: the identity's root key (its seed: it signs the
/// replies; the bus key derived from it logs in and names the private inbox) and the CA it
/// pins.
#[derive(Clone, Default)]
pub struct Credentials {
    /// The identity; none means an anonymous client, which an authenticating server refuses.
    pub key: Option<Arc<nkeys::KeyPair>>,
    /// The bus CA; when set, TLS is required and only this CA is trusted.
    pub ca: Option<PathBuf>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the seed: only who it is.
        f.debug_struct("Credentials")
            .field("nkey", &self.key.as_ref().map(|k| k.public_key()))
            .field("ca", &self.ca)
            .finish()
    }
}

impl Credentials {
    /// From the `[common]` settings: the seed file (configured or a systemd credential) and
    /// the CA beside it or configured.
    pub fn from_common(common: &Common) -> anyhow::Result<Credentials> {
        let seed = common.seed_file();
        let key = match &seed {
            Some(path) => Some(Arc::new(identity::read_seed(path)?)),
            None => None,
        };
        Ok(Credentials {
            key,
            ca: common.ca_file(seed.as_deref()),
        })
    }

    /// Connect options for a client called `name` with these credentials.
    pub fn options(&self, name: &str) -> anyhow::Result<ConnectOptions> {
        let mut opts = match &self.key {
            Some(key) => {
                // The bus key is derived from the identity's seed and signs nothing but
                // nonces that look like nonces (never the seed's own key: it signs
                // statements, and whoever plays the server picks the nonce's bytes).
                let login = Arc::new(identity::bus_key(key)?);
                let inbox = identity::inbox_prefix(&login.public_key());
                ConnectOptions::with_auth_callback(move |nonce| {
                    std::future::ready(sign_nonce(&login, &nonce))
                })
                .custom_inbox_prefix(inbox)
            }
            None => ConnectOptions::new(),
        }
        .name(name)
        .reconnect_to_server_callback(|servers, _| std::future::ready(next_attempt(&servers)));
        if let Some(ca) = &self.ca {
            anyhow::ensure!(ca.exists(), "the bus CA {} does not exist", ca.display());
            opts = opts.add_root_certificates(ca.clone()).require_tls(true);
        }
        Ok(opts)
    }

    /// Connects once (for people's commands): a clear error when refused or unreachable.
    pub async fn connect_once(&self, name: &str, url: &str) -> anyhow::Result<async_nats::Client> {
        self.options(name)?
            .connection_timeout(Duration::from_secs(3))
            .connect(url)
            .await
            .map_err(|e| {
                // The kind, and for an I/O error its cause: a certificate problem arrives as one.
                let cause = std::error::Error::source(&e)
                    .filter(|_| e.kind() == async_nats::ConnectErrorKind::Io)
                    .map(|c| format!(": {c:?}"))
                    .unwrap_or_default();
                anyhow::anyhow!(crate::explain::connect_failure(
                    &format!("{}{cause}", e.kind()),
                    self.key.as_deref(),
                    self.ca.as_deref(),
                    url
                ))
            })
    }
}

/// Whether anything accepts a TCP connection at `url`'s first address within half a second.
async fn answers(url: &str) -> bool {
    let first = url.split(',').next().unwrap_or_default().trim();
    let authority = first.split_once("://").map_or(first, |(_, rest)| rest);
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let authority = authority.split('/').next().unwrap_or_default();
    if authority.is_empty() {
        return false;
    }
    let connect = tokio::net::TcpStream::connect(authority.to_owned());
    matches!(
        tokio::time::timeout(Duration::from_millis(500), connect).await,
        Ok(Ok(_))
    )
}

/// The CONNECT credentials for `nonce`: the bus key's public key and its signature, or a
/// refusal when the server's nonce is not a nonce (see [`identity::check_nonce`]).
fn sign_nonce(
    login: &nkeys::KeyPair,
    nonce: &[u8],
) -> Result<async_nats::Auth, async_nats::AuthError> {
    identity::check_nonce(nonce).map_err(|e| {
        tracing::error!(error = %e, "NATS login refused by this client");
        async_nats::AuthError::new(e)
    })?;
    let signature = login
        .sign(nonce)
        .map_err(|e| async_nats::AuthError::new(format!("cannot sign the nonce: {e}")))?;
    let mut auth = async_nats::Auth::new();
    auth.nkey = Some(login.public_key());
    auth.signature = Some(signature);
    Ok(auth)
}

/// Checks that `msg` (a reply) is signed by `signer` (a pinned public nkey).
pub fn verify_signed_reply(msg: &async_nats::Message, signer: &str) -> anyhow::Result<()> {
    let sig = msg
        .headers
        .as_ref()
        .and_then(|h| h.get(identity::SIGNATURE_HEADER))
        .map(|v| v.as_str().to_owned())
        .context("the reply is not signed; refusing it")?;
    identity::verify_reply(signer, msg.subject.as_str(), &msg.payload, &sig)
        .map_err(|e| anyhow::anyhow!("the reply's signature is not aegis's pinned key: {e}"))
}

/// Doorbell counters, for logs and health checks.
#[derive(Debug, Default)]
pub struct Stats {
    /// Valid doorbells received.
    pub received: AtomicU64,
    /// Malformed, oversized or unknown-field doorbells refused.
    pub rejected: AtomicU64,
    /// Doorbells rung.
    pub published: AtomicU64,
}

/// A connected (or reconnecting) doorbell bus.
#[derive(Clone, Debug)]
pub struct Bus {
    /// The NATS client; reconnects forever in the background.
    pub client: async_nats::Client,
    /// Subject builder for the configured prefix.
    pub subjects: Subjects,
    /// Counters shared by every subscription.
    pub stats: Arc<Stats>,
    /// Runtime handle, so synchronous consumer threads can ring doorbells.
    handle: tokio::runtime::Handle,
    /// Whether the connection is up, kept by the connection's own events.
    connected: Arc<AtomicBool>,
    /// Who hears of the connection coming and going.
    listeners: Arc<Listeners>,
    /// Signs this service's replies (its statement key), so askers can pin who answered.
    signer: Option<Arc<nkeys::KeyPair>>,
    /// Why the last connection attempt failed, explained.
    last_error: Arc<Mutex<Option<String>>>,
}

/// Consumers to wake on every (re)connect, and callbacks for any change of the connection.
#[derive(Default)]
struct Listeners {
    /// Woken on connect: they rescan SQLite for what they missed.
    on_connect: Mutex<Vec<Waker>>,
    /// Called on connect and on disconnect.
    on_change: Mutex<Vec<Box<dyn Fn() + Send + Sync>>>,
}

impl std::fmt::Debug for Listeners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Listeners")
    }
}

impl Listeners {
    fn changed(&self, connected: bool) {
        if connected {
            self.on_connect
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .for_each(Waker::wake);
        }
        self.on_change
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .for_each(|f| f());
    }
}

/// How long to wait before connection attempt number `attempts` (counted from 1, and from 1
/// again after each successful connection). The first try of a start or of a reconnect goes
/// out at once: a sleep there is paid by every `minato submit` and every daemon start.
/// Later tries back off 50, 100, 200 ... ms, capped at a second.
fn reconnect_delay(attempts: usize) -> Duration {
    match attempts {
        0 | 1 => Duration::ZERO,
        n => Duration::from_millis((50u64 << (n - 2).min(5)).min(1000)),
    }
}

/// The server and the delay for the next connection attempt: the one that failed least, after
/// [`reconnect_delay`] of its failures. A delay of zero is said explicitly, because async-nats
/// then skips its timer altogether; its own path sleeps even for zero, and a zero tokio
/// sleep still waits for the timer's next millisecond tick — every `aegis approve` and
/// `minato submit` paid that before its first packet.
fn next_attempt(servers: &[async_nats::Server]) -> Option<async_nats::ReconnectToServer> {
    let server = servers.iter().min_by_key(|s| s.failed_attempts)?;
    Some(async_nats::ReconnectToServer {
        addr: server.addr.clone(),
        delay: Some(reconnect_delay(server.failed_attempts.saturating_add(1))),
    })
}

/// What a request handler answers: its typed reply, or a refusal saying why not.
pub type Reply<T> = Result<T, Verdicted>;

/// A refusal as JSON bytes.
fn reply_bytes(refused: &Verdicted) -> Vec<u8> {
    // A struct of a bool and two strings always serializes.
    serde_json::to_vec(refused).unwrap_or_default()
}

/// A refusal saying `message`, as JSON bytes.
fn refusal_bytes(message: String) -> Vec<u8> {
    reply_bytes(&Verdicted::refused(message))
}

impl Bus {
    /// Connects to `common.nats_url` as `name`. Returns at once even if NATS is down: the
    /// client keeps retrying, and each (re)connect wakes the consumers registered with
    /// [`Bus::wake_on_connect`] so they rescan SQLite for anything missed while disconnected.
    pub async fn connect(common: &Common, name: &str) -> anyhow::Result<Bus> {
        let subjects = common.subjects()?;
        let listeners = Arc::new(Listeners::default());
        let connected = Arc::new(AtomicBool::new(false));
        let (up, heard) = (connected.clone(), listeners.clone());
        let credentials = Credentials::from_common(common)?;
        let last_error: Arc<Mutex<Option<String>>> = Arc::default();
        let probe_url = common.nats_url.clone();
        let (seen, why) = (last_error.clone(), {
            let (creds, url) = (credentials.clone(), common.nats_url.clone());
            move |kind: &str| {
                crate::explain::connect_failure(
                    kind,
                    creds.key.as_deref(),
                    creds.ca.as_deref(),
                    &url,
                )
            }
        });
        let client = credentials
            .options(name)?
            .retry_on_initial_connect()
            .max_reconnects(None)
            .connection_timeout(Duration::from_secs(2))
            .ping_interval(Duration::from_secs(10))
            .reconnect_delay_callback(reconnect_delay)
            .event_callback(move |event| {
                let (up, heard, seen, why) = (up.clone(), heard.clone(), seen.clone(), why.clone());
                let probe_url = probe_url.clone();
                async move {
                    match event {
                        Event::Connected => {
                            up.store(true, Ordering::SeqCst);
                            tracing::info!("NATS connected; rescanning the store");
                            heard.changed(true);
                        }
                        Event::Disconnected => {
                            up.store(false, Ordering::SeqCst);
                            tracing::warn!("NATS disconnected; polling the store until it returns");
                            heard.changed(false);
                        }
                        // A refused subscription or publish is the server's word that
                        // the permissions and the code disagree: worth a warning.
                        Event::ServerError(e) => tracing::warn!(error = %e, "NATS server error"),
                        // A failed (re)connect: said once per distinct cause, with which key
                        // or CA and what to do, and kept for commands that report it.
                        Event::ClientError(e) => {
                            let mut kind = e.to_string();
                            // async-nats says only "IO error" for a handshake that failed; a
                            // server that accepts the connection did answer (a CA or name
                            // problem, not silence).
                            if kind.to_ascii_lowercase().contains("io error")
                                && answers(&probe_url).await
                            {
                                kind.push_str(": the server answered, then TLS failed");
                            }
                            let text = why(&kind);
                            let mut last = seen.lock().unwrap_or_else(|p| p.into_inner());
                            if last.as_deref() != Some(text.as_str()) {
                                tracing::warn!("{text}");
                                *last = Some(text);
                            }
                        }
                        other => tracing::debug!(event = %other, "NATS event"),
                    }
                }
            })
            .connect(common.nats_url.as_str())
            .await?;
        Ok(Bus {
            client,
            subjects,
            stats: Arc::new(Stats::default()),
            handle: tokio::runtime::Handle::current(),
            connected,
            listeners,
            signer: credentials.key,
            last_error,
        })
    }

    /// Why the last connection attempt failed (which key or CA, what to do), if one did.
    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Wakes `waker` on every (re)connect (and once now if already connected).
    pub fn wake_on_connect(&self, waker: Waker) {
        if self.is_connected() {
            waker.wake();
        }
        self.listeners
            .on_connect
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(waker);
    }

    /// Calls `f` whenever the connection comes or goes.
    pub fn on_connection_change(&self, f: impl Fn() + Send + Sync + 'static) {
        self.listeners
            .on_change
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Box::new(f));
    }

    /// Whether NATS is reachable right now.
    pub fn is_connected(&self) -> bool {
        self.connected.load(Ordering::SeqCst)
    }

    /// Subscribes to doorbells of type `T` on `subject` (in queue group `queue` if given) and
    /// calls `on` for each valid one. Anything else is logged with its subject and counted.
    pub async fn doorbells<T, F>(
        &self,
        subject: String,
        queue: Option<String>,
        on: F,
    ) -> anyhow::Result<tokio::task::JoinHandle<()>>
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(T) + Send + 'static,
    {
        let mut sub = match queue {
            Some(q) => self.client.queue_subscribe(subject.clone(), q).await?,
            None => self.client.subscribe(subject.clone()).await?,
        };
        let stats = self.stats.clone();
        Ok(tokio::spawn(async move {
            while let Some(msg) = sub.next().await {
                match proto::doorbell::parse::<T>(&msg.payload) {
                    Ok(bell) => {
                        stats.received.fetch_add(1, Ordering::Relaxed);
                        on(bell);
                    }
                    Err(e) => {
                        let total = stats.rejected.fetch_add(1, Ordering::Relaxed) + 1;
                        tracing::warn!(
                            subject = %msg.subject,
                            error = %e,
                            rejected_total = total,
                            "rejected doorbell"
                        );
                    }
                }
            }
        }))
    }

    /// Answers requests of type `Req` on `subject`: `handler` runs on a blocking thread (it
    /// may use SQLite) and its typed answer — a `Resp`, or a [`Verdicted`] refusal saying
    /// why not — goes back to the requester as JSON. Malformed requests are logged, counted
    /// and refused, never fatal.
    pub async fn serve<Req, Resp, F>(
        &self,
        subject: String,
        handler: F,
    ) -> anyhow::Result<tokio::task::JoinHandle<()>>
    where
        Req: DeserializeOwned + Send + 'static,
        Resp: Serialize,
        F: Fn(Req) -> Reply<Resp> + Send + Sync + 'static,
    {
        self.serve_capped(subject, proto::doorbell::MAX_DOORBELL_BYTES, handler)
            .await
    }

    /// [`Bus::serve`] for requests of up to `cap` bytes.
    pub async fn serve_capped<Req, Resp, F>(
        &self,
        subject: String,
        cap: usize,
        handler: F,
    ) -> anyhow::Result<tokio::task::JoinHandle<()>>
    where
        Req: DeserializeOwned + Send + 'static,
        Resp: Serialize,
        F: Fn(Req) -> Reply<Resp> + Send + Sync + 'static,
    {
        let stats = self.stats.clone();
        let name = subject.clone();
        self.serve_raw(subject, move |payload| {
            let body = match proto::doorbell::parse_capped::<Req>(payload, cap) {
                Ok(req) => {
                    stats.received.fetch_add(1, Ordering::Relaxed);
                    match handler(req) {
                        Ok(resp) => serde_json::to_vec(&resp).unwrap_or_else(|e| {
                            refusal_bytes(format!("the answer cannot be sent: {e}"))
                        }),
                        Err(refused) => reply_bytes(&refused),
                    }
                }
                Err(e) => {
                    let total = stats.rejected.fetch_add(1, Ordering::Relaxed) + 1;
                    tracing::warn!(subject = %name, error = %e, rejected_total = total, "rejected doorbell");
                    refusal_bytes(e.to_string())
                }
            };
            (Vec::new(), body)
        })
        .await
    }

    /// Answers requests on `subject` with whatever `handler` makes of the raw payload (on a
    /// blocking thread): reply headers and body. Every reply is signed with this service's
    /// nkey, so askers can pin who answered.
    pub async fn serve_raw<F>(
        &self,
        subject: String,
        handler: F,
    ) -> anyhow::Result<tokio::task::JoinHandle<()>>
    where
        F: Fn(&[u8]) -> (Vec<(&'static str, String)>, Vec<u8>) + Send + Sync + 'static,
    {
        let mut sub = self.client.subscribe(subject.clone()).await?;
        let client = self.client.clone();
        let signer = self.signer.clone();
        let handler = Arc::new(handler);
        Ok(tokio::spawn(async move {
            while let Some(msg) = sub.next().await {
                let h = handler.clone();
                let payload = msg.payload.clone();
                let (extra, reply) = match tokio::task::spawn_blocking(move || h(&payload)).await {
                    Ok(answer) => answer,
                    Err(e) => (Vec::new(), refusal_bytes(e.to_string())),
                };
                if let Some(to) = msg.reply {
                    let bytes = reply.len();
                    let mut headers = async_nats::HeaderMap::new();
                    for (name, value) in extra {
                        headers.insert(name, value.as_str());
                    }
                    if let Some(key) = &signer {
                        match key.sign(&identity::reply_signing_bytes(&to, &reply)) {
                            Ok(sig) => headers.insert(
                                identity::SIGNATURE_HEADER,
                                base64::engine::general_purpose::STANDARD
                                    .encode(sig)
                                    .as_str(),
                            ),
                            Err(e) => tracing::error!(error = %e, "cannot sign a reply"),
                        }
                    }
                    // A reply that cannot be sent (too big for the server, connection gone)
                    // is logged: the asker would otherwise only see a timeout.
                    if let Err(e) = client.publish_with_headers(to, headers, reply.into()).await {
                        tracing::warn!(subject = %msg.subject, bytes, error = %e, "reply not sent");
                    }
                }
            }
        }))
    }

    /// Rings a doorbell (fire and forget). Safe to call from synchronous consumer threads.
    /// If NATS is down the message is dropped or buffered; consumers poll SQLite anyway.
    pub fn ring<T: Serialize>(&self, subject: String, message: &T) {
        let bytes = match proto::doorbell::encode(message) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(%subject, error = %e, "cannot encode doorbell");
                return;
            }
        };
        let client = self.client.clone();
        let stats = self.stats.clone();
        self.handle.spawn(async move {
            match client.publish(subject.clone(), bytes.into()).await {
                Ok(()) => {
                    stats.published.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => tracing::debug!(%subject, error = %e, "doorbell not sent (polling will catch up)"),
            }
        });
    }

    /// Rings a doorbell from async code, queued before this returns, so a `flush` after it
    /// carries it. [`Bus::ring`] spawns the publish: a one-shot CLI that flushes and exits at
    /// once could close before the spawned task ran (seen once in CI: a submit's doorbell
    /// never sent, the request left for the next poll).
    pub async fn ring_now<T: Serialize>(&self, subject: String, message: &T) {
        let bytes = match proto::doorbell::encode(message) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(%subject, error = %e, "cannot encode doorbell");
                return;
            }
        };
        match self.client.publish(subject.clone(), bytes.into()).await {
            Ok(()) => {
                self.stats.published.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::debug!(%subject, error = %e, "doorbell not sent (polling will catch up)")
            }
        }
    }

    /// Rings a doorbell as a NATS request and waits up to `timeout` for any reply (from a
    /// synchronous consumer thread). `false` when nobody answered in time; callers then
    /// fall back to polling SQLite, where the answer is recorded anyway.
    pub fn ring_and_wait<T: Serialize>(
        &self,
        subject: String,
        message: &T,
        timeout: Duration,
    ) -> bool {
        let Ok(bytes) = proto::doorbell::encode(message) else {
            return false;
        };
        let client = self.client.clone();
        self.handle.block_on(async move {
            matches!(
                tokio::time::timeout(timeout, client.request(subject, bytes.into())).await,
                Ok(Ok(_))
            )
        })
    }

    /// Flushes what was rung and drains subscriptions (bounded, so a dead NATS cannot hang
    /// shutdown).
    pub async fn close(&self) {
        let _ = tokio::time::timeout(Duration::from_secs(2), self.client.flush()).await;
        let _ = tokio::time::timeout(Duration::from_secs(2), self.client.drain()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_connection_attempt_does_not_wait() {
        // async-nats asks for the delay of attempt 1 before its very first try (and again
        // after each disconnect); the old curve answered 100 ms there.
        assert_eq!(reconnect_delay(1), Duration::ZERO);
        assert_eq!(reconnect_delay(0), Duration::ZERO);
        // Then it backs off, capped, so an outage does not spin.
        assert_eq!(reconnect_delay(2), Duration::from_millis(50));
        assert_eq!(reconnect_delay(3), Duration::from_millis(100));
        assert!(reconnect_delay(1_000) <= Duration::from_secs(1));
        assert!((2..64).all(|n| reconnect_delay(n) <= reconnect_delay(n + 1)));
    }

    fn server(failed_attempts: usize) -> async_nats::Server {
        async_nats::Server {
            addr: "nats://127.0.0.1:4222".parse().expect("address"),
            failed_attempts,
            did_connect: false,
            is_discovered: false,
            last_error: None,
        }
    }

    #[test]
    fn the_first_connection_attempt_skips_the_timer() {
        // A zero sleep still waits for tokio's next timer tick (up to a millisecond on every
        // fresh CLI connection); async-nats skips the sleep only for an explicit zero from
        // the server-selection callback.
        let first = next_attempt(&[server(0)]).expect("a server");
        assert_eq!(first.delay, Some(Duration::ZERO));
        // After failures it backs off as before, and prefers the server that failed least.
        let later = next_attempt(&[server(3)]).expect("a server");
        assert_eq!(later.delay, Some(reconnect_delay(4)));
        assert!(later.delay > Some(Duration::ZERO));
        assert!(next_attempt(&[]).is_none());
    }
}

/// The attack of issue 24 item 1: whoever plays the bus server picks the nonce a client signs.
#[cfg(test)]
mod nonce_attack {
    use super::*;
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

    /// Plays a NATS server that sends `nonce` and returns the CONNECT line it got, if any.
    async fn rogue_server(nonce: String) -> (String, tokio::task::JoinHandle<Option<String>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("nats://{}", listener.local_addr().expect("addr"));
        let task = tokio::spawn(async move {
            let (sock, _) = listener.accept().await.ok()?;
            let (read, mut write) = sock.into_split();
            let info = serde_json::json!({"server_id": "rogue", "version": "2.12.0",
                "proto": 1, "headers": true, "max_payload": 65536, "nonce": nonce});
            write
                .write_all(format!("INFO {info}\r\n").as_bytes())
                .await
                .ok()?;
            let mut line = String::new();
            BufReader::new(read).read_line(&mut line).await.ok()?;
            line.starts_with("CONNECT ").then_some(line)
        });
        (url, task)
    }

    async fn login(root: &Arc<nkeys::KeyPair>, nonce: &str) -> Option<serde_json::Value> {
        let (url, server) = rogue_server(nonce.to_owned()).await;
        let creds = Credentials {
            key: Some(root.clone()),
            ca: None,
        };
        // The rogue never answers PING: the connect fails either way; what matters is what
        // the client sent.
        let _ = tokio::time::timeout(Duration::from_secs(5), creds.connect_once("t", &url)).await;
        let line = server.await.expect("server task")?;
        serde_json::from_str(line.trim_start_matches("CONNECT ").trim()).ok()
    }

    #[tokio::test]
    async fn a_bus_server_cannot_get_a_statement_signed_as_a_nonce() {
        let root = Arc::new(nkeys::KeyPair::new_user());
        // The bytes a seal signature covers, and an approval decision's: sent as the nonce.
        let seal = "kura.seal.v1\nsha256:00ff";
        let approval = r#"{"approver":"oles","decision":"approve","kind":"kura.approval.v1"}"#;
        for statement in [seal, approval] {
            let connect = login(&root, statement).await;
            let signed = connect
                .as_ref()
                .and_then(|c| c["sig"].as_str())
                .and_then(|s| {
                    base64::engine::general_purpose::URL_SAFE_NO_PAD
                        .decode(s)
                        .ok()
                });
            if let Some(sig) = signed {
                assert!(
                    root.verify(statement.as_bytes(), &sig).is_err(),
                    "the statement key signed {statement:?} as a login nonce"
                );
            }
            assert!(
                connect.is_none(),
                "a nonce that is not a nonce must not be answered: {connect:?}"
            );
        }
        // A real nonce is signed, by the derived bus key only.
        let nonce = "Xk3_a-Zq09PmWtY";
        let connect = login(&root, nonce)
            .await
            .expect("a CONNECT for a real nonce");
        let bus = identity::bus_key(&root).expect("bus key");
        assert_eq!(connect["nkey"].as_str(), Some(bus.public_key().as_str()));
        assert_ne!(bus.public_key(), root.public_key());
        let sig = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(connect["sig"].as_str().expect("sig"))
            .expect("base64");
        assert!(bus.verify(nonce.as_bytes(), &sig).is_ok());
        assert!(root.verify(nonce.as_bytes(), &sig).is_err());
    }
}

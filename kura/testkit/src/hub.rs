//! A fleet's hub for tests and benchmarks: `kura fleet init-hub` on free loopback ports, one
//! real `nats-server` process per node (a JetStream cluster of 1 or 3), its stream and
//! buckets made by `kura fleet setup-hub`, and the hub operator's client to look inside.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kura_runtime::bus::Credentials;
use kura_runtime::identity::HubLink;

use crate::bin;
use crate::stack::Stack;
use kura_store::{Store, StoreOptions};

/// A running hub.
pub struct Hub {
    pub dir: tempfile::TempDir,
    pub nodes: u16,
    pub client_port: u16,
    pub leaf_port: u16,
    children: Vec<Option<Child>>,
}

/// A base port whose next `n` ports (each of three ranges) were free a moment ago.
fn free_ports(n: u16) -> u16 {
    loop {
        let base = crate::free_port();
        if base == 0 || base > 60_000 {
            continue;
        }
        let all_free = (0..n).all(|i| {
            [0u16, 100, 200]
                .iter()
                .all(|off| std::net::TcpListener::bind(("127.0.0.1", base + off + i)).is_ok())
        });
        if all_free {
            return base;
        }
    }
}

fn kura(args: &[&str]) -> String {
    crate::cli::Cli::bare().ok(args)
}

impl Hub {
    /// A hub of `nodes` (1 or 3) that lets each of `pis` join; waits until its stream and
    /// buckets exist.
    pub fn start(nodes: u16, pis: &[&str]) -> Hub {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = free_ports(nodes);
        let d = dir.path().to_str().expect("utf8").to_owned();
        let (c, r, l) = (
            base.to_string(),
            (base + 100).to_string(),
            (base + 200).to_string(),
        );
        kura(&[
            "fleet",
            "init-hub",
            "--dir",
            &d,
            "--nodes",
            &nodes.to_string(),
            "--client-port",
            &c,
            "--cluster-port",
            &r,
            "--leaf-port",
            &l,
        ]);
        for pi in pis {
            kura(&["fleet", "add-pi", pi, "--dir", &d]);
        }
        let mut hub = Hub {
            dir,
            nodes,
            client_port: base,
            leaf_port: base + 200,
            children: (0..nodes).map(|_| None).collect(),
        };
        for n in 0..nodes {
            hub.start_node(n);
        }
        hub.setup();
        hub
    }

    /// Starts node `n` (0-based) with its config; its log goes to `hub-<n+1>.log`.
    pub fn start_node(&mut self, n: u16) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("hub-{}.log", n + 1)))
            .expect("log");
        let child = Command::new(
            kura_runtime::natsbin::find(None).expect("nats-server (./scripts/fetch-nats-server)"),
        )
        .arg("-c")
        .arg(self.dir.path().join(format!("hub-{}.conf", n + 1)))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("nats-server");
        self.children[n as usize] = Some(child);
    }

    /// Node `n`'s process id, while it runs.
    pub fn pid(&self, n: u16) -> Option<u32> {
        self.children[n as usize].as_ref().map(Child::id)
    }

    /// SIGKILLs node `n`.
    pub fn kill_node(&mut self, n: u16) {
        if let Some(mut c) = self.children[n as usize].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `kura fleet setup-hub --mib-per-pi MIB` once, as the hub's operator runs it.
    pub fn setup_hub(&self, mib_per_pi: u64) -> std::process::Output {
        Command::new(bin("kura"))
            .args(["fleet", "setup-hub", "--dir"])
            .arg(self.dir.path())
            .args([
                "--url",
                &self.url(),
                "--mib-per-pi",
                &mib_per_pi.to_string(),
            ])
            .output()
            .expect("kura")
    }

    /// `kura fleet setup-hub`, retried while the cluster elects its leader.
    fn setup(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = Command::new(bin("kura"))
                .args(["fleet", "setup-hub", "--dir"])
                .arg(self.dir.path())
                .args(["--url", &self.url(), "--mib-per-pi", "64"])
                .output()
                .expect("kura");
            if out.status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the hub never came up: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Node 1's client URL.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.client_port)
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("hub-ca.pem")
    }

    pub fn admin_seed(&self) -> PathBuf {
        self.dir.path().join("hub-admin.seed")
    }

    /// How `pi`'s bus joins this hub.
    pub fn link(&self, pi: &str) -> HubLink {
        HubLink {
            urls: (0..self.nodes)
                .map(|n| format!("tls://127.0.0.1:{}", self.leaf_port + n))
                .collect(),
            seed: Some(self.dir.path().join(format!("pi-{pi}.leaf.seed"))),
            ca: Some(self.ca()),
        }
    }

    /// The operator's client on node `n`'s client port.
    pub async fn admin(&self, n: u16) -> async_nats::Client {
        let creds = Credentials {
            key: Some(std::sync::Arc::new(
                kura_runtime::identity::read_seed(&self.admin_seed()).expect("seed"),
            )),
            ca: Some(self.ca()),
        };
        creds
            .connect_once(
                "hub-admin",
                &format!("nats://127.0.0.1:{}", self.client_port + n),
            )
            .await
            .expect("admin connects")
    }
}

impl Hub {
    /// The seal-log indexes of every ledger message `pi` has on the hub, in stream order.
    pub fn ledger_indexes(&self, pi: &str) -> Vec<u64> {
        use async_nats::jetstream;
        use futures::StreamExt;
        use proto::fleet::{self, ReplMessage};
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let js = jetstream::with_domain(self.admin(0).await, fleet::DOMAIN);
            let stream = js.get_stream(fleet::stream(pi)).await.expect("stream");
            let consumer = stream
                .create_consumer(jetstream::consumer::pull::OrderedConfig {
                    filter_subject: fleet::ledger_subject(pi),
                    ..Default::default()
                })
                .await
                .expect("consumer");
            let mut messages = consumer.messages().await.expect("messages");
            let mut out = Vec::new();
            loop {
                let next = tokio::time::timeout(Duration::from_secs(2), messages.next()).await;
                let Ok(Some(Ok(m))) = next else { break };
                match serde_json::from_slice::<ReplMessage>(&m.payload).expect("body") {
                    ReplMessage::Ledger(l) => out.push(l.index),
                    other => panic!("not a ledger on the ledger subject: {other:?}"),
                }
                if m.info().expect("info").pending == 0 {
                    break;
                }
            }
            out
        })
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        for n in 0..self.nodes {
            self.kill_node(n);
        }
    }
}

/// One Pi of the fleet: its stack, its log key and witness key.
pub struct FleetPi {
    pub name: &'static str,
    pub s: Stack,
    pub log_key: PathBuf,
    pub log_vkey: String,
    pub witness_vkey: String,
}

pub fn note_key(dir: &Path, file: &str, name: &str, witness: bool) -> (PathBuf, String) {
    let path = dir.join(file);
    let mut cmd = Command::new(bin("kura"));
    cmd.args(["log-key", "init", "--out"])
        .arg(&path)
        .args(["--name", name]);
    if witness {
        cmd.arg("--witness");
    }
    let out = cmd.output().expect("kura log-key init");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let vkey = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .expect("vkey")
        .trim()
        .to_owned();
    (path, vkey)
}

impl FleetPi {
    /// A stack whose bus joins `hub` as `name`.
    pub fn new(name: &'static str, hub: &Hub, script: &str) -> FleetPi {
        let mut s = Stack::new(script);
        s.nats.set_hub(Some(hub.link(name)));
        s.nats.restart();
        let (log_key, log_vkey) = note_key(s.dir.path(), "log.key", name, false);
        let (_, witness_vkey) = note_key(
            s.dir.path(),
            "witness.key",
            &format!("{name}.witness"),
            true,
        );
        FleetPi {
            name,
            s,
            log_key,
            log_vkey,
            witness_vkey,
        }
    }

    /// Its serve.toml: sign every second, publish as itself, replicate `peers`.
    pub fn configure(&mut self, peers: &[&FleetPi]) {
        let mut text = format!(
            "[serve]\nsweep_interval_ms = 3600000\nsign_interval_ms = 1000\nlog_key = {:?}\n\
             log_verifier = {:?}\nwitness_key = {:?}\nkeyring = {:?}\n\n[fleet]\nname = {:?}\n",
            self.log_key,
            self.log_vkey,
            self.s.path("witness.key"),
            self.identities(),
            self.name
        );
        for p in peers {
            text.push_str(&format!(
                "\n[[fleet.peers]]\nname = {:?}\nlog_verifier = {:?}\nkeyring = {:?}\n",
                p.name,
                p.log_vkey,
                p.identities()
            ));
        }
        std::fs::write(self.s.path("serve.toml"), text).expect("serve.toml");
        self.s.extra_env.push((
            "KURA_SERVE_CONFIG".into(),
            self.s.path("serve.toml").display().to_string(),
        ));
    }

    /// Its install's identities (public keys): its `[serve] keyring`, and the keyring the
    /// other Pis hold its seals to.
    pub fn identities(&self) -> PathBuf {
        self.s
            .nats
            .keys_dir()
            .join(kura_runtime::identity::IDENTITIES_FILE)
    }

    pub fn replica_path(&self, origin: &str) -> PathBuf {
        self.s.path(&format!("replicas/{origin}.db"))
    }

    /// Leaves of this Pi's own seal log.
    pub fn size(&self) -> u64 {
        kura_tlog::seallog::size(&self.s.store().seal_log()).expect("size")
    }

    /// Leaves its replica of `origin` verified (0 when it has none yet).
    pub fn replica_size(&self, origin: &str) -> u64 {
        let path = self.replica_path(origin);
        if !path.exists() {
            return 0;
        }
        let Ok(r) = Store::open(&path, &StoreOptions::default()) else {
            return 0;
        };
        kura_tlog::seallog::size(&r.seal_log()).unwrap_or(0)
    }

    /// Waits until its replica of `origin` holds all `n` of its leaves.
    pub fn wait_replica(&self, origin: &FleetPi, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let want = origin.size();
            if want > 0 && self.replica_size(origin.name) == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: {}'s replica of {} has {} of {want} leaves\n--- {} serve\n{}\n--- {} serve\n{}",
                self.name,
                origin.name,
                self.replica_size(origin.name),
                self.name,
                self.s.log("serve"),
                origin.name,
                origin.s.log("serve")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn kura(&self, args: &[&str]) -> std::process::Output {
        Command::new(bin("kura"))
            .args(args)
            .env("KURA_SERVE_CONFIG", self.s.path("serve.toml"))
            .env_remove("KURA_DB")
            .output()
            .expect("kura")
    }
}

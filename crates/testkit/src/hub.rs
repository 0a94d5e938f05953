//! A fleet's hub for tests and benchmarks: `kura fleet init-hub` on free loopback ports, one
//! real `nats-server` process per node (a JetStream cluster of 1 or 3), its stream and
//! buckets made by `kura fleet setup-hub`, and the hub operator's client to look inside.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kura_runtime::bus::Credentials;
use kura_runtime::identity::HubLink;

use crate::bin;

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
    let out = Command::new(bin("kura")).args(args).output().expect("kura");
    assert!(
        out.status.success(),
        "kura {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl Hub {
    /// A hub of `nodes` (1 or 3) that lets each of `pis` join; waits until its stream and
    /// buckets exist.
    pub fn start(nodes: u16, pis: &[&str]) -> Hub {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = free_ports(nodes);
        let d = dir.path().to_str().expect("utf8").to_owned();
        let (c, r, l) = (base.to_string(), (base + 100).to_string(), (base + 200).to_string());
        kura(&[
            "fleet", "init-hub", "--dir", &d, "--nodes", &nodes.to_string(), "--client-port", &c,
            "--cluster-port", &r, "--leaf-port", &l,
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
        let child = Command::new(kura_runtime::natsbin::find(None).expect("nats-server (./scripts/fetch-nats-server)"))
            .arg("-c")
            .arg(self.dir.path().join(format!("hub-{}.conf", n + 1)))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("nats-server");
        self.children[n as usize] = Some(child);
    }

    /// SIGKILLs node `n`.
    pub fn kill_node(&mut self, n: u16) {
        if let Some(mut c) = self.children[n as usize].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `kura fleet setup-hub`, retried while the cluster elects its leader.
    fn setup(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = Command::new(bin("kura"))
                .args(["fleet", "setup-hub", "--url", &self.url(), "--seed"])
                .arg(self.admin_seed())
                .arg("--ca")
                .arg(self.ca())
                .args(["--replicas", &self.nodes.to_string()])
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
            .connect_once("hub-admin", &format!("nats://127.0.0.1:{}", self.client_port + n))
            .await
            .expect("admin connects")
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        for n in 0..self.nodes {
            self.kill_node(n);
        }
    }
}

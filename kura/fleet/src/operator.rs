//! A fleet's hub, as files: `kura fleet init-hub` writes the nats-server config of each hub
//! node (a JetStream cluster of 1 or 3 in domain `hub`, TLS, nkey users only, a leaf-node
//! listener), the hub's CA and certificate and the operator's seed; `kura fleet add-pi`
//! gives a Pi a leaf key allowed to publish only under its own name, and rewrites the configs.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use kura_runtime::identity;
use proto::fleet;
use serde::{Deserialize, Serialize};

use kura_runtime::bus::Credentials;

/// The hub's description, `hub.toml` in its directory; the node configs are made from it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Hub {
    nodes: u16,
    /// The address every node listens on.
    host: String,
    /// How Pis and the other nodes reach each node (one per node); empty: `host`.
    #[serde(default)]
    advertise: Vec<String>,
    client_port: u16,
    cluster_port: u16,
    leaf_port: u16,
    /// Where the nodes keep their JetStream data.
    data_dir: PathBuf,
    /// Routes between hub nodes authenticate with this (never leaves the hub's directory).
    route_password: String,
    /// The operator's bus key (from `hub-admin.seed`).
    admin: String,
    #[serde(default)]
    pis: Vec<HubPi>,
}

/// A Pi that may join as a leaf node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct HubPi {
    name: String,
    /// The public key of its leaf seed.
    nkey: String,
}

const HUB_FILE: &str = "hub.toml";
const CA: &str = "hub-ca.pem";
const CERT: &str = "hub-server.pem";
const KEY: &str = "hub-server-key.pem";
const ADMIN_SEED: &str = "hub-admin.seed";

/// Where the hub is and who connects to it.
#[derive(Debug, clap::Args)]
pub struct HubConn {
    /// A hub node's client URL (`tls://hub.lan:4222`).
    #[arg(long)]
    pub url: String,
    /// The identity's seed file: the hub operator's `hub-admin.seed`, or on the Pi its
    /// `serve` seed when its bus is joined to the hub.
    #[arg(long)]
    pub seed: PathBuf,
    /// The CA of the server at `--url` (`hub-ca.pem`, or the Pi's `nats-ca.pem`).
    #[arg(long)]
    pub ca: Option<PathBuf>,
}

/// `kura fleet restore`.
#[derive(Debug, clap::Args)]
pub struct Restore {
    /// The Pi to restore (its fleet name).
    pub pi: String,
    /// Its log's verifier key (kept off the Pi: the fleet's config, a witness, a note).
    #[arg(long)]
    pub log_verifier: String,
    /// The new database (must not exist).
    #[arg(long)]
    pub to: PathBuf,
    /// Where the signer's head goes (`[serve] checkpoint_file`; on an installed Pi
    /// `/var/lib/kura-serve/checkpoint`); default: `<to>.checkpoint`. Must not exist.
    #[arg(long)]
    pub checkpoint_file: Option<PathBuf>,
    #[command(flatten)]
    /// The hub to restore from.
    pub hub: HubConn,
}

/// A small runtime for one command.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

impl HubConn {
    /// Connects with the seed and CA given.
    pub async fn connect(&self) -> anyhow::Result<async_nats::Client> {
        let creds = Credentials {
            key: Some(std::sync::Arc::new(kura_runtime::identity::read_seed(
                &self.seed,
            )?)),
            ca: self.ca.clone(),
        };
        creds.connect_once("kura-fleet", &self.url).await
    }
}

impl Restore {
    /// Restores the Pi; returns what to tell the person.
    pub fn run(self, people: Vec<kura_policy::writ::Issuer>) -> anyhow::Result<String> {
        proto::fleet::check_pi_name(&self.pi)?;
        anyhow::ensure!(
            !self.to.exists(),
            "{} exists: restore builds a new database (move the old one away first)",
            self.to.display()
        );
        let files = kura_objects::Objects::beside(&self.to);
        anyhow::ensure!(
            !files.exists(),
            "{} exists: the restored workspaces' files go there (move the old one away first)",
            files.display()
        );
        let head = kura_tlog::witness::head_file(self.checkpoint_file.as_deref(), &self.to);
        anyhow::ensure!(
            !head.exists(),
            "{} exists: it is an older signer's head; move it away so the restored log's own checkpoint takes its place",
            head.display()
        );
        let dir = self
            .to
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(std::path::Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        let peer = crate::FleetPeer {
            name: self.pi.clone(),
            log_verifier: self.log_verifier.clone(),
            keyring: None,
        };
        let rt = runtime()?;
        let built = tempfile::Builder::new()
            .prefix(".kura-restore-")
            .tempdir_in(&dir)
            .with_context(|| format!("cannot write in {}", dir.display()))?;
        let (size, note) = rt.block_on(async {
            let client = self.hub.connect().await?;
            // A restore holds at most one checkpoint's batch at a time, like a receiver.
            let r =
                crate::receive::Receiver::new(client, &peer, None, built.path(), 256 << 20, None)
                    .await?
                    .with_people(people);
            anyhow::Ok(r.catch_up().await?)
        })?;
        let db = crate::receive::replica_path(built.path(), &self.pi);
        std::fs::rename(&db, &self.to).with_context(|| {
            format!("cannot move the restored database to {}", self.to.display())
        })?;
        // The workspaces' files came with the ledgers that name them: beside the database,
        // where hashi and `kura workspace restore` find them.
        let fetched = kura_objects::Objects::beside(&db);
        if fetched.is_dir() {
            std::fs::rename(&fetched, &files).with_context(|| {
                format!("cannot move the restored files to {}", files.display())
            })?;
        }
        kura_tlog::witness::save_last(&head, &note)?;
        Ok(format!(
            "restored {}: {size} sealed ledgers verified against its checkpoint at size {size}; \
             {} holds that checkpoint, so its signer continues the same log (restore the log key and \
             the bus keys from their backup; work in flight is not replicated); each session's \
             files come back at its next turn, or now with `kura workspace restore SESSION --root DIR`",
            self.to.display(),
            head.display()
        ))
    }
}

/// `kura fleet init-hub`.
#[derive(Debug, clap::Args)]
pub struct InitHub {
    /// The hub's directory (configs and keys).
    #[arg(long)]
    dir: PathBuf,
    /// Where each node keeps its JetStream data (`js-<n>` under it); default: `--dir`.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Hub nodes: 1, or 3 for a cluster that survives one node's loss.
    #[arg(long, default_value_t = 1)]
    nodes: u16,
    /// The address the nodes listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Names the hub's certificate is valid for besides localhost (its LAN name).
    #[arg(long = "hostname")]
    hostnames: Vec<String>,
    /// How Pis and the other nodes reach node n (give it once per node, in order; e.g. the
    /// three machines' LAN names); default: `--host`, or the first `--hostname` when the
    /// host is 0.0.0.0.
    #[arg(long = "node-address")]
    node_addresses: Vec<String>,
    /// Client port of node 1 (node n listens on this + n - 1).
    #[arg(long, default_value_t = 4222)]
    client_port: u16,
    /// Route port of node 1.
    #[arg(long, default_value_t = 6222)]
    cluster_port: u16,
    /// Leaf-node port of node 1 (Pis dial it).
    #[arg(long, default_value_t = 7422)]
    leaf_port: u16,
}

/// `kura fleet setup-hub`.
#[derive(Debug, clap::Args)]
pub struct SetupHub {
    /// The hub's directory (`hub.toml`, its operator's seed and CA).
    #[arg(long)]
    dir: PathBuf,
    /// A node's client URL; default: node 1's from `hub.toml`.
    #[arg(long)]
    url: Option<String>,
    /// What one Pi's history may take on the hub (its stream, and again its large bodies),
    /// in MiB; when full, the hub refuses more and the Pi's publisher retries.
    #[arg(long, default_value_t = 1024)]
    mib_per_pi: i64,
}

/// The hub operator's connection from the hub's directory: node 1's client URL from
/// `hub.toml` unless `url` is given, `hub-admin.seed` and the hub's CA.
fn operator(dir: &Path, hub: &Hub, url: Option<String>) -> HubConn {
    let url = url.unwrap_or_else(|| {
        let host = hub
            .advertise
            .first()
            .cloned()
            .unwrap_or_else(|| hub.host.clone());
        format!("tls://{host}:{}", hub.client_port)
    });
    HubConn {
        url,
        seed: dir.join(ADMIN_SEED),
        ca: Some(dir.join(CA)),
    }
}

/// `kura fleet reseat`.
#[derive(Debug, clap::Args)]
pub struct Reseat {
    /// The Pi whose publisher halted.
    pub pi: String,
    /// The stream sequence its ALARM names (a message on its place it never published).
    #[arg(long)]
    pub seq: u64,
    /// The hub's directory (`hub.toml`, its operator's seed and CA).
    #[arg(long)]
    pub dir: PathBuf,
    /// A node's client URL; default: node 1's from `hub.toml`.
    #[arg(long)]
    pub url: Option<String>,
}

impl Reseat {
    /// Puts the Pi's own last ledger back on top; says what was done.
    pub fn run(self) -> anyhow::Result<String> {
        fleet::check_pi_name(&self.pi)?;
        let hub = read_hub(&self.dir)?;
        let conn = operator(&self.dir, &hub, self.url.clone());
        let (from, now) = runtime()?.block_on(async {
            let js = async_nats::jetstream::with_domain(conn.connect().await?, fleet::DOMAIN);
            anyhow::Ok(crate::hub::reseat(&js, &self.pi, self.seq).await?)
        })?;
        Ok(format!(
            "{pi}'s ledger at {from} is on top again at {now} (the message at {} stays: streams deny deleting; receivers drop it); on {pi} remove replicas/{pi}.publish.alarm and restart kura serve",
            self.seq,
            pi = self.pi
        ))
    }
}

impl SetupHub {
    /// Makes what is missing on the hub.
    pub fn run(self) -> anyhow::Result<String> {
        let hub = read_hub(&self.dir)?;
        let conn = operator(&self.dir, &hub, self.url.clone());
        let pis: Vec<String> = hub.pis.iter().map(|p| p.name.clone()).collect();
        let quota = crate::hub::Quota {
            replicas: usize::from(hub.nodes),
            bytes_per_pi: self.mib_per_pi.saturating_mul(1 << 20),
        };
        runtime()?.block_on(async {
            let js = async_nats::jetstream::with_domain(conn.connect().await?, fleet::DOMAIN);
            crate::hub::setup(&js, &pis, quota).await.map_err(|e| match e {
                // JetStream reserves each quota on the node's disk up front.
                crate::FleetError::HubFull(_) => anyhow::anyhow!(
                    "{e}: the hub's disk cannot reserve {} MiB for each of {} Pi(s) twice over; lower --mib-per-pi",
                    self.mib_per_pi,
                    pis.len()
                ),
                e => e.into(),
            })
        })?;
        Ok(format!(
            "hub ready: the bucket {} and, for each of {} Pi(s), its stream and object store ({} copies, {} MiB each)",
            fleet::CHECKPOINTS_BUCKET,
            pis.len(),
            hub.nodes,
            self.mib_per_pi
        ))
    }
}

/// `kura fleet add-pi`.
#[derive(Debug, clap::Args)]
pub struct AddPi {
    /// The Pi's fleet name.
    name: String,
    /// The hub's directory.
    #[arg(long)]
    dir: PathBuf,
}

fn random_hex(bytes: usize) -> anyhow::Result<String> {
    let mut b = vec![0u8; bytes];
    getrandom::fill(&mut b).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    Ok(hex::encode(b))
}

impl InitHub {
    /// Writes the hub's directory.
    pub fn run(self) -> anyhow::Result<String> {
        anyhow::ensure!(
            self.nodes == 1 || self.nodes == 3,
            "--nodes must be 1 or 3 (JetStream needs a majority: 3 nodes survive one loss)"
        );
        anyhow::ensure!(
            !self.dir.join(HUB_FILE).exists(),
            "{} already holds a hub; add Pis with `kura fleet add-pi`",
            self.dir.display()
        );
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("cannot create {}", self.dir.display()))?;
        anyhow::ensure!(
            self.node_addresses.is_empty() || self.node_addresses.len() == usize::from(self.nodes),
            "--node-address: give one per node ({} of them), or none",
            self.nodes
        );
        let advertise = if !self.node_addresses.is_empty() {
            self.node_addresses.clone()
        } else if self.host == "0.0.0.0" || self.host == "::" {
            let name = self.hostnames.first().cloned().ok_or_else(|| {
                anyhow::anyhow!("--host {} is no address a Pi can dial: add --hostname NAME (the hub's LAN name) or --node-address", self.host)
            })?;
            vec![name; usize::from(self.nodes)]
        } else {
            Vec::new()
        };
        let mut hosts: Vec<String> =
            vec!["localhost".into(), "127.0.0.1".into(), self.host.clone()];
        hosts.extend(self.hostnames.iter().cloned());
        hosts.extend(advertise.iter().cloned());
        hosts.sort();
        hosts.dedup();
        let (ca, cert, key) = identity::server_certificate(&hosts)?;
        identity::write_new(&self.dir.join(CA), ca.as_bytes(), 0o644)?;
        identity::write_new(&self.dir.join(CERT), cert.as_bytes(), 0o644)?;
        identity::write_new(&self.dir.join(KEY), key.as_bytes(), 0o600)?;
        let admin = nkeys::KeyPair::new_user();
        let seed = admin
            .seed()
            .map_err(|e| anyhow::anyhow!("cannot encode a seed: {e}"))?;
        identity::write_new(&self.dir.join(ADMIN_SEED), seed.as_bytes(), 0o600)?;
        let hub = Hub {
            nodes: self.nodes,
            host: self.host,
            advertise,
            client_port: self.client_port,
            cluster_port: self.cluster_port,
            leaf_port: self.leaf_port,
            data_dir: self.data_dir.clone().unwrap_or_else(|| self.dir.clone()),
            route_password: random_hex(24)?,
            admin: identity::bus_key(&admin)?.public_key(),
            pis: Vec::new(),
        };
        write_hub(&self.dir, &hub)?;
        Ok(format!(
            "hub of {} node(s) in {}: add Pis with `kura fleet add-pi NAME --dir {}`, run `nats-server -c hub-<n>.conf` per node \
             (the kura-hub@<n> unit), then `kura fleet setup-hub --dir {}`",
            hub.nodes,
            self.dir.display(),
            self.dir.display(),
            self.dir.display()
        ))
    }
}

impl AddPi {
    /// Adds the Pi's leaf key and rewrites the node configs.
    pub fn run(self) -> anyhow::Result<String> {
        fleet::check_pi_name(&self.name)?;
        let mut hub = read_hub(&self.dir)?;
        anyhow::ensure!(
            hub.pis.iter().all(|p| p.name != self.name),
            "{} is already in the hub; each Pi joins once",
            self.name
        );
        let leaf = nkeys::KeyPair::new_user();
        let seed = leaf
            .seed()
            .map_err(|e| anyhow::anyhow!("cannot encode a seed: {e}"))?;
        let seed_file = self.dir.join(format!("pi-{}.leaf.seed", self.name));
        identity::write_new(&seed_file, seed.as_bytes(), 0o600)?;
        hub.pis.push(HubPi {
            name: self.name.clone(),
            nkey: leaf.public_key(),
        });
        write_hub(&self.dir, &hub)?;
        let urls: Vec<String> = (0..hub.nodes)
            .map(|n| format!("\"tls://{}:{}\"", node_address(&hub, n), hub.leaf_port + n))
            .collect();
        Ok(format!(
            "{} may join: copy {} to the Pi as /etc/kura/fleet/leaf.seed (0600) and {} as \
             /etc/kura/fleet/hub-ca.pem; in mikado.toml set\n[nats.hub]\nurls = [{}]\n\
             (README: A fleet of Pis, for mikado's credentials), and in serve.toml [fleet] name = \"{}\". \
             Reload the hub nodes (systemctl reload kura-hub@*, or kill -HUP).",
            self.name,
            seed_file.display(),
            self.dir.join(CA).display(),
            urls.join(", "),
            self.name
        ))
    }
}

fn read_hub(dir: &Path) -> anyhow::Result<Hub> {
    let path = dir.join(HUB_FILE);
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "cannot read {} (make the hub with `kura fleet init-hub`)",
            path.display()
        )
    })?;
    toml::from_str(&text).with_context(|| format!("{} is not a hub description", path.display()))
}

/// Writes `hub.toml` and every node's config (replaced whole, 0600: they hold the route
/// password).
fn write_hub(dir: &Path, hub: &Hub) -> anyhow::Result<()> {
    let write = |name: &str, text: String| -> anyhow::Result<()> {
        use std::os::unix::fs::MetadataExt as _;
        let path = dir.join(name);
        let tmp = dir.join(format!(".{name}.new"));
        let _ = std::fs::remove_file(&tmp);
        identity::write_new(&tmp, text.as_bytes(), 0o600)?;
        // The hub's nodes run as their own user (kura): a config rewritten by root keeps the
        // owner the old one had, or a reload could no longer read it.
        if let Ok(old) = std::fs::metadata(&path) {
            std::os::unix::fs::chown(&tmp, Some(old.uid()), Some(old.gid()))
                .with_context(|| format!("cannot give {} its old owner", tmp.display()))?;
        }
        std::fs::rename(&tmp, &path).with_context(|| format!("cannot replace {}", path.display()))
    };
    write(HUB_FILE, toml::to_string(hub)?)?;
    for n in 0..hub.nodes {
        write(&format!("hub-{}.conf", n + 1), node_config(dir, hub, n))?;
    }
    Ok(())
}

/// What a Pi's leaf connection may send to the hub (publish) and receive from it
/// (subscribe) — leaf permissions are from the Pi's side. Only its own subjects and
/// checkpoint, read-only JetStream calls, and replies to its inboxes; no doorbell crosses.
pub fn leaf_permissions(pi: &str) -> (Vec<String>, Vec<String>) {
    let d = format!("$JS.{}.API", fleet::DOMAIN);
    let kv = fleet::CHECKPOINTS_BUCKET;
    let publish = vec![
        fleet::pi_subjects(pi),
        format!("{d}.INFO"),
        format!("{d}.STREAM.INFO.>"),
        format!("{d}.STREAM.MSG.GET.>"),
        format!("{d}.DIRECT.GET.>"),
        format!("{d}.CONSUMER.CREATE.>"),
        format!("{d}.CONSUMER.INFO.>"),
        format!("{d}.CONSUMER.DELETE.>"),
        format!("{d}.CONSUMER.MSG.NEXT.>"),
        "$JS.FC.>".into(),
        "$JS.ACK.>".into(),
        format!("$KV.{kv}.{pi}"),
        format!("$KV.{kv}.*.cosig.{pi}"),
        format!("{d}.$KV.{kv}.{pi}"),
        format!("{d}.$KV.{kv}.*.cosig.{pi}"),
        format!("$O.{}.>", fleet::objects_bucket(pi)),
        format!("{d}.$O.{}.>", fleet::objects_bucket(pi)),
    ];
    (publish, vec!["_INBOX.>".into()])
}

fn quoted(items: &[String]) -> String {
    items
        .iter()
        .map(|i| format!("{i:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How Pis and other nodes reach node `n`.
fn node_address(hub: &Hub, n: u16) -> &str {
    hub.advertise
        .get(usize::from(n))
        .map_or(hub.host.as_str(), String::as_str)
}

fn node_config(dir: &Path, hub: &Hub, n: u16) -> String {
    let path = |f: &str| format!("{:?}", dir.join(f).display().to_string());
    let mut c = String::new();
    let _ = writeln!(
        c,
        "# Generated by kura fleet from hub.toml; rewritten by `kura fleet add-pi`."
    );
    let _ = writeln!(c, "server_name: \"kura-hub-{}\"", n + 1);
    let _ = writeln!(c, "host: {:?}\nport: {}", hub.host, hub.client_port + n);
    let store = hub.data_dir.join(format!("js-{}", n + 1));
    let _ = writeln!(
        c,
        "jetstream {{\n  store_dir: {:?}\n  domain: {:?}\n}}",
        store.display().to_string(),
        fleet::DOMAIN
    );
    let tls = format!(
        "tls {{\n    cert_file: {}\n    key_file: {}\n    ca_file: {}\n    timeout: 3\n  }}",
        path(CERT),
        path(KEY),
        path(CA)
    );
    let _ = writeln!(c, "{}", tls.replace("\n  ", "\n"));
    if hub.nodes > 1 {
        let routes: Vec<String> = (0..hub.nodes)
            .filter(|m| *m != n)
            .map(|m| {
                format!(
                    "\"nats-route://route:{}@{}:{}\"",
                    hub.route_password,
                    node_address(hub, m),
                    hub.cluster_port + m
                )
            })
            .collect();
        let _ = writeln!(
            c,
            "cluster {{\n  name: \"kura-hub\"\n  host: {:?}\n  port: {}\n  authorization {{ user: \"route\", password: {:?}, timeout: 3 }}\n  {tls}\n  routes: [{}]\n}}",
            hub.host,
            hub.cluster_port + n,
            hub.route_password,
            routes.join(", ")
        );
    }
    let _ = writeln!(
        c,
        "leafnodes {{\n  host: {:?}\n  port: {}\n  {tls}\n}}",
        hub.host,
        hub.leaf_port + n
    );
    let _ = writeln!(c, "authorization {{\n  timeout: 3\n  users = [");
    let _ = writeln!(
        c,
        "    # the hub's operator\n    {{ nkey: {:?} }}",
        hub.admin
    );
    for pi in &hub.pis {
        let (publish, subscribe) = leaf_permissions(&pi.name);
        let _ = writeln!(
            c,
            "    # Pi {}\n    {{ nkey: {:?}, permissions: {{ publish: {{ allow: [{}] }}, subscribe: {{ allow: [{}] }} }} }}",
            pi.name,
            pi.nkey,
            quoted(&publish),
            quoted(&subscribe)
        );
    }
    let _ = writeln!(c, "  ]\n}}");
    c
}

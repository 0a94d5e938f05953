//! Bus identities: one NATS nkey per daemon, per approver and for the operator, each allowed
//! exactly its subjects — the nats-server `authorization` block they make, and the keys
//! directory `kura keys init` writes (seeds, `identities.toml`, the pinned CA and the server
//! certificate).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use proto::subjects::Subjects;
use serde::{Deserialize, Serialize};

/// The public list of who may connect, in a keys directory.
pub const IDENTITIES_FILE: &str = "identities.toml";
/// The local CA clients pin (public).
pub const CA_FILE: &str = "nats-ca.pem";
/// The server certificate, signed by the local CA.
pub const SERVER_CERT_FILE: &str = "nats-server.pem";
/// The server certificate's private key (0600).
pub const SERVER_KEY_FILE: &str = "nats-server-key.pem";
/// The console's own HTTPS certificate, signed by the same local CA (so browsers that trust
/// the CA trust it), for the same hosts. The HTTP-facing process never holds the bus
/// server's key: whoever holds that can play the bus server.
pub const CONSOLE_CERT_FILE: &str = "console.pem";
/// The console certificate's private key (0600).
pub const CONSOLE_KEY_FILE: &str = "console-key.pem";
/// A service's seed is `<name>.nk` (0600); under systemd it arrives as this credential.
pub const SEED_CREDENTIAL: &str = "nats.nk";
/// The CA under systemd's credentials directory.
pub const CA_CREDENTIAL: &str = "nats-ca.pem";

/// What an identity may do on the bus. Each role's subjects are listed in PROTOCOL.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Role {
    /// The orchestrator.
    Minato,
    /// An executor (every hashi instance shares it; only it may join the `hashi` queue).
    Hashi,
    /// The approval daemon (the only responder on its request subjects).
    Aegis,
    /// Memory extraction.
    Mikado,
    /// `kura serve`: answers other Kuras' witness requests (and nothing else).
    Serve,
    /// `minato submit` run by a person.
    Submit,
    /// A person who approves: asks aegis, never answers.
    Approver,
    /// Another Kura whose seal log this one witnesses: may only ask for a cosignature.
    Peer,
    /// Debugging only: may publish and subscribe everything.
    Operator,
}

impl Role {
    /// The services `kura keys init` makes a seed for, by name.
    pub const SERVICES: [Role; 7] = [
        Role::Minato,
        Role::Hashi,
        Role::Aegis,
        Role::Mikado,
        Role::Serve,
        Role::Submit,
        Role::Operator,
    ];

    /// Whether identities of this role are listed by name with a key made elsewhere (people
    /// and other Kuras) rather than being one of this install's services.
    pub fn is_listed(self) -> bool {
        matches!(self, Role::Approver | Role::Peer)
    }

    /// The role's name (also its seed file's stem for services).
    pub fn name(self) -> &'static str {
        match self {
            Role::Minato => "minato",
            Role::Hashi => "hashi",
            Role::Aegis => "aegis",
            Role::Mikado => "mikado",
            Role::Serve => "serve",
            Role::Submit => "submit",
            Role::Approver => "approver",
            Role::Peer => "peer",
            Role::Operator => "operator",
        }
    }
}

/// One entry of `identities.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Identity {
    /// A service's role name, or an approver's name.
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// Its public NATS user nkey (`U…`, 56 characters): what logs in to the bus, and
    /// nothing else. A service's is derived from its seed under [`BUS_LABEL`].
    pub nkey: String,
    /// A service's statement key (`U…`): the public key of its seed, which signs seals and
    /// replies and never logs in to the bus. Unset for approvers and peers, whose statement
    /// keys live elsewhere (aegis's approvers, a witness's verifier key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
    /// A service's earlier statement keys, newest first (`kura keys rotate` keeps them): each
    /// still verifies the seals it made before it stopped, and nothing after.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired: Vec<Retired>,
}

/// A statement key a service signed with before a rotation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retired {
    /// The key (`U…`).
    pub key: String,
    /// The seal-log size when it was retired: it verifies seals below this position only
    /// (and never past its successor's first seal). Unset when the rotation could not read
    /// the store; then only the successor's first seal bounds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<u64>,
}

/// Why the keys directory could not be read or changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdentityError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A file's content is wrong (bad TOML, a bad key, a duplicate).
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What was wrong.
        message: String,
    },
    /// The caller asked for something that cannot be done (an existing directory, an
    /// unknown name).
    #[error("{0}")]
    Refused(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> IdentityError + '_ {
    move |source| IdentityError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Everyone who may connect.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Identities {
    /// People taken off with `kura keys remove`: aegis refuses their decisions however they
    /// arrive (their own bus key, or the console's relay), until they are added again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
    /// In file order.
    #[serde(default, rename = "identity")]
    pub list: Vec<Identity>,
}

/// Why a name, a key, a list of identities or a nonce is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// A name that is not one word of letters, digits, `-` and `_`.
    #[error("invalid name {0:?}: letters, digits, '-' and '_' only (at most 64)")]
    Name(String),
    /// An nkey that is not a user's.
    #[error("{0:?} is not a user nkey (must start with U)")]
    NotUser(String),
    /// Not an nkey at all.
    #[error("{nkey:?} is not an nkey: {message}")]
    NotNkey {
        /// What was given.
        nkey: String,
        /// Why it does not decode.
        message: String,
    },
    /// A key pair cannot be made from a secret.
    #[error("{0}")]
    Derive(String),
    /// A list of identities that breaks a rule (a name or key twice, a service unnamed
    /// after its role, a list from before keys were split).
    #[error("{0}")]
    Listing(String),
    /// The server's nonce is not a nonce: it is not signed.
    #[error(
        "the server sent a {0}-byte nonce that is not 1–{MAX_NONCE} base64url characters; \
         refusing to sign it (is something other than Kura's nats-server on this port?)"
    )]
    Nonce(usize),
}

/// Why a reply's signature is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplyError {
    /// The pinned key is not a public nkey.
    #[error("{0}")]
    Key(String),
    /// The signature header is not base64.
    #[error("signature is not base64: {0}")]
    NotBase64(String),
    /// The signature is not the pinned key's over this reply.
    #[error("the signature does not match the pinned key")]
    Mismatch,
}

/// An approver's or service's name: one word a subject-free file name can carry.
fn check_name(name: &str) -> Result<(), KeyError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(KeyError::Name(name.to_owned()))
    }
}

/// Whether `nkey` is a public user nkey (prefix `U`, valid checksum).
pub fn check_user_nkey(nkey: &str) -> Result<[u8; 32], KeyError> {
    match nkeys::from_public_key(nkey) {
        Ok((_, bytes)) if nkey.starts_with('U') => Ok(bytes),
        Ok(_) => Err(KeyError::NotUser(nkey.to_owned())),
        Err(e) => Err(KeyError::NotNkey {
            nkey: nkey.to_owned(),
            message: e.to_string(),
        }),
    }
}

impl Identities {
    /// Reads and checks `identities.toml` in `dir`: names and keys are unique and well formed.
    pub fn load(dir: &Path) -> Result<Identities, IdentityError> {
        Identities::load_file(&dir.join(IDENTITIES_FILE))
    }

    /// Reads and checks an identities file wherever it is (a copy serves as a keyring).
    pub fn load_file(path: &Path) -> Result<Identities, IdentityError> {
        let path = path.to_path_buf();
        let text = std::fs::read_to_string(&path).map_err(io(&path))?;
        let ids: Identities = toml::from_str(&text).map_err(|e| IdentityError::Invalid {
            path: path.display().to_string(),
            message: e.message().to_owned(),
        })?;
        ids.check().map_err(|e| IdentityError::Invalid {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Ok(ids)
    }

    fn check(&self) -> Result<(), KeyError> {
        let (mut names, mut keys) = (BTreeSet::new(), BTreeSet::new());
        for id in &self.list {
            check_name(&id.name)?;
            check_user_nkey(&id.nkey)?;
            if !names.insert(&id.name) {
                return Err(KeyError::Listing(format!(
                    "the name {:?} is listed twice",
                    id.name
                )));
            }
            // One key, one purpose: no key logs in for one identity and signs for another
            // (or for itself).
            for key in std::iter::once(&id.nkey)
                .chain(id.signer.as_ref())
                .chain(id.retired.iter().map(|r| &r.key))
            {
                if !keys.insert(key) {
                    return Err(KeyError::Listing(format!(
                        "a key of {:?} is listed twice (one key, one identity, one purpose)",
                        id.name
                    )));
                }
            }
            for r in &id.retired {
                check_user_nkey(&r.key)?;
            }
            match (&id.signer, id.role.is_listed()) {
                (Some(signer), _) => {
                    check_user_nkey(signer)?;
                }
                (None, false) => {
                    return Err(KeyError::Listing(format!(
                        "the service {:?} has no `signer`: this list was made before bus and \
                         statement keys were split; run `kura keys upgrade --dir DIR`",
                        id.name
                    )));
                }
                (None, true) => {}
            }
            if !id.role.is_listed() && id.name != id.role.name() {
                return Err(KeyError::Listing(format!(
                    "{:?}: a service identity is named after its role ({:?})",
                    id.name,
                    id.role.name()
                )));
            }
        }
        Ok(())
    }

    /// Writes `identities.toml` into `dir` (replacing it atomically).
    pub fn save(&self, dir: &Path) -> Result<(), IdentityError> {
        self.check()
            .map_err(|e| IdentityError::Refused(e.to_string()))?;
        let mut text = String::from(
            "# Kura's bus identities: who may connect to NATS and as what (public keys only).\n\
             # Managed with `kura keys`; mikado builds the nats-server authorization from it.\n",
        );
        text.push_str(&toml::to_string(self).map_err(|e| IdentityError::Refused(e.to_string()))?);
        let path = dir.join(IDENTITIES_FILE);
        let tmp = tempfile::NamedTempFile::new_in(dir).map_err(io(dir))?;
        std::fs::write(tmp.path(), text).map_err(io(tmp.path()))?;
        tmp.persist(&path).map_err(|e| IdentityError::Io {
            path: path.display().to_string(),
            source: e.error,
        })?;
        Ok(())
    }

    /// The identity called `name`.
    pub fn get(&self, name: &str) -> Option<&Identity> {
        self.list.iter().find(|i| i.name == name)
    }
}

/// Where an identity's replies arrive: its own inbox subtree, which nobody else may read.
pub fn inbox_prefix(nkey: &str) -> String {
    format!("_INBOX.{nkey}")
}

/// Publish and subscribe allow lists (a subscribe entry may name a queue group after a space).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permissions {
    /// Subjects it may publish to.
    pub publish: Vec<String>,
    /// Subjects it may subscribe to.
    pub subscribe: Vec<String>,
    /// Whether it may answer the requests it receives (once each).
    pub allow_responses: bool,
}

/// Exactly what `role` may do under `s`'s prefix, with its inbox for replies.
pub fn permissions(role: Role, s: &Subjects, nkey: &str) -> Permissions {
    let inbox = format!("{}.>", inbox_prefix(nkey));
    let (publish, subscribe, allow_responses) = match role {
        Role::Minato => (
            vec![s.worker_dispatch(), s.session_complete()],
            vec![s.session_create(), s.worker_complete(), inbox],
            false,
        ),
        Role::Hashi => (
            vec![s.worker_complete(), s.tool_approve()],
            // Only as a member of the `hashi` queue: a plain subscriber would see every
            // turn's doorbell, a rogue queue member would swallow them.
            vec![format!("{} hashi", s.worker_dispatch()), inbox],
            false,
        ),
        Role::Aegis => (
            vec![s.worker_dispatch(), s.approval_decided()],
            vec![
                s.tool_approve(),
                s.approval_decide(),
                s.approval_pending(),
                s.approval_fetch(),
                inbox,
            ],
            true,
        ),
        Role::Mikado => (
            vec![s.record_written()],
            vec![s.worker_complete(), inbox],
            false,
        ),
        // Answers witness requests; its console relays people's signed decisions and
        // listens to the doorbells that make pages live; its agents gateway rings what an
        // outside agent's work needs (aegis for a ruling, minato for a delegated task,
        // minato and mikado for a finished turn) and is woken by decisions; in a fleet it
        // publishes and reads replication through the hub's JetStream (the hub limits it to
        // its own name).
        Role::Serve => (
            vec![
                s.approval_decide(),
                s.tool_approve(),
                s.session_create(),
                s.worker_complete(),
                format!("{}.>", proto::fleet::SUBJECT_PREFIX),
                format!("$JS.{}.API.>", proto::fleet::DOMAIN),
                "$JS.ACK.>".into(),
                "$JS.FC.>".into(),
                format!("$KV.{}.>", proto::fleet::CHECKPOINTS_BUCKET),
                "$O.*.>".into(),
            ],
            vec![
                s.witness_add_checkpoint(),
                s.approval_decided(),
                s.record_written(),
                s.worker_complete(),
                s.session_complete(),
                s.session_create(),
                inbox,
            ],
            true,
        ),
        Role::Submit => (
            vec![s.session_create()],
            vec![s.session_complete(), inbox],
            false,
        ),
        Role::Approver => (
            vec![
                s.approval_decide(),
                s.approval_pending(),
                s.approval_fetch(),
            ],
            vec![inbox],
            false,
        ),
        Role::Peer => (vec![s.witness_add_checkpoint()], vec![inbox], false),
        Role::Operator => (vec![">".into()], vec![">".into()], false),
    };
    Permissions {
        publish,
        subscribe,
        allow_responses,
    }
}

fn quoted_list(items: &[String]) -> String {
    let inner: Vec<String> = items.iter().map(|i| format!("{i:?}")).collect();
    format!("[{}]", inner.join(", "))
}

fn allow_or_deny(items: &[String]) -> String {
    if items.is_empty() {
        // An empty allow list is not "nothing"; say it.
        "{ deny: [\">\"] }".into()
    } else {
        format!("{{ allow: {} }}", quoted_list(items))
    }
}

/// The nats-server `authorization` block for `ids`: nkey users only, each with its allow lists.
pub fn server_authorization(ids: &Identities, s: &Subjects) -> String {
    // `timeout`: a client that has not authenticated in 3 s is dropped.
    let mut out = String::from("authorization {\n  timeout: 3\n  users = [\n");
    for id in &ids.list {
        let p = permissions(id.role, s, &id.nkey);
        let _ = writeln!(
            out,
            "    # {} ({})\n    {{ nkey: {:?}, permissions: {{ publish: {}, subscribe: {}{} }} }}",
            id.name,
            id.role.name(),
            id.nkey,
            allow_or_deny(&p.publish),
            allow_or_deny(&p.subscribe),
            if p.allow_responses {
                ", allow_responses: true"
            } else {
                ""
            }
        );
    }
    out.push_str("  ]\n}\n");
    out
}

/// The nats-server `tls` block for the certificate in `dir`.
pub fn server_tls(dir: &Path) -> String {
    format!(
        "tls {{\n  cert_file: {:?}\n  key_file: {:?}\n  timeout: 3\n}}\n",
        dir.join(SERVER_CERT_FILE).display().to_string(),
        dir.join(SERVER_KEY_FILE).display().to_string()
    )
}

/// How a Pi's bus joins a fleet's hub as a leaf node: it dials out (no inbound port on the
/// Pi), logs in with its own leaf seed (`kura fleet add-pi`), and pins the hub's CA.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HubLink {
    /// The hub nodes' leaf-node URLs (`tls://hub.lan:7422`, one per node).
    pub urls: Vec<String>,
    /// The Pi's leaf seed file; unset: systemd's `$CREDENTIALS_DIRECTORY/hub-leaf.seed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<PathBuf>,
    /// The hub's CA (`hub-ca.pem`); unset: `$CREDENTIALS_DIRECTORY/hub-ca.pem`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<PathBuf>,
}

impl HubLink {
    /// A configured file, or the systemd credential of that name.
    fn file(configured: Option<&PathBuf>, credential: &str) -> Result<PathBuf, IdentityError> {
        configured
            .cloned()
            .or_else(|| std::env::var_os("CREDENTIALS_DIRECTORY").map(|d| PathBuf::from(d).join(credential)))
            .ok_or_else(|| {
                IdentityError::Refused(
                    "[nats.hub] needs the Pi's leaf seed and the hub's CA: set seed and ca, or hand \
                     them over as the systemd credentials hub-leaf.seed and hub-ca.pem"
                        .into(),
                )
            })
    }
}

/// The `leafnodes` block joining `hub`: no doorbell (`<prefix>.>`) crosses either way, so
/// the hub and the other Pis never see this Pi's pointers nor ring its daemons.
fn leaf_remote(hub: &HubLink, s: &Subjects) -> Result<String, IdentityError> {
    let seed = read_seed(&HubLink::file(hub.seed.as_ref(), "hub-leaf.seed")?)?
        .seed()
        .map_err(|e| IdentityError::Refused(format!("cannot encode the leaf seed: {e}")))?;
    let ca = HubLink::file(hub.ca.as_ref(), "hub-ca.pem")?;
    if !ca.exists() {
        return Err(IdentityError::Refused(format!(
            "the hub's CA {} is missing (copy hub-ca.pem from the hub's directory)",
            ca.display()
        )));
    }
    let doorbells = format!("{:?}", format!("{}.>", s.prefix()));
    Ok(format!(
        "leafnodes {{\n  remotes = [\n    {{\n      urls: {}\n      nkey: {seed:?}\n      \
         tls {{ ca_file: {:?}, timeout: 3 }}\n      deny_exports: [{doorbells}]\n      \
         deny_imports: [{doorbells}]\n    }}\n  ]\n}}\n",
        quoted_list(&hub.urls),
        ca.display().to_string()
    ))
}

/// The whole nats-server config for listening on `host:port` with the identities, server
/// certificate and key in `keys_dir`: nobody connects without an nkey listed there, and
/// nobody without TLS; with `hub`, it joins the fleet's hub as a leaf node.
pub fn server_config(
    host: &str,
    port: u16,
    keys_dir: &Path,
    s: &Subjects,
    hub: Option<&HubLink>,
) -> Result<String, IdentityError> {
    let ids = Identities::load(keys_dir)?;
    for f in [SERVER_CERT_FILE, SERVER_KEY_FILE] {
        let path = keys_dir.join(f);
        if !path.exists() {
            return Err(IdentityError::Refused(format!(
                "{} is missing: the bus needs its TLS certificate (`kura keys init`)",
                path.display()
            )));
        }
    }
    let leaf = match hub {
        Some(h) => leaf_remote(h, s)?,
        None => String::new(),
    };
    Ok(format!(
        "# Generated from {}; rewritten on every start.\n\
         host: {host:?}\n\
         port: {port}\n\
         server_name: \"kura-{port}\"\n\
         # Doorbells are pointers of at most 1 KiB; replies are paged to fit.\n\
         max_payload: 65536\n\
         {}{}{leaf}",
        keys_dir.join(IDENTITIES_FILE).display(),
        server_authorization(&ids, s),
        server_tls(keys_dir)
    ))
}

/// Writes `bytes` to a new file at `path` with `mode`, refusing to replace anything.
pub fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), IdentityError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(io(path))?;
    f.write_all(bytes).map_err(io(path))?;
    f.sync_all().map_err(io(path))
}

/// A fresh user seed written to `dir/<name>.nk` (0600); returns the service's identity:
/// the bus key derived from it and the seed's own (statement) key.
fn new_seed(dir: &Path, role: Role) -> Result<Identity, IdentityError> {
    let kp = nkeys::KeyPair::new_user();
    let seed = kp
        .seed()
        .map_err(|e| IdentityError::Refused(format!("cannot encode a seed: {e}")))?;
    write_new(&seed_path(dir, role), seed.as_bytes(), 0o600)?;
    service_identity(role, &kp)
}

/// A service's list entry for its seed `root`.
fn service_identity(role: Role, root: &nkeys::KeyPair) -> Result<Identity, IdentityError> {
    Ok(Identity {
        name: role.name().into(),
        role,
        nkey: bus_key(root)?.public_key(),
        signer: Some(root.public_key()),
        retired: Vec::new(),
    })
}

/// What `kura keys init` made.
#[derive(Debug, Clone)]
pub struct Initialized {
    /// The identities written.
    pub identities: Identities,
    /// Names the server certificate is valid for.
    pub hosts: Vec<String>,
}

/// Makes a keys directory: a seed per service, `identities.toml`, and a local CA with a
/// server certificate for `hosts` (plus localhost and 127.0.0.1). The CA's private key is
/// never written: a new certificate means a new CA, which clients pin again.
pub fn init(dir: &Path, hosts: &[String]) -> Result<Initialized, IdentityError> {
    use std::os::unix::fs::DirBuilderExt as _;
    if dir.join(IDENTITIES_FILE).exists() {
        return Err(IdentityError::Refused(format!(
            "{} already holds identities; rotate single keys with `kura keys rotate NAME`",
            dir.display()
        )));
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io(dir))?;
    let mut ids = Identities::default();
    for role in Role::SERVICES {
        ids.list.push(new_seed(dir, role)?);
    }
    let mut all_hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    for h in hosts {
        if !all_hosts.contains(h) {
            all_hosts.push(h.clone());
        }
    }
    let made = certificates(&all_hosts, false)?;
    write_new(&dir.join(CA_FILE), made.ca.as_bytes(), 0o644)?;
    for (name, (cert, key)) in [
        (SERVER_CERT_FILE, &made.server),
        (CONSOLE_CERT_FILE, &made.console),
    ] {
        let key_file = if name == SERVER_CERT_FILE {
            SERVER_KEY_FILE
        } else {
            CONSOLE_KEY_FILE
        };
        write_new(&dir.join(name), cert.as_bytes(), 0o644)?;
        write_new(&dir.join(key_file), key.as_bytes(), 0o600)?;
    }
    ids.save(dir)?;
    Ok(Initialized {
        identities: ids,
        hosts: all_hosts,
    })
}

/// A fresh CA (its key dropped) and one server certificate for `hosts`, all PEM: (CA,
/// certificate, key) — for a fleet's hub.
/// Its certificate serves clients and leaf nodes and also logs in to the other hub nodes
/// (routes authenticate both ways).
pub fn server_certificate(hosts: &[String]) -> Result<(String, String, String), IdentityError> {
    let made = certificates(hosts, true)?;
    Ok((made.ca, made.server.0, made.server.1))
}

/// A local CA's certificate and two leaves it signed, all PEM.
struct Certificates {
    ca: String,
    /// The bus server's (certificate, key).
    server: (String, String),
    /// The console's (certificate, key).
    console: (String, String),
}

/// A fresh CA and its two leaves for `hosts`; the CA's key is dropped here.
fn certificates(hosts: &[String], routes: bool) -> Result<Certificates, IdentityError> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let fail = |e: rcgen::Error| IdentityError::Refused(format!("cannot make a certificate: {e}"));
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(fail)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "Kura local bus CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_key = KeyPair::generate().map_err(fail)?;
    let ca = ca_params.self_signed(&ca_key).map_err(fail)?;
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf = |common_name: &str| -> Result<(String, String), IdentityError> {
        let mut params = CertificateParams::new(hosts.to_vec()).map_err(fail)?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        if routes {
            params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ClientAuth);
        }
        let key = KeyPair::generate().map_err(fail)?;
        let cert = params.signed_by(&key, &issuer).map_err(fail)?;
        Ok((cert.pem(), key.serialize_pem()))
    };
    Ok(Certificates {
        ca: ca.pem(),
        server: leaf("Kura nats-server")?,
        console: leaf("Kura console")?,
    })
}

/// Lists an approver: `nkey` is their bus key, derived from their key file under
/// [`BUS_LABEL`] (`aegis keygen` prints it); the file's own key signs decisions only.
pub fn add_approver(dir: &Path, name: &str, nkey: &str) -> Result<Identity, IdentityError> {
    add_listed(dir, name, Role::Approver, nkey)
}

/// Lists another Kura whose seal log this one witnesses: `nkey` is that Kura's `serve`
/// identity's bus key (its `kura keys list` shows it); it may only ask for cosignatures.
pub fn add_peer(dir: &Path, name: &str, nkey: &str) -> Result<Identity, IdentityError> {
    add_listed(dir, name, Role::Peer, nkey)
}

fn add_listed(dir: &Path, name: &str, role: Role, nkey: &str) -> Result<Identity, IdentityError> {
    let mut ids = Identities::load(dir)?;
    check_name(name).map_err(|e| IdentityError::Refused(e.to_string()))?;
    check_user_nkey(nkey).map_err(|e| IdentityError::Refused(e.to_string()))?;
    if ids.get(name).is_some() {
        return Err(IdentityError::Refused(format!(
            "{name:?} is already listed; remove it first to replace its key"
        )));
    }
    let id = Identity {
        name: name.into(),
        role,
        nkey: nkey.into(),
        signer: None,
        retired: Vec::new(),
    };
    // Added again: no longer removed.
    ids.removed.retain(|n| n != name);
    ids.list.push(id.clone());
    ids.save(dir)?;
    Ok(id)
}

/// Removes an approver or a peer from the list.
/// Returns what left the bus list: none for a person who approved only through the console
/// (no bus key); either way the name is recorded as removed, so aegis refuses their
/// decisions (see [`Identities::removed`]).
pub fn remove(dir: &Path, name: &str) -> Result<Option<Identity>, IdentityError> {
    let mut ids = Identities::load(dir)?;
    check_name(name).map_err(|e| IdentityError::Refused(e.to_string()))?;
    let gone = match ids.list.iter().position(|i| i.name == name) {
        Some(pos) if !ids.list[pos].role.is_listed() => {
            return Err(IdentityError::Refused(format!(
                "{name:?} is a service; rotate its key with `kura keys rotate {name}` instead"
            )));
        }
        Some(pos) => Some(ids.list.remove(pos)),
        None => None,
    };
    if gone.as_ref().is_none_or(|g| g.role == Role::Approver)
        && !ids.removed.iter().any(|n| n == name)
    {
        ids.removed.push(name.to_owned());
    }
    ids.save(dir)?;
    Ok(gone)
}

/// Gives service `name` a new seed (the old one stops working once mikado restarts). The old
/// statement key is kept as retired, valid for seals below `seal_log_size` (the seal log's
/// size now, when the caller could read the store).
pub fn rotate(
    dir: &Path,
    name: &str,
    seal_log_size: Option<u64>,
) -> Result<Identity, IdentityError> {
    let mut ids = Identities::load(dir)?;
    let Some(id) = ids.list.iter_mut().find(|i| i.name == name) else {
        return Err(IdentityError::Refused(format!(
            "no identity named {name:?}"
        )));
    };
    if id.role.is_listed() {
        return Err(IdentityError::Refused(format!(
            "{name:?} is an approver or a peer: its owner makes a new key, then \
             `kura keys remove {name}` and add it again"
        )));
    }
    let seed_path = seed_path(dir, id.role);
    let old = dir.join(format!("{name}.nk.old"));
    std::fs::rename(&seed_path, &old).map_err(io(&seed_path))?;
    let fresh = match new_seed(dir, id.role) {
        Ok(k) => k,
        Err(e) => {
            let _ = std::fs::rename(&old, &seed_path);
            return Err(e);
        }
    };
    let _ = std::fs::remove_file(&old);
    id.nkey = fresh.nkey;
    // The old statement key keeps verifying what it sealed before its successor began.
    if let Some(old) = id.signer.take() {
        id.retired.insert(
            0,
            Retired {
                key: old,
                until: seal_log_size,
            },
        );
    }
    id.signer = fresh.signer;
    let id = id.clone();
    ids.save(dir)?;
    Ok(id)
}

/// The label a bus key is derived under. One key, one purpose: the key that logs in to NATS
/// signs whatever nonce the server sends, so whoever plays the server chooses its bytes. It
/// must never be a key that signs Kura statements (seals, replies, decisions, checkpoints).
pub const BUS_LABEL: &str = "nats-login";

/// The 32-byte secret for `label` derived from an identity's root secret:
/// SHA-256("kura.key.v1" ‖ 0x00 ‖ label ‖ 0x00 ‖ root). A person keeps one file; each purpose
/// gets a key no other purpose's signature can stand in for.
pub fn derive_secret(root: &[u8; 32], label: &str) -> [u8; 32] {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    h.update(b"kura.key.v1\0");
    h.update(label.as_bytes());
    h.update(b"\0");
    h.update(root);
    h.finalize().into()
}

/// An identity's root key from its 32-byte secret (an approver's key file): it signs
/// statements; the bus credentials derive the bus key from it ([`bus_key`]).
pub fn root_key_from_secret(secret: [u8; 32]) -> Result<nkeys::KeyPair, KeyError> {
    nkeys::KeyPair::new_from_raw(nkeys::KeyPairType::User, secret)
        .map_err(|e| KeyError::Derive(e.to_string()))
}

/// The bus (NATS login) key of the identity whose root secret is `secret` — a service's seed
/// or an approver's key file.
pub fn bus_key_from_secret(secret: [u8; 32]) -> Result<nkeys::KeyPair, KeyError> {
    nkeys::KeyPair::new_from_raw(nkeys::KeyPairType::User, derive_secret(&secret, BUS_LABEL))
        .map_err(|e| KeyError::Derive(e.to_string()))
}

/// The bus key of the identity whose root key (its seed) is `root`.
pub fn bus_key(root: &nkeys::KeyPair) -> Result<nkeys::KeyPair, IdentityError> {
    let bad = |e: String| IdentityError::Refused(format!("cannot derive the bus key: {e}"));
    let seed = root.seed().map_err(|e| bad(e.to_string()))?;
    let (_, raw) = nkeys::decode_seed(&seed).map_err(|e| bad(e.to_string()))?;
    bus_key_from_secret(raw).map_err(|e| bad(e.to_string()))
}

/// The longest nonce signed. nats-server sends 11 random bytes as 15 base64url characters;
/// anything longer, or with a byte outside that alphabet, is not a nonce.
pub const MAX_NONCE: usize = 64;

/// Whether `nonce` looks like a server nonce (1–64 base64url characters) and nothing else: a
/// Kura statement always carries a `.`, a newline or JSON punctuation, so it never passes.
pub fn check_nonce(nonce: &[u8]) -> Result<(), KeyError> {
    let ok = !nonce.is_empty()
        && nonce.len() <= MAX_NONCE
        && nonce
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_');
    if ok {
        Ok(())
    } else {
        Err(KeyError::Nonce(nonce.len()))
    }
}

/// The console's CA when a keys directory predates the console's own certificate: the bus
/// CA's key was never kept, so the console's certificate is signed by a CA of its own, which
/// browsers trust instead of `nats-ca.pem`.
pub const CONSOLE_CA_FILE: &str = "console-ca.pem";

/// What `kura keys upgrade` did.
#[derive(Debug, Clone, Default)]
pub struct Upgraded {
    /// Approvers and peers, whose bus keys only their owners can derive: each must be listed
    /// again with the key their `aegis keygen` / `kura keys list` now shows.
    pub relist: Vec<Identity>,
    /// Whether the console got its own certificate (and `console-ca.pem` to trust).
    pub console_certificate: bool,
}

/// Rewrites an `identities.toml` made before bus and statement keys were split: each service
/// whose seed is in `dir` gets its derived bus key as `nkey` and its seed's key as `signer`.
/// A directory without the console's own certificate gets one for `hosts` (plus localhost),
/// under a console CA of its own.
pub fn upgrade(dir: &Path, hosts: &[String]) -> Result<Upgraded, IdentityError> {
    let console_certificate = !dir.join(CONSOLE_CERT_FILE).exists();
    if console_certificate {
        let mut all: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
        all.extend(
            hosts
                .iter()
                .filter(|h| !all.contains(h))
                .cloned()
                .collect::<Vec<_>>(),
        );
        let made = certificates(&all, false)?;
        write_new(&dir.join(CONSOLE_CA_FILE), made.ca.as_bytes(), 0o644)?;
        write_new(
            &dir.join(CONSOLE_CERT_FILE),
            made.console.0.as_bytes(),
            0o644,
        )?;
        write_new(
            &dir.join(CONSOLE_KEY_FILE),
            made.console.1.as_bytes(),
            0o600,
        )?;
    }
    let relist = upgrade_list(dir)?;
    Ok(Upgraded {
        relist,
        console_certificate,
    })
}

fn upgrade_list(dir: &Path) -> Result<Vec<Identity>, IdentityError> {
    let path = dir.join(IDENTITIES_FILE);
    let text = std::fs::read_to_string(&path).map_err(io(&path))?;
    let mut ids: Identities = toml::from_str(&text).map_err(|e| IdentityError::Invalid {
        path: path.display().to_string(),
        message: e.message().to_owned(),
    })?;
    for id in ids.list.iter_mut().filter(|i| !i.role.is_listed()) {
        if id.signer.is_none() {
            let root = read_seed(&seed_path(dir, id.role))?;
            *id = service_identity(id.role, &root)?;
        }
    }
    ids.save(dir)?;
    Ok(ids
        .list
        .into_iter()
        .filter(|i| i.role.is_listed())
        .collect())
}

/// Reads a seed file, refusing one others can read (like ssh does with private keys).
pub fn read_seed(path: &Path) -> Result<nkeys::KeyPair, IdentityError> {
    use std::os::unix::fs::PermissionsExt as _;
    let meta = std::fs::metadata(path).map_err(io(path))?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(IdentityError::Invalid {
            path: path.display().to_string(),
            message: format!(
                "a seed readable by others (mode {:o}) is refused; chmod 600 it",
                meta.permissions().mode() & 0o777
            ),
        });
    }
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    nkeys::KeyPair::from_seed(text.trim()).map_err(|e| IdentityError::Invalid {
        path: path.display().to_string(),
        message: format!("not an nkey seed: {e}"),
    })
}

/// The seed file for a service in a keys directory.
pub fn seed_path(dir: &Path, role: Role) -> PathBuf {
    dir.join(format!("{}.nk", role.name()))
}

/// The bytes a reply signature covers: a label, the reply subject (fresh for every request,
/// so an old reply cannot be replayed to a new question) and the payload.
pub fn reply_signing_bytes(reply_to: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + reply_to.len() + 16);
    out.extend_from_slice(b"kura.reply.v1\n");
    out.extend_from_slice(reply_to.as_bytes());
    out.push(b'\n');
    out.extend_from_slice(payload);
    out
}

/// The header carrying a reply's signature (standard base64 of the 64 Ed25519 bytes).
pub const SIGNATURE_HEADER: &str = "Kura-Signature";

/// Checks a reply signed by `signer` (a public nkey) under [`reply_signing_bytes`].
pub fn verify_reply(
    signer: &str,
    reply_to: &str,
    payload: &[u8],
    signature_b64: &str,
) -> Result<(), ReplyError> {
    use base64::Engine as _;
    let key =
        nkeys::KeyPair::from_public_key(signer).map_err(|e| ReplyError::Key(e.to_string()))?;
    let sig = base64::engine::general_purpose::STANDARD
        .decode(signature_b64.trim())
        .map_err(|e| ReplyError::NotBase64(e.to_string()))?;
    key.verify(&reply_signing_bytes(reply_to, payload), &sig)
        .map_err(|_| ReplyError::Mismatch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_writes_private_seeds_and_a_consistent_list() {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("keys");
        let made = init(&dir, &["192.0.2.2".into()]).expect("init");
        assert!(made.hosts.contains(&"192.0.2.2".to_string()));
        let ids = Identities::load(&dir).expect("load");
        assert_eq!(ids, made.identities);
        for role in Role::SERVICES {
            let path = seed_path(&dir, role);
            let mode = std::fs::metadata(&path).expect("seed").permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{}", path.display());
            let kp = read_seed(&path).expect("seed");
            let id = ids.get(role.name()).expect("listed");
            // One key, one purpose: the seed's key signs, a key derived from it logs in.
            assert_eq!(id.signer, Some(kp.public_key()));
            assert_eq!(id.nkey, bus_key(&kp).expect("bus").public_key());
            assert_ne!(id.nkey, kp.public_key());
        }
        for f in [CONSOLE_KEY_FILE, SERVER_KEY_FILE] {
            let mode = std::fs::metadata(dir.join(f))
                .expect("key")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{f}");
        }
        assert_ne!(
            std::fs::read(dir.join(CONSOLE_KEY_FILE)).expect("console key"),
            std::fs::read(dir.join(SERVER_KEY_FILE)).expect("server key"),
            "the console has a key of its own"
        );
        let key_mode = std::fs::metadata(dir.join(SERVER_KEY_FILE))
            .expect("key")
            .permissions()
            .mode();
        assert_eq!(key_mode & 0o777, 0o600);
        assert!(
            init(&dir, &[]).is_err(),
            "a second init must not replace keys"
        );
    }

    #[test]
    fn a_key_listed_twice_or_a_bad_key_is_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        init(tmp.path(), &[]).expect("init");
        let ids = Identities::load(tmp.path()).expect("load");
        let minato = ids.get("minato").expect("minato").nkey.clone();
        let err = add_approver(tmp.path(), "mallory", &minato).expect_err("duplicate key");
        assert!(err.to_string().contains("twice"), "{err}");
        let seed = read_seed(&seed_path(tmp.path(), Role::Hashi))
            .expect("seed")
            .seed()
            .expect("seed");
        assert!(
            add_approver(tmp.path(), "eve", &seed).is_err(),
            "a seed is not a public key"
        );
        assert!(add_approver(tmp.path(), "a.b", &nkeys::KeyPair::new_user().public_key()).is_err());
        assert_eq!(
            Identities::load(tmp.path()).expect("load"),
            ids,
            "unchanged"
        );
    }

    #[test]
    fn rotating_a_service_changes_its_key_and_seed_together() {
        let tmp = tempfile::tempdir().expect("tempdir");
        init(tmp.path(), &[]).expect("init");
        let before = Identities::load(tmp.path()).expect("load");
        let after = rotate(tmp.path(), "hashi", None).expect("rotate");
        assert_ne!(before.get("hashi").map(|i| &i.nkey), Some(&after.nkey));
        let seed = read_seed(&seed_path(tmp.path(), Role::Hashi)).expect("seed");
        assert_eq!(Some(seed.public_key()), after.signer);
        assert_eq!(bus_key(&seed).expect("bus").public_key(), after.nkey);
        assert_eq!(
            Identities::load(tmp.path()).expect("load").get("hashi"),
            Some(&after)
        );
    }

    #[test]
    fn a_seed_others_can_read_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = tempfile::tempdir().expect("tempdir");
        init(tmp.path(), &[]).expect("init");
        let path = seed_path(tmp.path(), Role::Minato);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let err = read_seed(&path).expect_err("world-readable");
        assert!(err.to_string().contains("chmod 600"), "{err}");
    }

    #[test]
    fn hashi_may_only_join_the_hashi_queue_and_approvers_only_ask() {
        let s = Subjects::default();
        let key = nkeys::KeyPair::new_user().public_key();
        let hashi = permissions(Role::Hashi, &s, &key);
        assert!(
            hashi
                .subscribe
                .contains(&"oclaw.v1.hashi.cmd.worker.dispatch hashi".to_string())
        );
        let approver = permissions(Role::Approver, &s, &key);
        assert!(!approver.allow_responses);
        assert!(approver.subscribe == vec![format!("_INBOX.{key}.>")]);
        assert!(permissions(Role::Aegis, &s, &key).allow_responses);
    }

    #[test]
    fn reply_signatures_bind_the_reply_subject() {
        use base64::Engine as _;
        let kp = nkeys::KeyPair::new_user();
        let sig = kp
            .sign(&reply_signing_bytes("_INBOX.a.1", b"{}"))
            .expect("sign");
        let b64 = base64::engine::general_purpose::STANDARD.encode(sig);
        assert!(verify_reply(&kp.public_key(), "_INBOX.a.1", b"{}", &b64).is_ok());
        assert!(verify_reply(&kp.public_key(), "_INBOX.a.2", b"{}", &b64).is_err());
        assert!(verify_reply(&kp.public_key(), "_INBOX.a.1", b"{ }", &b64).is_err());
        let other = nkeys::KeyPair::new_user().public_key();
        assert!(verify_reply(&other, "_INBOX.a.1", b"{}", &b64).is_err());
    }

    #[test]
    fn an_older_list_is_refused_until_upgraded_and_upgrade_splits_the_keys() {
        let tmp = tempfile::tempdir().expect("tempdir");
        init(tmp.path(), &[]).expect("init");
        add_approver(tmp.path(), "ana", &nkeys::KeyPair::new_user().public_key()).expect("add");
        // What an older Kura wrote: each service's seed key as its bus key, no signer.
        let mut old = Identities::load(tmp.path()).expect("load");
        for id in old.list.iter_mut().filter(|i| !i.role.is_listed()) {
            let seed = read_seed(&seed_path(tmp.path(), id.role)).expect("seed");
            id.nkey = seed.public_key();
            id.signer = None;
        }
        let text = toml::to_string(&old).expect("toml");
        std::fs::write(tmp.path().join(IDENTITIES_FILE), text).expect("write");
        let err = Identities::load(tmp.path())
            .expect_err("refused")
            .to_string();
        assert!(err.contains("kura keys upgrade"), "{err}");
        // An older directory had no console certificate either.
        std::fs::remove_file(tmp.path().join(CONSOLE_CERT_FILE)).expect("rm");
        std::fs::remove_file(tmp.path().join(CONSOLE_KEY_FILE)).expect("rm");
        let done = upgrade(tmp.path(), &[]).expect("upgrade");
        assert!(done.console_certificate && tmp.path().join(CONSOLE_CA_FILE).exists());
        assert_eq!(
            done.relist
                .iter()
                .map(|i| i.name.as_str())
                .collect::<Vec<_>>(),
            ["ana"]
        );
        // Run again (install.sh on every upgrade): nothing more to do.
        let again = upgrade(tmp.path(), &[]).expect("again");
        assert!(!again.console_certificate);
        let ids = Identities::load(tmp.path()).expect("load");
        let hashi = ids.get("hashi").expect("hashi");
        let seed = read_seed(&seed_path(tmp.path(), Role::Hashi)).expect("seed");
        assert_eq!(hashi.signer, Some(seed.public_key()));
        assert_eq!(hashi.nkey, bus_key(&seed).expect("bus").public_key());
    }

    #[test]
    fn a_key_that_signs_for_one_identity_cannot_log_in_for_another() {
        let tmp = tempfile::tempdir().expect("tempdir");
        init(tmp.path(), &[]).expect("init");
        let aegis_signer = Identities::load(tmp.path())
            .expect("load")
            .get("aegis")
            .and_then(|a| a.signer.clone())
            .expect("signer");
        let err = add_approver(tmp.path(), "mallory", &aegis_signer).expect_err("refused");
        assert!(err.to_string().contains("listed twice"), "{err}");
    }

    #[test]
    fn only_a_nonce_is_signed_as_one() {
        assert!(check_nonce(b"Xk3_a-Zq09PmWtY").is_ok());
        for bad in [
            &b""[..],
            b"kura.seal.v1\nsha256:00",
            b"{\"kind\":\"kura.approval.v1\"}",
            &[b'a'; 65][..],
        ] {
            assert!(check_nonce(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_removed_person_is_recorded_until_added_again() {
        let tmp = tempfile::tempdir().expect("tempdir");
        init(tmp.path(), &[]).expect("init");
        let key = nkeys::KeyPair::new_user().public_key();
        add_approver(tmp.path(), "ana", &key).expect("add");
        assert!(remove(tmp.path(), "ana").expect("remove").is_some());
        // A console-only approver (no bus key) is recorded too.
        assert!(remove(tmp.path(), "bo").expect("remove").is_none());
        let ids = Identities::load(tmp.path()).expect("load");
        assert_eq!(ids.removed, ["ana", "bo"]);
        assert!(ids.get("ana").is_none());
        add_approver(tmp.path(), "ana", &key).expect("again");
        assert_eq!(Identities::load(tmp.path()).expect("load").removed, ["bo"]);
        assert!(
            remove(tmp.path(), "hashi").is_err(),
            "a service is rotated, not removed"
        );
    }
}

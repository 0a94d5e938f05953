//! Argument definitions and dispatch for the `kura` binary.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// Kura: a verifiable record/ledger store for AI agents.
///
/// Every step an agent takes is an immutable, content-addressed record; records are grouped
/// into ledgers that are sealed into a hash chain anyone can verify.
#[derive(Debug, Parser)]
#[command(name = "kura", version, about, propagate_version = true)]
pub struct Args {
    /// The database file. Default: ./kura.db (for `kura serve`: its config's `db`).
    #[arg(long = "db", global = true, env = "KURA_DB")]
    pub db_given: Option<PathBuf>,
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Commit durability: full (fsync every commit, the default), normal or off.
    #[arg(long, global = true, env = "KURA_SYNCHRONOUS", default_value = "full")]
    pub synchronous: String,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

impl Args {
    /// The database file, given or default.
    pub fn db(&self) -> PathBuf {
        self.db_given
            .clone()
            .unwrap_or_else(|| PathBuf::from("kura.db"))
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the database (safe to run again).
    Init,
    /// Sessions: branches of ledgers.
    #[command(subcommand)]
    Session(SessionCmd),
    /// Ledgers: ordered collections of records, sealed into the chain.
    #[command(subcommand)]
    Ledger(LedgerCmd),
    /// Records: the immutable entries.
    #[command(subcommand)]
    Record(RecordCmd),
    /// Walk a session's ledgers like `git log`.
    Log {
        /// The session id.
        session: String,
        /// List each ledger's records too.
        #[arg(long)]
        records: bool,
        /// Draw the ledgers as a graph, like `git log --graph`: rewinds leave side branches,
        /// forks name where they grew from and where they went.
        #[arg(long, conflicts_with = "records")]
        graph: bool,
    },
    /// Compare two ledgers by record hash.
    Diff {
        /// The first ledger.
        ledger_a: String,
        /// The second ledger.
        ledger_b: String,
    },
    /// Show a record, a ledger or a session.
    Show {
        /// A record, ledger or session id.
        id: String,
    },
    /// Recompute every hash and report every problem (exit 1 if any).
    Verify {
        /// A ledger or session id.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        id: Option<String>,
        /// Verify the whole database.
        #[arg(long)]
        all: bool,
        /// A ledger hash you noted earlier (e.g. from `kura log`): verification fails if it
        /// is no longer in the history, which catches even a consistent truncation.
        #[arg(long, value_name = "HASH")]
        trusted_head: Option<String>,
        /// A signed checkpoint the store's seal log must extend (repeatable; the newest is
        /// used). Default: the signer's and the witnesses' from the serve config.
        #[arg(long = "checkpoint", value_name = "FILE")]
        checkpoints: Vec<PathBuf>,
        /// A witness directory to take checkpoints (and leaf copies) from (repeatable).
        #[arg(long = "witness", value_name = "DIR")]
        witnesses: Vec<PathBuf>,
        /// The log's verifier key (`name+id+base64`). Default: `[serve] log_verifier`.
        #[arg(long, env = "KURA_LOG_VERIFIER", value_name = "VKEY")]
        log_key: Option<String>,
        /// The install's identities (`identities.toml`): every seal must be signed by one of
        /// them. Default: `[serve] keyring`.
        #[arg(long, env = "KURA_KEYRING", value_name = "FILE")]
        keyring: Option<PathBuf>,
    },
    /// The log key that signs checkpoints of the seal log.
    #[command(subcommand)]
    LogKey(LogKeyCmd),
    /// Sign (with --key) or print the latest checkpoint of the seal log (C2SP signed note).
    Checkpoint {
        /// The log key; signing refuses a log that does not extend the last checkpoint.
        #[arg(long, env = "KURA_LOG_KEY")]
        key: Option<PathBuf>,
        /// The signer's last checkpoint. Default: `[serve] checkpoint_file`, else `DB.checkpoint`.
        #[arg(long)]
        state: Option<PathBuf>,
        /// With --key, when the last checkpoint is missing but the log has leaves: trust the
        /// log as it is now and start the signed history here (compare it with your
        /// witnesses first; a rewrite made before now is accepted).
        #[arg(long, requires = "key")]
        trust_current: bool,
    },
    /// An RFC 6962 consistency proof from an old checkpoint to a newer one (default: the
    /// store's log now), as JSON; exit 2 if the store does not extend it.
    ProveConsistency {
        /// The old checkpoint file.
        old: PathBuf,
        /// The newer checkpoint file.
        new: Option<PathBuf>,
    },
    /// Export a session as a git repository.
    Export {
        /// The session id.
        session: String,
        /// Export format.
        #[arg(long, value_enum)]
        format: ExportFormat,
        /// Target directory (created if missing; an earlier export there is updated).
        #[arg(long)]
        out: PathBuf,
    },
    /// Find records.
    Query {
        /// Only this record type.
        #[arg(long = "type", value_name = "TYPE")]
        record_type: Option<String>,
        /// Only records this recent: RFC 3339 time or an age like 2h.
        #[arg(long)]
        since: Option<String>,
        /// Only this author.
        #[arg(long)]
        author: Option<String>,
        /// Only records in this session's ledgers.
        #[arg(long)]
        session: Option<String>,
        /// At most this many (newest first).
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Search memory (facts and decisions), best first.
    Search {
        /// Free text.
        query: String,
        /// Only memory.fact or memory.decision.
        #[arg(long = "type", value_name = "TYPE")]
        record_type: Option<String>,
        /// Only memory from this session.
        #[arg(long)]
        session: Option<String>,
        /// At most this many hits.
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// OpenAI-compatible base URL (up to /v1) to embed the query for hybrid ranking.
        #[arg(long, env = "KURA_EMBEDDINGS_URL")]
        embeddings_url: Option<String>,
        /// Embedding model name.
        #[arg(
            long,
            env = "KURA_EMBEDDINGS_MODEL",
            default_value = "nomic-embed-text"
        )]
        embeddings_model: String,
    },
    /// Print an inclusion proof (JSON) that a record is in a sealed ledger.
    Prove {
        /// The record id.
        record: String,
        /// The sealed ledger id.
        #[arg(long)]
        ledger: String,
        /// Chain on to this signed checkpoint: the ledger's leaf in the seal log and its
        /// inclusion proof in the checkpoint's tree.
        #[arg(long, value_name = "FILE")]
        checkpoint: Option<PathBuf>,
        /// The log's verifier key the checkpoint must be signed by. Default: `[serve] log_verifier`.
        #[arg(long, env = "KURA_LOG_VERIFIER", value_name = "VKEY")]
        log_key: Option<String>,
    },
    /// What is up, what is waiting, when the data was last checked.
    Status,
    /// Bus identities: the nkey seeds, `identities.toml`, the local CA and server certificate.
    #[command(subcommand)]
    Keys(KeysCmd),
    /// Run the kura daemon: integrity sweeps, WAL checkpoints, backups (settings from a TOML
    /// file and KURA_* variables, like the other daemons; the database is `common.db`).
    Serve {
        /// TOML config file (default: $KURA_SERVE_CONFIG).
        #[arg(long, env = "KURA_SERVE_CONFIG")]
        config: Option<PathBuf>,
        /// Print the default configuration and exit.
        #[arg(long)]
        print_default_config: bool,
    },
    /// Measure this disk and machine: durable and batched appends, scaling to 1 M records,
    /// verify, doorbell latency — each printed beside a baseline measured in the same run.
    Bench {
        /// Where the scratch databases go (the disk you want judged). Default: the
        /// directory of --db.
        #[arg(long)]
        dir: Option<PathBuf>,
        /// A run of a few seconds, with small sizes.
        #[arg(long)]
        quick: bool,
        /// Skip the doorbell figure (it starts the bundled nats-server).
        #[arg(long)]
        no_nats: bool,
        /// Use this NATS server for the doorbell figure instead of the bundled one.
        #[arg(long, value_name = "URL")]
        nats: Option<String>,
        /// Run only the figures whose name contains this: durable, group, scaling, verify, seal-log,
        /// doorbell.
        #[arg(long, default_value = "")]
        only: String,
    },
    /// The other end of the doorbell figure (started by `kura bench`).
    #[command(hide = true)]
    BenchPeer {
        /// The NATS server.
        #[arg(long)]
        nats: String,
        /// Events of each kind to wait for.
        #[arg(long)]
        count: usize,
        /// The nkey seed file to connect with.
        #[arg(long)]
        seed: Option<PathBuf>,
        /// The bus CA to pin.
        #[arg(long)]
        ca: Option<PathBuf>,
    },
    /// Check an inclusion proof offline (no database needed); exit 1 if it fails.
    VerifyProof {
        /// The proof file (`-` for stdin).
        file: PathBuf,
        /// The root hash or ledger hash you trust; the proof must lead to it.
        #[arg(long, value_name = "HASH")]
        root: Option<String>,
        /// The log's verifier key, to check a proof that chains on to a checkpoint.
        /// Default: `[serve] log_verifier`.
        #[arg(long, env = "KURA_LOG_VERIFIER", value_name = "VKEY")]
        log_key: Option<String>,
    },
}

/// `kura log-key ...`
#[derive(Debug, Subcommand)]
pub enum LogKeyCmd {
    /// Make a log key (0600, never overwriting) and print its verifier key.
    Init {
        /// Where to write it.
        #[arg(long)]
        out: PathBuf,
        /// The log's name: every checkpoint's origin, unique as witnesses know a log by it
        /// (e.g. `kura.HOST/log/RANDOM`); for a witness key, its name (e.g. `HOST.witness`).
        #[arg(long)]
        name: String,
        /// A witness key: print its cosignature (c2sp.org/tlog-cosignature) verifier key.
        #[arg(long)]
        witness: bool,
    },
    /// Print a key's verifier key (to pin it elsewhere).
    Show {
        /// The key file.
        #[arg(long)]
        key: PathBuf,
        /// As a witness key (its cosignature verifier key).
        #[arg(long)]
        witness: bool,
    },
}

/// `kura keys ...` (the directory: --dir, $KURA_KEYS_DIR, or /etc/kura/keys).
#[derive(Debug, Subcommand)]
pub enum KeysCmd {
    /// Make a seed per service, the identity list, a local CA and a server certificate.
    Init {
        /// The keys directory (created 0700; refused if it already holds identities).
        #[arg(long, env = "KURA_KEYS_DIR", default_value = "/etc/kura/keys")]
        dir: PathBuf,
        /// Another name or address the bus is reached at (repeatable), e.g. the Pi's LAN
        /// address; localhost and 127.0.0.1 are always in the certificate.
        #[arg(long = "host", value_name = "NAME|ADDR")]
        hosts: Vec<String>,
    },
    /// List who may connect and as what (public keys only).
    List {
        /// The keys directory.
        #[arg(long, env = "KURA_KEYS_DIR", default_value = "/etc/kura/keys")]
        dir: PathBuf,
    },
    /// Let an approver onto the bus with the bus nkey `aegis keygen` printed for them.
    AddApprover {
        /// The keys directory.
        #[arg(long, env = "KURA_KEYS_DIR", default_value = "/etc/kura/keys")]
        dir: PathBuf,
        /// Their name (as in aegis's approvers).
        #[arg(long)]
        name: String,
        /// Their public nkey (U…).
        #[arg(long)]
        nkey: String,
    },
    /// List another Kura that may ask this one to witness (cosign) its seal log.
    AddPeer {
        /// The keys directory.
        #[arg(long, env = "KURA_KEYS_DIR", default_value = "/etc/kura/keys")]
        dir: PathBuf,
        /// A name for it (e.g. its host name).
        #[arg(long)]
        name: String,
        /// Its `serve` identity's bus nkey (U…), from `kura keys list` on that machine.
        #[arg(long)]
        nkey: String,
    },
    /// Take an approver or a peer off the bus.
    Remove {
        /// The keys directory.
        #[arg(long, env = "KURA_KEYS_DIR", default_value = "/etc/kura/keys")]
        dir: PathBuf,
        /// The approver's name.
        name: String,
    },
    /// Give a service a new seed (restart mikado, then the service).
    Rotate {
        /// The keys directory.
        #[arg(long, env = "KURA_KEYS_DIR", default_value = "/etc/kura/keys")]
        dir: PathBuf,
        /// The service: minato, hashi, aegis, mikado, serve, submit or operator.
        name: String,
    },
    /// Split an older list's keys: each service logs in with a key derived from its seed and
    /// signs with the seed's own (one key, one purpose). Approvers and peers re-add theirs.
    Upgrade {
        /// The keys directory.
        #[arg(long, env = "KURA_KEYS_DIR", default_value = "/etc/kura/keys")]
        dir: PathBuf,
        /// A name or address the console is reached at (repeatable), for its certificate
        /// when the directory has none yet.
        #[arg(long = "host", value_name = "NAME|ADDR")]
        hosts: Vec<String>,
    },
}

/// `kura session ...`
#[derive(Debug, Subcommand)]
pub enum SessionCmd {
    /// Create a session and print its id.
    New {
        /// A human-readable label.
        #[arg(long, default_value = "session")]
        label: String,
    },
    /// List sessions, newest first.
    List,
    /// Move a session's head back to an earlier sealed ledger of its own history. The ref
    /// log records the move and the reason; the ledgers after it stay, shown as unreachable.
    Reset {
        /// The session.
        session: String,
        /// The sealed ledger to move the head back to.
        ledger: String,
        /// Why (one line; recorded in the hash-chained ref log).
        #[arg(long)]
        reason: String,
    },
    /// Start a new session from any sealed ledger (of any session): its first ledger has that
    /// ledger as parent, so the history is shared, not copied. Prints the new session's id.
    Fork {
        /// The sealed ledger to grow from.
        ledger: String,
        /// A label for the new session.
        #[arg(long, default_value = "fork")]
        label: String,
        /// An nkey seed (e.g. /etc/kura/keys/operator.nk) that signs the fork's first seal,
        /// so `kura verify --keyring` knows who sealed it.
        #[arg(long)]
        sealer_key: Option<PathBuf>,
    },
}

/// `kura ledger ...`
#[derive(Debug, Subcommand)]
pub enum LedgerCmd {
    /// Open a ledger in a session and print its id.
    Open {
        /// The session it belongs to.
        #[arg(long)]
        session: String,
        /// A human-readable label.
        #[arg(long)]
        label: String,
        /// A sealed parent ledger (repeatable).
        #[arg(long = "parent")]
        parents: Vec<String>,
    },
    /// Seal a ledger: fix its Merkle root and chained hash; it becomes the session head.
    Seal {
        /// The ledger id.
        ledger: String,
        /// A seed (nkey) to sign the seal with, e.g. the operator's; without one the seal
        /// is unsigned, which `kura verify --keyring` reports.
        #[arg(long, env = "KURA_SEALER_KEY", value_name = "FILE")]
        sealer_key: Option<PathBuf>,
    },
}

/// `kura record ...`
#[derive(Debug, Subcommand)]
pub enum RecordCmd {
    /// Append a record to an open ledger.
    Add {
        /// The open ledger.
        #[arg(long)]
        ledger: String,
        /// Record type, e.g. task.instruction, agent.thought, tool.call.
        #[arg(long = "type", value_name = "TYPE")]
        record_type: String,
        /// Author, kind:name (user:oles, agent:hashi).
        #[arg(long)]
        author: String,
        /// Text content (stored as {"text": ...}).
        #[arg(long, group = "body")]
        text: Option<String>,
        /// JSON content.
        #[arg(long, group = "body")]
        content: Option<String>,
        /// JSON content from a file (`-` for stdin).
        #[arg(long, group = "body")]
        content_file: Option<PathBuf>,
        /// Metadata key=value (repeatable).
        #[arg(long = "meta", value_name = "KEY=VALUE")]
        meta: Vec<String>,
    },
}

/// Export formats.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ExportFormat {
    /// A git repository: one commit per sealed ledger.
    Git,
}

/// How a successful run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Everything fine.
    Ok,
    /// A verification ran and found problems.
    VerifyFailed,
}

impl Outcome {
    /// The process exit code.
    pub fn exit_code(self) -> ExitCode {
        match self {
            Outcome::Ok => ExitCode::SUCCESS,
            Outcome::VerifyFailed => ExitCode::from(1),
        }
    }
}

/// The error and its causes on one line.
pub fn chain(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !parts.last().is_some_and(|p| p.contains(&text)) {
            parts.push(text);
        }
    }
    parts.join(": ").replace('\n', " ")
}

/// True when the error is only stdout being closed early (e.g. `kura log | head`).
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

//! `aegis`: the shield daemon (`run`) and the people's commands (`keygen`, `pending`,
//! `approve`, `deny`).

use std::path::PathBuf;
use std::process::ExitCode;

use aegis::Config;
use clap::{Parser, Subcommand};
use kura_runtime::cli::{ConfigArg, Lifecycle};

/// Aegis: tool-call policy and signed human approvals.
#[derive(Debug, Parser)]
#[command(name = "aegis", version, about)]
struct Args {
    #[command(flatten)]
    config: ConfigArg,
    /// What to do.
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    #[command(flatten)]
    Daemon(Lifecycle),
    /// Make an Ed25519 key for an approver and print the line to trust it.
    Keygen {
        /// The approver's name (decisions are authored user:NAME).
        #[arg(long)]
        name: String,
        /// Where to write the key (mode 0600). Default: ~/.config/kura/aegis-key.json
        #[arg(long, env = "KURA_AEGIS_KEY")]
        key: Option<PathBuf>,
    },
    /// List requests waiting for a decision.
    Pending {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Your key file (your bus identity). Default: ~/.config/kura/aegis-key.json
        #[arg(long, env = "KURA_AEGIS_KEY")]
        key: Option<PathBuf>,
    },
    /// Approve a request (signed with your key).
    Approve {
        /// The request id.
        request_id: String,
        /// A note for the record.
        #[arg(long, default_value = "")]
        note: String,
        /// Approve with these arguments instead of the requested ones: a JSON object, signed
        /// with your decision (paths in their normal form, inside the call's writ; the policy
        /// rules on it again).
        #[arg(long, value_name = "ARGS_JSON")]
        edit: Option<String>,
        /// Your key file. Default: ~/.config/kura/aegis-key.json
        #[arg(long, env = "KURA_AEGIS_KEY")]
        key: Option<PathBuf>,
    },
    /// Answer a question an agent put to people (`person.ask`), signed with your key; with
    /// choices, the answer must be one of them.
    Answer {
        /// The request id.
        request_id: String,
        /// The answer.
        answer: String,
        /// A note for the record.
        #[arg(long, default_value = "")]
        note: String,
        /// Your key file. Default: ~/.config/kura/aegis-key.json
        #[arg(long, env = "KURA_AEGIS_KEY")]
        key: Option<PathBuf>,
    },
    /// Deny a request (signed with your key).
    Deny {
        /// The request id.
        request_id: String,
        /// Why, for the record.
        #[arg(long, default_value = "")]
        reason: String,
        /// Your key file. Default: ~/.config/kura/aegis-key.json
        #[arg(long, env = "KURA_AEGIS_KEY")]
        key: Option<PathBuf>,
    },
}

fn fail(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("aegis: error: {e}");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config_path = args.config.path("aegis");
    let key = match args.command {
        Command::Daemon(lifecycle) => {
            return lifecycle.exec("aegis", config_path.as_deref(), aegis::run);
        }
        Command::Keygen { name, key } => return keygen(&name, key),
        Command::Pending { ref key, .. }
        | Command::Approve { ref key, .. }
        | Command::Answer { ref key, .. }
        | Command::Deny { ref key, .. } => key.clone(),
    };
    let (config, rt) = match kura_runtime::start_client::<Config>("aegis", config_path.as_deref()) {
        Ok(x) => x,
        Err(e) => return fail(format!("{e:#}")),
    };
    let at = match endpoint(&config, key) {
        Ok(at) => at,
        Err(e) => return fail(format!("{e:#}")),
    };
    match args.command {
        Command::Pending { json, .. } => pending(&rt, &at, json),
        Command::Approve {
            request_id,
            note,
            edit,
            ..
        } => {
            let edit = match edit
                .as_deref()
                .map(serde_json::from_str::<serde_json::Value>)
            {
                None => None,
                Some(Ok(serde_json::Value::Object(args))) => Some(args),
                Some(_) => {
                    return fail(
                        "--edit is the call's arguments as one JSON object, e.g. '{\"path\": \"notes/a.md\"}'",
                    );
                }
            };
            decide(&rt, &at, &request_id, true, &note, edit)
        }
        Command::Deny {
            request_id, reason, ..
        } => decide(&rt, &at, &request_id, false, &reason, None),
        Command::Answer {
            request_id,
            answer,
            note,
            ..
        } => answer_cmd(&rt, &at, &request_id, &answer, &note),
        Command::Keygen { .. } | Command::Daemon(_) => ExitCode::SUCCESS,
    }
}

/// Writes a new approver key to `key` (or the default path) and prints how to trust it.
fn keygen(name: &str, key: Option<PathBuf>) -> ExitCode {
    let path = key.unwrap_or_else(aegis::keys::default_key_path);
    let k = match aegis::keys::keygen(name, &path) {
        Ok(k) => k,
        Err(e) => return fail(format!("{e:#}")),
    };
    println!("key written to {} (keep it private)", path.display());
    let nkey = hex::decode(&k.secret_key)
        .ok()
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .and_then(|b| kura_runtime::identity::bus_key_from_secret(b).ok())
        .map(|kp| kp.public_key())
        .unwrap_or_default();
    // The keys directory the reader's `kura keys` commands use, when it is not the
    // Pi's default /etc/kura/keys.
    let dir = std::env::var("KURA_KEYS_DIR")
        .map(|d| format!(" --dir {d}"))
        .unwrap_or_default();
    println!(
        "On the Pi, let it onto the bus (its bus key is derived from this file):\n\n  \
         kura keys add-approver{dir} --name {} --nkey {nkey}\n\n\
         and trust its signatures in aegis's config:\n\n[[aegis.approvers]]\nname = \"{}\"\npublic_key = \"{}\"",
        k.name, k.name, k.public_key
    );
    ExitCode::SUCCESS
}

/// Where and as whom the person's commands talk to aegis (its reply key must be pinned).
fn endpoint(config: &Config, key: Option<PathBuf>) -> anyhow::Result<aegis::client::Endpoint> {
    let subjects = config.common.subjects()?;
    let reply_key = config.aegis.reply_key.clone().ok_or_else(|| {
        anyhow::anyhow!(
            "aegis's key is not pinned: set [aegis] reply_key (`kura keys list` on the Pi shows \
             aegis's nkey) or KURA_AEGIS__REPLY_KEY"
        )
    })?;
    let seed = config.common.seed_file();
    Ok(aegis::client::Endpoint {
        url: config.common.nats_url.clone(),
        subjects,
        ca: config.common.ca_file(seed.as_deref()),
        reply_key,
        key_path: key.unwrap_or_else(aegis::keys::default_key_path),
    })
}

/// Lists the requests waiting for people, verified, as lines or JSON.
fn pending(rt: &tokio::runtime::Runtime, at: &aegis::client::Endpoint, json: bool) -> ExitCode {
    let items = match rt.block_on(aegis::client::pending(at)) {
        Ok(items) => items,
        Err(e) => return fail(format!("{e:#}")),
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&items).unwrap_or_default()
        );
        return ExitCode::SUCCESS;
    }
    if items.is_empty() {
        println!("nothing is waiting for a decision");
    }
    for i in items {
        // Model-written text: no terminal control reaches the screen.
        let line = format!(
            "{}  {} {}  session {}  turn {}  {}s old  rule {}  {}/{} approvals",
            i.request_id,
            i.tool,
            i.arguments,
            i.session_id.as_str().unwrap_or("?"),
            i.turn_id.as_str().unwrap_or("?"),
            i.age_s,
            i.rule,
            i.approvals,
            i.required
        );
        println!("{}", proto::text::escape_controls(&line));
    }
    ExitCode::SUCCESS
}

/// Signs and sends a decision; exit 0 if accepted, 1 if aegis refused it, 2 on errors.
fn answer_cmd(
    rt: &tokio::runtime::Runtime,
    at: &aegis::client::Endpoint,
    request_id: &str,
    answer: &str,
    note: &str,
) -> ExitCode {
    let id = match kura_store::store::parse_id(request_id) {
        Ok(id) => id,
        Err(e) => return fail(e),
    };
    verdict(rt.block_on(aegis::client::answer(at, id, answer, note)))
}

/// What aegis said of a decision: its message, exit 1 when it refused it.
fn verdict(v: anyhow::Result<proto::doorbell::Verdicted>) -> ExitCode {
    match v {
        Ok(v) if v.ok => {
            println!("{}", v.message);
            ExitCode::SUCCESS
        }
        Ok(v) => {
            eprintln!("aegis: {}", v.message);
            ExitCode::from(1)
        }
        Err(e) => fail(format!("{e:#}")),
    }
}

fn decide(
    rt: &tokio::runtime::Runtime,
    at: &aegis::client::Endpoint,
    request_id: &str,
    approve: bool,
    note: &str,
    edit: Option<serde_json::Map<String, serde_json::Value>>,
) -> ExitCode {
    let id = match kura_store::store::parse_id(request_id) {
        Ok(id) => id,
        Err(e) => return fail(e),
    };
    verdict(rt.block_on(aegis::client::decide(at, id, approve, note, edit)))
}

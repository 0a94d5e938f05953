//! `minato`: the orchestrator daemon (`run`) and the way people hand it work (`submit`).

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use kura_runtime::cli::{ConfigArg, Lifecycle};
use minato::Config;

/// Minato: Kura's orchestrator — turns requests into sessions, packs context ledgers,
/// dispatches turns and decides what comes next.
#[derive(Debug, Parser)]
#[command(name = "minato", version, about)]
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
    /// Submit an instruction: a new session, or the next request in `--session`.
    Submit {
        /// What the agent should do.
        instruction: String,
        /// Continue this session instead of starting a new one.
        #[arg(long)]
        session: Option<String>,
        /// Fork a new session from this sealed ledger (of any session) and continue there.
        #[arg(long, conflicts_with = "session")]
        from: Option<String>,
        /// `--from` names a ledger of this Pi's verified replica of another Pi (its fleet
        /// name): the fork records that Pi and the checkpoint the replica was verified against.
        #[arg(long, requires = "from")]
        replica: Option<String>,
        /// Where the replicas are (default: `replicas/` beside the database).
        #[arg(long, requires = "replica")]
        replicas_dir: Option<std::path::PathBuf>,
        /// Follow the session until it completes and print the deliverable.
        #[arg(long)]
        wait: bool,
        /// Give up waiting after this many seconds (the session keeps running).
        #[arg(long, default_value_t = 300)]
        timeout: u64,
        /// Who is asking, kind:name. Default: user:$USER.
        #[arg(long)]
        author: Option<String>,
        /// The role that does it (`[roster]`); default: routed by keyword, else the
        /// default role.
        #[arg(long)]
        role: Option<proto::RoleName>,
        /// A role that must pass the deliverable before the session completes (its
        /// deliverable says "verdict": "pass" or "fail"); a fail sends the work back.
        #[arg(long, conflicts_with = "validate_cmd")]
        validate_role: Option<proto::RoleName>,
        /// A command that must pass the deliverable (exit 0), run in the session's
        /// workspace in the sandbox like shell.run, e.g. 'sh -c "test -s notes.md"'.
        #[arg(long)]
        validate_cmd: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Re-run a session's turns into a fork: by default every step comes from the record
    /// (a deterministic check that the code still reproduces the ledger); with `--live`
    /// hashi's own model decides anew. Either way a side effect the recorded turn had is
    /// never run again: its recorded result is served, marked `replayed`.
    Replay {
        /// The recorded session.
        session: String,
        /// The first turn to replay (the fork grows from the ledger before it).
        #[arg(long, default_value_t = 1)]
        from_turn: i64,
        /// Let hashi's configured provider decide the steps.
        #[arg(long)]
        live: bool,
        /// Ask again about each side effect instead of serving its recorded result: it runs
        /// again only if a person approves it through aegis (whatever the policy says).
        #[arg(long)]
        rerun: bool,
        /// Give up waiting for a turn after this many seconds.
        #[arg(long, default_value_t = 300)]
        timeout: u64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config_path = args.config.path("minato");
    match args.command {
        Command::Daemon(lifecycle) => lifecycle.exec("minato", config_path.as_deref(), minato::run),
        Command::Replay {
            session,
            from_turn,
            live,
            rerun,
            timeout,
            json,
        } => replay_cmd(
            config_path.as_deref(),
            &session,
            from_turn,
            (live, rerun),
            timeout,
            json,
        ),
        Command::Submit {
            instruction,
            session,
            from,
            replica,
            replicas_dir,
            wait,
            timeout,
            author,
            role,
            validate_role,
            validate_cmd,
            json,
        } => {
            let wait = wait.then(|| Duration::from_secs(timeout));
            let validator = match validator(validate_role, validate_cmd.as_deref()) {
                Ok(v) => v,
                Err(e) => {
                    eprintln!("minato: error: {e}");
                    return ExitCode::from(2);
                }
            };
            submit_cmd(
                config_path.as_deref(),
                &instruction,
                session,
                from.map(|f| (f, replica.map(|r| (r, replicas_dir)))),
                wait,
                Asked {
                    author,
                    role,
                    validator,
                },
                json,
            )
        }
    }
}

/// `--validate-role` or `--validate-cmd` as a validator.
fn validator(
    role: Option<proto::RoleName>,
    cmd: Option<&str>,
) -> anyhow::Result<Option<proto::plan::Validator>> {
    let command = match cmd {
        Some(c) => shlex::split(c).filter(|a| !a.is_empty()).ok_or_else(|| {
            anyhow::anyhow!("--validate-cmd {c:?} is not a command line (check its quotes)")
        })?,
        None => Vec::new(),
    };
    if role.is_none() && command.is_empty() {
        return Ok(None);
    }
    let v = proto::plan::Validator { role, command };
    v.check()?;
    Ok(Some(v))
}

/// Who asks, as what role, checked by what.
struct Asked {
    author: Option<String>,
    role: Option<proto::RoleName>,
    validator: Option<proto::plan::Validator>,
}

/// `--replica PI [--replicas-dir DIR]`: the fork comes from that Pi's verified replica.
type Replica = (String, Option<std::path::PathBuf>);

fn submit_cmd(
    config_path: Option<&std::path::Path>,
    instruction: &str,
    session: Option<String>,
    from: Option<(String, Option<Replica>)>,
    wait: Option<Duration>,
    asked: Asked,
    json: bool,
) -> ExitCode {
    let Asked {
        author,
        role,
        validator,
    } = asked;
    let (config, rt) = match kura_runtime::start_with::<Config>("minato", config_path, "warn") {
        Ok(x) => x,
        Err(e) => {
            eprintln!("minato: error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let named = role
        .iter()
        .chain(validator.as_ref().and_then(|v| v.role.as_ref()));
    for r in named {
        if config.roster.knows(r) {
            continue;
        }
        let mut known: Vec<&str> = config
            .roster
            .roles
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        known.push(kura_plan::DEFAULT_ROLE);
        eprintln!(
            "minato: error: unknown role {r:?}; the roster has {} (add it to [[roster.roles]] in minato.toml and hashi.toml, or KURA_ROSTER__ROLES)",
            known.join(", ")
        );
        return ExitCode::from(2);
    }
    let session = match session
        .as_deref()
        .map(kura_store::store::parse_id)
        .transpose()
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("minato: error: {e}");
            return ExitCode::from(2);
        }
    };
    // `--from`: the fork is durable before the request that continues it.
    let session = match from.map(|(l, replica)| {
        let ledger = kura_store::store::parse_id(&l)?;
        match replica {
            None => minato::submit::fork(&config.common, ledger),
            Some((pi, dir)) => {
                minato::submit::fork_from_replica(&config.common, &pi, dir.as_deref(), ledger)
            }
        }
    }) {
        None => session,
        Some(Ok(forked)) => Some(forked),
        Some(Err(e)) => {
            eprintln!("minato: error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let author = author.unwrap_or_else(|| {
        format!(
            "user:{}",
            std::env::var("USER")
                .ok()
                .filter(|u| !u.is_empty())
                .unwrap_or_else(|| "local".into())
        )
    });
    match rt.block_on(minato::submit::run_as(
        &config.common,
        instruction,
        &author,
        session,
        wait,
        None,
        kura_work::Ask {
            role: role.as_deref(),
            validator: validator.as_ref(),
        },
    )) {
        Ok(out) => {
            print_submitted(&out, json);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("minato: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn print_submitted(out: &minato::submit::Submitted, json: bool) {
    if json {
        println!("{}", serde_json::to_string_pretty(out).unwrap_or_default());
        return;
    }
    match &out.status {
        None => println!(
            "submitted request {} (instruction record {})",
            out.request_seq, out.record_id
        ),
        Some(status) => {
            if let Some(s) = status.session_id {
                eprintln!("session {s} complete");
            }
            match status.deliverable.as_ref().map(|d| &d.content) {
                Some(c) => match proto::content::text_of(c) {
                    Some(t) => println!("{t}"),
                    None => println!("{c}"),
                },
                None => println!("(the session ended without a deliverable)"),
            }
        }
    }
}

fn replay_cmd(
    config_path: Option<&std::path::Path>,
    session: &str,
    from_turn: i64,
    modes: (bool, bool),
    timeout: u64,
    json: bool,
) -> ExitCode {
    let (config, rt) = match kura_runtime::start_with::<Config>("minato", config_path, "warn") {
        Ok(x) => x,
        Err(e) => {
            eprintln!("minato: error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let session = match kura_store::store::parse_id(session) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("minato: error: {e}");
            return ExitCode::from(2);
        }
    };
    let run = minato::submit::replay(
        &config.common,
        session,
        from_turn,
        modes,
        Duration::from_secs(timeout),
    );
    match rt.block_on(run) {
        Ok(r) if json => {
            println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Ok(r) => {
            println!("replayed into session {}", r.session_id);
            for (seq, st) in &r.turns {
                println!("turn {seq}: complete={}", st.complete);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("minato: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

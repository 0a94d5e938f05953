//! `hashi`: Kura's executor daemon, and `hashi sandbox-exec`, the helper it re-executes to
//! confine each tool child.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kura_runtime::cli::{ConfigArg, Lifecycle};

/// Hashi: Kura's executor — claims turns, runs the agent loop (model + tools) and writes
/// every step as a durable record.
#[derive(Debug, Parser)]
#[command(name = "hashi", version, about)]
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
    /// Confine this process (Landlock, seccomp, rlimits) and exec a program: how hashi runs
    /// every `shell.run` child. Not for people.
    #[command(hide = true)]
    SandboxExec(hashi::sandbox::ExecArgs),
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    match args.command {
        Command::Daemon(lifecycle) => {
            lifecycle.exec("hashi", args.config.path("hashi").as_deref(), hashi::run)
        }
        Command::SandboxExec(a) => hashi::sandbox::exec(a),
    }
}

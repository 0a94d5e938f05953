//! `hashi`: parse arguments, set up logging and config, run until SIGTERM/SIGINT.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use hashi::Config;

/// Hashi: Kura's executor.
#[derive(Debug, Parser)]
#[command(name = "hashi", version, about)]
struct Args {
    /// TOML config file (settings also come from OCLAW_* environment variables).
    #[arg(long, global = true, env = "HASHI_CONFIG")]
    config: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the daemon.
    Run,
    /// Print the default configuration as TOML.
    PrintDefaultConfig,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match args.command {
        Command::PrintDefaultConfig => {
            print!("{}", kura::runtime::to_toml(&Config::default()));
            ExitCode::SUCCESS
        }
        Command::Run => {
            kura::runtime::run_daemon("hashi", args.config.as_deref(), |c: Config, s| {
                hashi::run(c, s)
            })
        }
    }
}

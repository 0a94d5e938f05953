//! `mikado`: parse arguments, set up logging and config, run until SIGTERM/SIGINT.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mikado::Config;

/// Mikado: supervises Kura's bundled nats-server.
#[derive(Debug, Parser)]
#[command(name = "mikado", version, about)]
struct Args {
    /// TOML config file (settings also come from OCLAW_* environment variables).
    #[arg(long, global = true, env = "MIKADO_CONFIG")]
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
            kura::runtime::run_daemon("mikado", args.config.as_deref(), |c: Config, s| {
                mikado::run(c, s)
            })
        }
    }
}

//! The command line every daemon shares: `run` and `print-default-config`, the `--config`
//! file (or `KURA_<DAEMON>_CONFIG`), logging, a runtime, and stable exit codes (0 clean stop,
//! 1 the daemon failed, 2 bad configuration).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::ExitCode;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The shutdown future handed to a daemon's `run`.
pub type Shutdown = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The subcommands every daemon has.
#[derive(Debug, Clone, Copy, clap::Subcommand)]
pub enum Lifecycle {
    /// Run the daemon until SIGTERM/SIGINT.
    Run,
    /// Print the default configuration as TOML.
    PrintDefaultConfig,
}

/// The config file option every daemon has.
#[derive(Debug, Clone, clap::Args)]
pub struct ConfigArg {
    /// TOML config file (default: `$KURA_<DAEMON>_CONFIG`; settings also come from `KURA_*`
    /// environment variables).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
}

impl ConfigArg {
    /// The config file: `--config`, else `KURA_<KIND>_CONFIG`.
    pub fn path(&self, kind: &str) -> Option<PathBuf> {
        self.config.clone().or_else(|| {
            std::env::var_os(format!("KURA_{}_CONFIG", kind.to_ascii_uppercase()))
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
    }
}

/// A daemon with no subcommands of its own.
#[derive(Debug, clap::Parser)]
struct Plain {
    #[command(flatten)]
    config: ConfigArg,
    #[command(subcommand)]
    command: Lifecycle,
}

impl Lifecycle {
    /// Runs this subcommand for daemon `kind` with its `run(config, shutdown)`.
    pub fn exec<C, F, Fut>(self, kind: &str, config: Option<&Path>, run: F) -> ExitCode
    where
        C: Serialize + DeserializeOwned + Default,
        F: FnOnce(C, Shutdown) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        match self {
            Lifecycle::PrintDefaultConfig => {
                print!("{}", crate::to_toml(&C::default()));
                ExitCode::SUCCESS
            }
            Lifecycle::Run => crate::run_daemon(kind, config, run),
        }
    }
}

/// The whole `main` of a daemon without subcommands of its own: `about` is its `--help`.
pub fn main<C, F, Fut>(kind: &'static str, about: &'static str, run: F) -> ExitCode
where
    C: Serialize + DeserializeOwned + Default,
    F: FnOnce(C, Shutdown) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    main_with_notes(kind, about, "", run)
}

/// [`main`], with `notes` (TOML comments: settings that have no default, shown commented
/// out) after the defaults `print-default-config` prints.
pub fn main_with_notes<C, F, Fut>(
    kind: &'static str,
    about: &'static str,
    notes: &'static str,
    run: F,
) -> ExitCode
where
    C: Serialize + DeserializeOwned + Default,
    F: FnOnce(C, Shutdown) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    use clap::{CommandFactory, FromArgMatches};
    let command = Plain::command()
        .name(kind)
        .about(about)
        .version(env!("CARGO_PKG_VERSION"));
    let args = match command
        .try_get_matches()
        .and_then(|m| Plain::from_arg_matches(&m))
    {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    if let (Lifecycle::PrintDefaultConfig, false) = (&args.command, notes.is_empty()) {
        print!("{}\n{notes}", crate::to_toml(&C::default()));
        return ExitCode::SUCCESS;
    }
    args.command
        .exec(kind, args.config.path(kind).as_deref(), run)
}

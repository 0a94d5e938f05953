//! `kura serve`: the daemon's thin `main` — read the config and run [`kura_serve::run`]
//! until a signal.

use std::path::PathBuf;

use super::Ctx;
use super::Outcome;
use kura_serve::ServeConfig;

/// Run the kura daemon: integrity sweeps, WAL checkpoints, backups (settings from a TOML
/// file and KURA_* variables, like the other daemons; the database is `common.db`).
#[derive(Debug, clap::Args)]
pub struct Serve {
    /// TOML config file (default: $KURA_SERVE_CONFIG).
    #[arg(long, env = "KURA_SERVE_CONFIG")]
    config: Option<PathBuf>,
    /// Print the default configuration and exit.
    #[arg(long)]
    print_default_config: bool,
}

impl Serve {
    /// Prints the default config, or runs the daemon until SIGINT/SIGTERM.
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        if self.print_default_config {
            ctx.out
                .line(kura_serve::runtime::to_toml(&ServeConfig::default()).trim_end())?;
            return Ok(Outcome::Ok);
        }
        let (mut config, rt) =
            kura_serve::runtime::start::<ServeConfig>("kura", self.config.as_deref())?;
        if let Some(db) = ctx.db_given.clone() {
            config.common.db = db;
        }
        rt.block_on(kura_serve::run(
            config,
            kura_serve::runtime::shutdown_signal(),
        ))?;
        Ok(Outcome::Ok)
    }
}

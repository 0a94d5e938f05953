//! Tracing setup: journald under systemd, stderr otherwise; `RUST_LOG` filters (default info).

use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Installs the global subscriber for daemon `name` (default level `info`).
pub fn init(name: &str) {
    init_with(name, "info");
}

/// Installs the global subscriber with `default` as the level when `RUST_LOG` is unset
/// (command-line clients use `warn`, so only problems interrupt their output).
pub fn init_with(name: &str, default: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    // systemd sets JOURNAL_STREAM for services whose output goes to the journal.
    if std::env::var_os("JOURNAL_STREAM").is_some()
        && let Ok(journald) = tracing_journald::layer()
    {
        let _ = tracing_subscriber::registry()
            .with(filter)
            .with(journald.with_syslog_identifier(name.to_owned()))
            .try_init();
        return;
    }
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_target(false),
        )
        .try_init();
}

//! `hashi`: Kura's executor daemon.

use std::process::ExitCode;

fn main() -> ExitCode {
    kura_runtime::cli::main(
        "hashi",
        "Hashi: Kura's executor — claims turns, runs the agent loop (model + tools) and writes \
         every step as a durable record",
        hashi::run,
    )
}

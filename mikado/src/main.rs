//! `mikado`: Kura's soul daemon.

use std::process::ExitCode;

fn main() -> ExitCode {
    kura_runtime::cli::main(
        "mikado",
        "Mikado: runs and supervises Kura's bundled nats-server, and turns what agents deliver \
         into memory (facts, decisions, embeddings) for later sessions",
        mikado::run,
    )
}

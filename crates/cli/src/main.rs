//! The `kura` command line: parse arguments, run one command, map the outcome to an exit code.
//!
//! Exit codes are stable: 0 ok, 1 verification failed, 2 usage or input error.

mod args;
mod bench;
mod commands;
mod graph;
mod output;
mod serve;
mod serve_config;
mod tlog;
mod witnessing;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = match args::Args::try_parse() {
        Ok(args) => args,
        Err(e) => {
            // --help and --version are not errors; clap exits 2 for real usage errors.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    match commands::run(args) {
        Ok(outcome) => outcome.exit_code(),
        Err(e) if args::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kura: error: {}", args::chain(&e));
            ExitCode::from(2)
        }
    }
}

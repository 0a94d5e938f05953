//! The `kura` command line: `main` → `try_main` (parse the arguments) → [`commands`] (one
//! type per subcommand, each with its `run`), and the outcome mapped to an exit code.
//!
//! Exit codes are stable: 0 ok, 1 verification failed, 2 usage or input error (printed as
//! one line on stderr).

mod args;

mod commands;
mod export;
mod graph;
mod output;

use std::process::ExitCode;

use clap::Parser;
use kura_store::StoreOptions;

use commands::{Ctx, Outcome};
use output::Out;

fn main() -> ExitCode {
    match try_main() {
        Ok(code) => code,
        Err(e) if args::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kura: error: {}", args::chain(&e));
            ExitCode::from(2)
        }
    }
}

/// Parses the arguments and runs the command.
fn try_main() -> anyhow::Result<ExitCode> {
    let args = match args::Args::try_parse() {
        Ok(args) => args,
        Err(e) => {
            // --help and --version are not errors; clap exits 2 for real usage errors.
            let _ = e.print();
            return Ok(ExitCode::from(if e.use_stderr() { 2 } else { 0 }));
        }
    };
    Ok(run(args)?.exit_code())
}

/// Runs the parsed command.
fn run(args: args::Args) -> anyhow::Result<Outcome> {
    let options = StoreOptions {
        synchronous: args.synchronous.parse()?,
        ..StoreOptions::default()
    };
    let mut ctx = Ctx {
        out: Out::new(),
        json: args.json,
        db: args.db(),
        db_given: args.db_given.clone(),
        options,
    };
    let outcome = args.command.run(&mut ctx)?;
    ctx.out.finish()?;
    Ok(outcome)
}

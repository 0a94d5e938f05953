//! `kura diff`: compare two ledgers by record hash, and their files by recorded tree.

use proto::record::Record;

use super::Outcome;
use super::{Ctx, id};
use crate::output::{self, Out};

/// Compare two ledgers by record hash.
#[derive(Debug, clap::Args)]
pub struct Diff {
    /// The first ledger.
    ledger_a: String,
    /// The second ledger.
    ledger_b: String,
}

impl Diff {
    /// Prints the records only in A (`-`), only in B (`+`) and in both.
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        let store = ctx.open_store()?;
        let Diff { ledger_a, ledger_b } = self;
        let (a, b) = (id(&ledger_a)?, id(&ledger_b)?);
        let d = kura_serve::history::diff::diff(&store, a, b)?;
        let files = super::workspace::diff(ctx, &store, a, b)?;
        let (out, json) = (&mut ctx.out, ctx.json);
        if json {
            out.json(&Both {
                records: &d,
                files: &files,
            })?;
            return Ok(Outcome::Ok);
        }
        out.line(format!("--- {}\n+++ {}", d.ledger_a, d.ledger_b))?;
        lines(out, '-', &d.only_a)?;
        lines(out, '+', &d.only_b)?;
        lines(out, ' ', &d.both)?;
        out.line(format!(
            "{} only in A, {} only in B, {} in both",
            d.only_a.len(),
            d.only_b.len(),
            d.both.len()
        ))?;
        super::workspace::print_diff(out, files.as_ref())?;
        Ok(Outcome::Ok)
    }
}

/// `kura diff --json`: the records (at the top, as before files were compared), and the files.
#[derive(serde::Serialize)]
struct Both<'a> {
    #[serde(flatten)]
    records: &'a kura_serve::history::diff::LedgerDiff,
    files: &'a Option<kura_serve::history::workspace::FileDiff>,
}

fn lines(out: &mut Out, mark: char, records: &[Record]) -> std::io::Result<()> {
    for r in records {
        out.line(format!(
            "{mark} {} {:<17} {}",
            output::short(Some(&r.hash), 12),
            r.record_type.as_str(),
            output::preview(r)
        ))?;
    }
    Ok(())
}

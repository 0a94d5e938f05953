//! `kura init`: create the database (safe to run again).

use std::path::Path;

use kura_store::Store;
use serde::Serialize;

use super::Ctx;
use super::Outcome;

/// Create the database (safe to run again).
#[derive(Debug, clap::Args)]
pub struct Init {}

/// `kura init --json`.
#[derive(Serialize)]
struct Initialized<'a> {
    /// Whether this run made the file.
    created: bool,
    /// The database file.
    db: &'a Path,
}

impl Init {
    /// Creates the database file, or opens (and migrates) the one there.
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        let (db, json, out) = (&ctx.db, ctx.json, &mut ctx.out);
        let existed = db.exists();
        let store = Store::create(db, &ctx.options)?;
        if json {
            out.json_sorted(&Initialized {
                created: !existed,
                db: store.path(),
            })?;
        } else if existed {
            out.line(format!("Kura database ready at {}", db.display()))?;
        } else {
            out.line(format!("Initialized Kura database at {}", db.display()))?;
        }
        Ok(Outcome::Ok)
    }
}

//! `kura workspace …`, `kura verify --workspace` and the files beside `kura diff` and
//! `kura session reset`: a session's files as its records attest them.

use kura_serve::history::objects::Objects;
use kura_serve::history::workspace::{self as ws, FileDiff};
use kura_store::Store;

use super::{Ctx, Outcome, id};
use crate::output::Out;

/// The object store beside the database.
pub fn objects(ctx: &Ctx) -> anyhow::Result<Objects> {
    Ok(Objects::open(&Objects::beside(&ctx.db))?)
}

/// `kura verify --workspace SESSION`: every recorded object whole, no drift (exit 1 if not).
pub fn verify(ctx: &mut Ctx, session: &str) -> anyhow::Result<Outcome> {
    let store = ctx.open_store()?;
    let objects = objects(ctx)?;
    let r = ws::verify(&store, &objects, id(session)?)?;
    let out = &mut ctx.out;
    if ctx.json {
        out.json(&r)?;
    }
    for line in r.lines(session).iter().filter(|_| !ctx.json) {
        out.line(line)?;
    }
    Ok(if r.ok() {
        Outcome::Ok
    } else {
        Outcome::VerifyFailed
    })
}

/// The file changes between two ledgers, under `kura diff`'s record changes.
pub fn diff(
    ctx: &Ctx,
    store: &Store,
    a: proto::LedgerId,
    b: proto::LedgerId,
) -> anyhow::Result<Option<FileDiff>> {
    // No object store here (a database copied alone, read-only media): the records only.
    if !Objects::beside(&ctx.db).is_dir() {
        return Ok(None);
    }
    Ok(Some(ws::files_between(
        store,
        &objects(ctx)?,
        a,
        b,
        64 << 10,
    )?))
}

/// Prints a file diff (nothing when neither ledger has a recorded tree).
pub fn print_diff(out: &mut Out, d: Option<&FileDiff>) -> std::io::Result<()> {
    for line in d.map(FileDiff::lines).unwrap_or_default() {
        out.line(line)?;
    }
    Ok(())
}

/// After `kura session reset`: the session's files put back as of `ledger`, said in a line
/// (`Err`: why they were not).
pub fn rewind(
    ctx: &Ctx,
    store: &Store,
    session: proto::SessionId,
    ledger: proto::LedgerId,
) -> anyhow::Result<String> {
    let o = objects(ctx)?;
    let r = ws::rewind(store, &o, session, ledger, &format!("reset to {ledger}"))
        .map_err(|e| anyhow::anyhow!("the files were not put back: {e}"))?;
    Ok(r.said(session, ledger))
}

//! `kura query`: find records by type, age, author and session.

use kura_store::store::Query as StoreQuery;

use super::Outcome;
use super::{Ctx, id};
use crate::output;

/// Find records.
#[derive(Debug, clap::Args)]
pub struct Query {
    /// Only this record type.
    #[arg(long = "type", value_name = "TYPE")]
    record_type: Option<String>,
    /// Only records this recent: RFC 3339 time or an age like 2h.
    #[arg(long)]
    since: Option<String>,
    /// Only this author.
    #[arg(long)]
    author: Option<String>,
    /// Only records in this session's ledgers.
    #[arg(long)]
    session: Option<String>,
    /// At most this many (newest first).
    #[arg(long, default_value_t = 100)]
    limit: u32,
}

impl Query {
    /// Prints the matching records, newest first.
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        let store = ctx.open_store()?;
        let (out, json) = (&mut ctx.out, ctx.json);
        let Query {
            record_type,
            since,
            author,
            session,
            limit,
        } = self;
        let q = StoreQuery {
            record_type: record_type.as_deref().map(str::parse).transpose()?,
            since: since
                .as_deref()
                .map(kura_store::time::parse_since)
                .transpose()?,
            author_id: author,
            session_id: session.as_deref().map(id).transpose()?,
            limit: Some(limit),
        };
        let records = store.query(&q)?;
        if json {
            out.json(&records)?;
        } else {
            for r in &records {
                out.line(format!(
                    "{}  {}  {:<17} {:<16} {}",
                    r.record_id,
                    r.created_at,
                    r.record_type.as_str(),
                    r.author_id,
                    output::preview(r)
                ))?;
            }
        }
        Ok(Outcome::Ok)
    }
}

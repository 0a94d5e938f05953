//! `kura search`: memory (facts and decisions) by text, and by meaning when an embeddings
//! service is given, best first.

use anyhow::bail;
use proto::record::RecordType;

use super::Outcome;
use super::{Ctx, id};
use crate::output;

/// Search memory (facts and decisions), best first.
#[derive(Debug, clap::Args)]
pub struct Search {
    /// Free text.
    query: String,
    /// Only memory.fact or memory.decision.
    #[arg(long = "type", value_name = "TYPE")]
    record_type: Option<String>,
    /// Only memory from this session.
    #[arg(long)]
    session: Option<String>,
    /// At most this many hits.
    #[arg(long, default_value_t = 10)]
    limit: usize,
    /// OpenAI-compatible base URL (up to /v1) to embed the query for hybrid ranking.
    #[arg(long, env = "KURA_EMBEDDINGS_URL")]
    embeddings_url: Option<String>,
    /// Embedding model name.
    #[arg(
        long,
        env = "KURA_EMBEDDINGS_MODEL",
        default_value = "nomic-embed-text"
    )]
    embeddings_model: String,
}

impl Search {
    /// Prints the hits, best first.
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        let store = ctx.open_store()?;
        let (out, json) = (&mut ctx.out, ctx.json);
        let Search {
            query,
            record_type,
            session,
            limit,
            embeddings_url,
            embeddings_model,
        } = self;
        let query_vector = embed(embeddings_url, &embeddings_model, &query)?;
        let record_type: Option<RecordType> = record_type.as_deref().map(str::parse).transpose()?;
        if let Some(t) = record_type
            && !matches!(t, RecordType::MemoryFact | RecordType::MemoryDecision)
        {
            bail!("--type must be memory.fact or memory.decision");
        }
        let hits = kura_serve::memory::search(
            store.conn(),
            &kura_serve::memory::Search {
                query,
                record_type,
                session_id: session.as_deref().map(id).transpose()?,
                limit,
                query_vector,
            },
        )?;
        if json {
            out.json(&hits)?;
            return Ok(Outcome::Ok);
        }
        if hits.is_empty() {
            out.line("no memory matches")?;
        }
        for h in &hits {
            let mark = if h.superseded { " (superseded)" } else { "" };
            out.line(format!(
                "{:.3}  {}  {:<15} {}{mark}",
                h.score,
                h.record.record_id,
                h.record.record_type.as_str(),
                output::preview(&h.record)
            ))?;
        }
        Ok(Outcome::Ok)
    }
}

/// The query's embedding, when an embeddings service is given.
fn embed(url: Option<String>, model: &str, query: &str) -> anyhow::Result<Option<Vec<f32>>> {
    let Some(url) = url.filter(|u| !u.is_empty()) else {
        return Ok(None);
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok(Some(
        rt.block_on(kura_model::embed(&url, model, query))
            .map_err(|e| anyhow::anyhow!("embedding the query: {e}"))?,
    ))
}

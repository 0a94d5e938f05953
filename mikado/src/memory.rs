//! Memory extraction: for each completed turn (by polling, woken by `evt.worker.complete`),
//! read the sealed output's deliverables, extract facts and decisions (structured lists,
//! marked lines, and — when configured — a model's answer), store them with their graph
//! edges and index entries, and ring `evt.record.written` for each new one.

use proto::SessionId;
use std::sync::Arc;

use kura_memory::{Item, MemoryTx as _};
use kura_model::{Provider, ProviderConfig, ProviderKind, Step, TurnInput};
use kura_runtime::Bus;
use kura_store::Store;
use kura_work::{cursor, set_cursor};
use proto::doorbell::RecordWritten;
use proto::record::{Record, RecordType};
use serde::{Deserialize, Serialize};

use crate::extract::{from_deliverable, marked_lines};

/// mikado's cursor over completed turns.
pub const CONSUMER: &str = proto::consumers::MIKADO_MEMORY;

/// The author of extracted memory.
pub const AUTHOR: &str = "agent:mikado";

/// Whether (and which) model is asked for facts and decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryModel {
    /// Structured lists and marked lines only.
    None,
    /// An OpenAI-compatible server.
    Openai,
    /// A program.
    Command,
}

/// Memory settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemoryConfig {
    /// Extract memory from completed turns.
    pub enabled: bool,
    /// `none` (structured lists and marked lines only), `openai` or `command`: also ask a
    /// model for facts and decisions.
    pub model: MemoryModel,
    /// The model's settings (same provider as hashi's); its answer is read for
    /// `FACT:` / `DECISION:` lines.
    pub provider: ProviderConfig,
    /// OpenAI-compatible base URL (up to `/v1`) for embeddings; unset: no vectors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embeddings_url: Option<String>,
    /// Embedding model.
    pub embeddings_model: String,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            enabled: true,
            model: MemoryModel::None,
            provider: ProviderConfig {
                kind: ProviderKind::Openai,
                system_prompt: "List the facts and decisions worth remembering from the deliverable, one per line, \
                                as `FACT: ...` or `DECISION: ...`. Output nothing else."
                    .into(),
                ..ProviderConfig::default()
            },
            embeddings_url: None,
            embeddings_model: "nomic-embed-text".into(),
        }
    }
}

/// The extraction worker's state.
pub struct Extractor {
    /// Its store handle.
    pub store: Store,
    /// A model to ask, if configured.
    pub model: Option<Arc<dyn Provider>>,
    /// Settings.
    pub config: MemoryConfig,
    /// For ringing `evt.record.written`.
    pub bus: Bus,
    /// For blocking on HTTP (embeddings).
    pub handle: tokio::runtime::Handle,
}

impl Extractor {
    /// Builds the configured model provider, if any.
    pub fn model(
        config: &MemoryConfig,
        handle: tokio::runtime::Handle,
    ) -> anyhow::Result<Option<Arc<dyn Provider>>> {
        let mut p = config.provider.clone();
        p.kind = match config.model {
            MemoryModel::None => return Ok(None),
            MemoryModel::Openai => ProviderKind::Openai,
            MemoryModel::Command => ProviderKind::Command,
        };
        Ok(Some(Arc::from(kura_model::build(&p, handle)?)))
    }

    /// One unit: the next completed turn's memory. `Ok(false)` when there is none.
    pub fn step(&mut self) -> anyhow::Result<bool> {
        let pos = cursor(&self.store, CONSUMER)?;
        let Some((turn, done_seq)) = kura_work::next_done_turn_after(&self.store, pos)? else {
            return Ok(false);
        };
        let Some(output) = turn.output_ledger_id else {
            return Ok(false);
        };
        let (session, turn_id) = (turn.session_id, turn.turn_id.to_string());
        let records = self.store.hydrate(output)?;
        let deliverables: Vec<&Record> = records
            .iter()
            .filter(|r| r.record_type == RecordType::TaskDeliverable)
            .collect();
        let mut work: Vec<(&Record, Vec<Item>)> = Vec::new();
        for d in deliverables {
            let mut items = from_deliverable(&d.content);
            if let Some(model) = &self.model {
                items.extend(self.ask_model(model.as_ref(), session, &turn_id, d));
            }
            work.push((d, items));
        }
        let vectors = self.embed_all(&work);
        let sealer = self.store.sealer().cloned();
        let new_ids = self.store.write(|tx| {
            if cursor(tx, CONSUMER)? != pos {
                return Ok(vec![]); // someone else advanced it; rescan
            }
            let mut new_ids = Vec::new();
            let mut taken = Vec::new();
            for (source, items) in &work {
                for m in tx.remember(AUTHOR, source, session, items)? {
                    if !taken.contains(&m.record.record_id) {
                        taken.push(m.record.record_id);
                    }
                    if m.new {
                        if let Some(v) =
                            proto::content::text_of(&m.record.content).and_then(|t| vectors.get(t))
                        {
                            tx.store_vector(m.record.record_id, &self.config.embeddings_model, v)?;
                        }
                        new_ids.push(m.record.record_id);
                    }
                }
            }
            // What this output taught, sealed in mikado's memory session beside it.
            tx.seal_memory(AUTHOR, &taken, Some(output), sealer.as_ref())?;
            set_cursor(tx, CONSUMER, done_seq)?;
            Ok(new_ids)
        })?;
        tracing::info!(%turn_id, new = new_ids.len(), "memory extracted");
        for record_id in new_ids {
            self.bus.ring(
                self.bus.subjects.record_written(),
                &RecordWritten { record_id },
            );
        }
        Ok(true)
    }

    fn ask_model(
        &self,
        model: &dyn Provider,
        session: SessionId,
        turn_id: &str,
        d: &Record,
    ) -> Vec<Item> {
        let context = vec![d.clone()];
        // No tools: a memory model only reads.
        let input = TurnInput {
            session_id: session,
            seq: 1,
            context: &context,
            history: &[],
            tools: &[],
            max_tokens: None,
        };
        match model.next(&input) {
            Ok(steps) => steps
                .into_iter()
                .filter_map(|s| match s {
                    Step::Deliver { text, .. } | Step::Thought(text) => Some(marked_lines(&text)),
                    Step::ToolCall { .. } | Step::Malformed { .. } | Step::Plan(_) => None,
                })
                .flatten()
                .collect(),
            Err(e) => {
                tracing::warn!(turn_id, error = %e, "memory model failed; keeping what the deliverable itself marks");
                vec![]
            }
        }
    }

    fn embed_all(
        &self,
        work: &[(&Record, Vec<Item>)],
    ) -> std::collections::HashMap<String, Vec<f32>> {
        let mut out = std::collections::HashMap::new();
        let Some(url) = self.config.embeddings_url.as_deref() else {
            return out;
        };
        for (_, items) in work {
            for i in items {
                if out.contains_key(&i.text) {
                    continue;
                }
                match self.handle.block_on(kura_model::embed(
                    url,
                    &self.config.embeddings_model,
                    &i.text,
                )) {
                    Ok(v) => {
                        out.insert(i.text.clone(), v);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "embedding failed; the record is still searchable by text")
                    }
                }
            }
        }
        out
    }
}

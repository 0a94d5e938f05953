//! What a model answer's prompt was built from, read back from the store: the hash and frame
//! on the answer's first record, the sealed context ledger of the turn whose output ledger
//! holds it, and the records before it there. `kura_model::prompt::prove` builds the body
//! again from these; `kura show --prompt` and the console both read them here.

use kura_store::{Store, StoreError};
use proto::RecordId;
use proto::prompt::{FRAME_KEY, SHA256_KEY};
use proto::record::Record;

use crate::turns::turn_of_output;

/// The inputs of a recorded prompt.
#[derive(Debug, Clone)]
pub struct PromptOf {
    /// The SHA-256 the record carries (hex).
    pub sha256: String,
    /// The frame it carries, as recorded (JSON).
    pub frame: String,
    /// The turn's sealed context ledger's records.
    pub context: Vec<Record>,
    /// The records before it in the turn's output ledger.
    pub history: Vec<Record>,
}

/// Why there is no prompt to rebuild for a record.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PromptError {
    /// The record carries no prompt hash.
    #[error(
        "record {0} carries no prompt hash: only the first record of a model's answer does, from a provider that sends a request (openai, anthropic)"
    )]
    NotAnAnswer(RecordId),
    /// The record is in no turn's output ledger.
    #[error(
        "record {0} is in no turn's output ledger, so there is no context to rebuild its prompt from"
    )]
    NoTurn(RecordId),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The inputs of the prompt record `rid` begins the answer to.
pub fn prompt_of(store: &Store, rid: RecordId) -> Result<PromptOf, PromptError> {
    let r = store.read_record(rid)?;
    let (Some(sha256), Some(frame)) = (r.metadata.get(SHA256_KEY), r.metadata.get(FRAME_KEY))
    else {
        return Err(PromptError::NotAnAnswer(rid));
    };
    // The output ledger is the one a turn wrote; its context ledger is what the model saw.
    let mut found = None;
    for l in store.ledgers_containing(rid)? {
        if let Some(t) = turn_of_output(store, l)? {
            found = Some((t.context_ledger_id, l));
            break;
        }
    }
    let (context, output) = found.ok_or(PromptError::NoTurn(rid))?;
    let mut history = store.hydrate(output)?;
    let before = history
        .iter()
        .position(|x| x.record_id == rid)
        .unwrap_or(history.len());
    history.truncate(before);
    Ok(PromptOf {
        sha256: sha256.clone(),
        frame: frame.clone(),
        context: store.hydrate(context)?,
        history,
    })
}

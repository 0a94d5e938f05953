//! What a model answer's prompt was built from, read back from the store: a `model.prompt`
//! record (the hash and frame), and for each turn output ledger holding it the turn's sealed
//! context ledger and the records before it there. `kura_model::prompt::prove` builds the
//! body again from these; `kura show --prompt` and the console both read them here.

use kura_store::{Store, StoreError};
use proto::prompt::PromptContent;
use proto::record::{Record, RecordType};
use proto::verify::Scope;
use proto::{LedgerId, RecordId};

use kura_work::turn_of_output;

/// One place a prompt record stands: an output ledger, and what the body is built from there.
#[derive(Debug, Clone)]
pub struct PromptAt {
    /// The turn's output ledger holding the record.
    pub ledger: LedgerId,
    /// The turn's sealed context ledger's records.
    pub context: Vec<Record>,
    /// The records before the prompt record in the output ledger.
    pub history: Vec<Record>,
    /// What `kura verify` finds wrong with the two ledgers (and their ancestors): the
    /// rebuild proves nothing about records that no longer hash to what they were.
    pub problems: Vec<String>,
}

/// A recorded prompt and every place it stands (identical prompts are one record, by content
/// address, so one record can stand in several turns).
#[derive(Debug, Clone)]
pub struct PromptOf {
    /// What the record says was sent.
    pub content: PromptContent,
    /// Each turn whose output ledger holds it.
    pub at: Vec<PromptAt>,
}

/// Why there is no prompt to rebuild for a record.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PromptError {
    /// The record is not a `model.prompt` record.
    #[error(
        "record {0} is not a model.prompt record: give the id of the model.prompt record before an answer (`kura log <session> --records` lists them)"
    )]
    NotAPrompt(RecordId),
    /// Its content does not read as a prompt.
    #[error("record {0} does not read as a model.prompt: {1}")]
    Unreadable(RecordId, String),
    /// The record is in no turn's output ledger.
    #[error(
        "record {0} is in no turn's output ledger, so there is no context to rebuild its prompt from"
    )]
    NoTurn(RecordId),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The prompt record `rid` and every place it stands, its ledgers verified as `kura verify`
/// checks them with `people`'s redactions (`[writs] issuers`) honoured.
pub fn prompt_of(
    store: &Store,
    rid: RecordId,
    people: &[kura_policy::writ::Issuer],
) -> Result<PromptOf, PromptError> {
    let r = store.read_record(rid)?;
    if r.record_type != RecordType::ModelPrompt {
        return Err(PromptError::NotAPrompt(rid));
    }
    let content =
        PromptContent::read(&r.content).map_err(|e| PromptError::Unreadable(rid, e.to_string()))?;
    let mut at = Vec::new();
    for ledger in store.ledgers_containing(rid)? {
        let Some(turn) = turn_of_output(store, ledger)? else {
            continue;
        };
        let mut history = store.hydrate(ledger)?;
        let before = history
            .iter()
            .position(|x| x.record_id == rid)
            .unwrap_or(history.len());
        history.truncate(before);
        let context = store.hydrate(turn.context_ledger_id)?;
        // What verify finds about these two ledgers, their records and the schema that
        // guards them — not a redaction or a record elsewhere in the store.
        let ours: std::collections::HashSet<String> = context
            .iter()
            .chain(&history)
            .map(|r| r.record_id.to_string())
            .chain([
                rid.to_string(),
                ledger.to_string(),
                turn.context_ledger_id.to_string(),
            ])
            .collect();
        let mut problems = Vec::new();
        for l in [turn.context_ledger_id, ledger] {
            let report =
                kura_store::verify::verify_with(store, &Scope::Ledger(l), None, None, people)?;
            problems.extend(
                report
                    .problems
                    .iter()
                    .filter(|p| p.kind == "schema" || ours.contains(&p.id))
                    .map(ToString::to_string),
            );
        }
        problems.dedup();
        at.push(PromptAt {
            ledger,
            context,
            history,
            problems,
        });
    }
    if at.is_empty() {
        return Err(PromptError::NoTurn(rid));
    }
    Ok(PromptOf { content, at })
}

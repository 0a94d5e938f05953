//! Minato's policy over the work tables: how a request becomes a session turn (context
//! packing, memory hits) and what follows a completed turn (the completion rule). One
//! transaction per unit of work, each advancing minato's cursor in the same transaction.

use kura_store::Tx;
use kura_store::error::{Result, StoreError};
use kura_store::{Store, memory};
use kura_tlog::sealer::Sealer;
use kura_work::WorkTx;
use kura_work::{
    cursor, last_deliverable, next_done_turn_after, next_request_after, next_turn_seq,
    request_instruction, request_replays, set_cursor,
};
use proto::SessionStatus;
use proto::consumers::{MINATO_COMPLETIONS, MINATO_REQUESTS};
use proto::{LedgerId, RecordId, SessionId, TurnId};

/// A request minato turned into a session turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// The request.
    pub request_seq: i64,
    /// The (new or continued) session.
    pub session_id: SessionId,
    /// The first turn, ready for dispatch.
    pub turn_id: TurnId,
}

/// What minato decided after a turn completed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Another turn is ready for dispatch.
    Next {
        /// The session.
        session_id: SessionId,
        /// The new turn.
        turn_id: TurnId,
    },
    /// The session is complete.
    Complete {
        /// The session.
        session_id: SessionId,
    },
}

fn instruction_text(tx: &Tx<'_>, record_id: RecordId) -> Result<String> {
    let v = tx.read_record(record_id)?.content;
    Ok(proto::content::text_of(&v)
        .map(str::to_owned)
        .unwrap_or_default())
}

fn label_from(text: &str) -> String {
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let label: String = one_line.chars().take(60).collect();
    if label.is_empty() {
        "session".into()
    } else {
        label
    }
}

/// The top memory hits for an instruction (superseded decisions left out).
fn memory_for(tx: &Tx<'_>, instruction: RecordId, hits: usize) -> Result<Vec<RecordId>> {
    if hits == 0 {
        return Ok(vec![]);
    }
    let found = memory::search(
        tx,
        &memory::Search {
            query: instruction_text(tx, instruction)?,
            limit: hits,
            ..Default::default()
        },
    )?;
    Ok(found
        .into_iter()
        .filter(|h| !h.superseded)
        .map(|h| h.record.record_id)
        .collect())
}

/// Packs and seals a turn's context ledger — the given members (instruction, previous
/// deliverable), then the top memory hits for the instruction — and files a pending turn.
fn new_turn(
    tx: &Tx<'_>,
    session_id: SessionId,
    request_seq: i64,
    parents: &[LedgerId],
    members: &[RecordId],
    memory_hits: usize,
    sealer: Option<&Sealer>,
) -> Result<TurnId> {
    let seq = next_turn_seq(tx, session_id)?;
    let ctx = tx.open_ledger(session_id, &format!("turn-{seq}-ctx"), parents)?;
    let mut all = members.to_vec();
    if let Some(instruction) = members.first() {
        all.extend(memory_for(tx, *instruction, memory_hits)?);
    }
    for m in &all {
        tx.append_existing(ctx.ledger_id, *m)?;
    }
    tx.seal(ctx.ledger_id, sealer)?;
    tx.insert_turn(session_id, seq, request_seq, ctx.ledger_id)
}

/// Turns the next queued request into a session (new or continued) with a sealed context
/// ledger and a pending turn; `None` when the queue is empty.
pub fn accept_next_request(store: &mut Store, memory_hits: usize) -> Result<Option<Accepted>> {
    let sealer = store.sealer().cloned();
    store.write(|tx| {
        let pos = cursor(tx, MINATO_REQUESTS)?;
        let Some(q) = next_request_after(tx, pos)? else {
            return Ok(None);
        };
        let session = match q.session_id {
            Some(s) => {
                let s = tx.read_session(s)?;
                tx.set_session_status(s.session_id, SessionStatus::Active)?;
                s
            }
            None => tx.create_session(&label_from(&instruction_text(tx, q.record_id)?))?,
        };
        let parents: Vec<LedgerId> = session.head_ledger_id.into_iter().collect();
        let turn_id = new_turn(
            tx,
            session.session_id,
            q.request_seq,
            &parents,
            &[q.record_id],
            memory_hits,
            sealer.as_ref(),
        )?;
        tx.mark_accepted(q.request_seq, session.session_id)?;
        set_cursor(tx, MINATO_REQUESTS, q.request_seq)?;
        Ok(Some(Accepted {
            request_seq: q.request_seq,
            session_id: session.session_id,
            turn_id,
        }))
    })
}

/// Decides what follows the next completed turn: complete the session (a final deliverable,
/// or `max_turns` reached) or pack the next turn's context (the previous output as parent).
pub fn decide_next_completion(
    store: &mut Store,
    max_turns: i64,
    memory_hits: usize,
) -> Result<Option<Decision>> {
    let sealer = store.sealer().cloned();
    store.write(|tx| {
        let pos = cursor(tx, MINATO_COMPLETIONS)?;
        let Some((t, done_seq)) = next_done_turn_after(tx, pos)? else {
            return Ok(None);
        };
        let output = t.output_ledger_id.ok_or_else(|| StoreError::Corrupt {
            what: "turn",
            id: t.turn_id.to_string(),
            detail: "done but has no output ledger".into(),
        })?;
        let deliverable = last_deliverable(tx, output)?;
        // A deliverable says `"final": false` to ask for another turn; anything else ends
        // the session.
        let is_final = deliverable
            .as_ref()
            .is_none_or(|d| proto::content::final_of(&d.content) != Some(false));
        // A replayed turn is one recorded turn: the next one (if any) is its own replay
        // request. Continuing here would run a live turn, side effects and all, in the fork.
        let replays = request_replays(tx, t.request_seq)?;
        let decision = if is_final || replays || t.seq >= max_turns {
            tx.set_session_status(t.session_id, SessionStatus::Complete)?;
            Decision::Complete {
                session_id: t.session_id,
            }
        } else {
            let mut members = vec![request_instruction(tx, t.request_seq)?];
            members.extend(deliverable.map(|d| d.record_id));
            let next = new_turn(
                tx,
                t.session_id,
                t.request_seq,
                &[output],
                &members,
                memory_hits,
                sealer.as_ref(),
            )?;
            Decision::Next {
                session_id: t.session_id,
                turn_id: next,
            }
        };
        set_cursor(tx, MINATO_COMPLETIONS, done_seq)?;
        Ok(Some(decision))
    })
}

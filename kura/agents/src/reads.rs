//! The read-only operations (a session's log, a record, verify, an inclusion proof, a diff)
//! and delegation to Kura's own agents. An agent reads only its own sessions (anything else
//! is "not found", as if it did not exist); every answer is bounded: a page of records, a
//! side of a diff, one wait of at most [`crate::ops::MAX_WAIT`].

use std::time::{Duration, Instant};

use kura_store::Store;
use kura_store::verify::{Scope, verify};
use kura_work::agents::{ledger_agent, record_of_agent, session_agent};
use proto::agent::*;
use proto::doorbell::SessionCreate;
use proto::record::Record;
use serde_json::Value;

use crate::ops::{Gateway, MAX_WAIT, store_error};
use crate::{Caller, GatewayError};

/// The most records one answer carries.
const MAX_RECORDS: usize = 500;
/// The most records per side of a diff.
const MAX_DIFF_SIDE: usize = 200;

fn value(r: &Record) -> Value {
    serde_json::to_value(r).unwrap_or(Value::Null)
}

/// Refuses a session that is not the caller's, as not found.
fn own_session(store: &Store, caller: &Caller, s: proto::SessionId) -> Result<(), GatewayError> {
    match session_agent(store, s).map_err(store_error)? {
        Some(a) if a == caller.author() => Ok(()),
        _ => Err(GatewayError::NotFound(format!(
            "no session {s} of this agent"
        ))),
    }
}

/// Refuses a ledger that is not in one of the caller's sessions, as not found.
pub(crate) fn own_ledger(
    store: &Store,
    caller: &Caller,
    l: proto::LedgerId,
) -> Result<(), GatewayError> {
    match ledger_agent(store, l).map_err(store_error)? {
        Some(a) if a == caller.author() => Ok(()),
        _ => Err(GatewayError::NotFound(format!(
            "no ledger {l} of this agent"
        ))),
    }
}

impl Gateway {
    /// A session's records, newest ledgers first, at most `limit`.
    pub fn read_log(&self, caller: &Caller, req: ReadLog) -> Result<Records, GatewayError> {
        let limit = req.limit.unwrap_or(100).clamp(1, MAX_RECORDS);
        self.with_store(|store| {
            own_session(store, caller, req.session_id)?;
            let mut ledgers = store.session_ledgers(req.session_id).map_err(store_error)?;
            if ledgers.is_empty() {
                return Err(GatewayError::NotFound(format!(
                    "no session {}",
                    req.session_id
                )));
            }
            ledgers.reverse();
            let (mut records, mut truncated) = (Vec::new(), false);
            'ledgers: for l in ledgers {
                // Only what the page can still take is read.
                let room = (limit - records.len()) as u64;
                let take = l.record_count.min(room);
                let take_n = usize::try_from(take).unwrap_or(limit);
                for r in store
                    .hydrate_range(l.ledger_id, 0, take_n)
                    .map_err(store_error)?
                {
                    records.push(value(&r));
                }
                if records.len() == limit {
                    truncated = l.record_count > take;
                    break 'ledgers;
                }
            }
            Ok(Records { records, truncated })
        })
    }

    /// One record.
    pub fn show_record(&self, caller: &Caller, req: ShowRecord) -> Result<Records, GatewayError> {
        self.with_store(|store| {
            if !record_of_agent(store, req.record_id, &caller.author()).map_err(store_error)? {
                return Err(GatewayError::NotFound(format!(
                    "no record {} of this agent",
                    req.record_id
                )));
            }
            let r = store.read_record(req.record_id).map_err(store_error)?;
            Ok(Records {
                records: vec![value(&r)],
                truncated: false,
            })
        })
    }

    /// Verifies a session or a ledger (not the whole store: that is the sweep's job).
    pub fn verify(&self, caller: &Caller, req: Verify) -> Result<Verified, GatewayError> {
        let scope = match (req.session_id, req.ledger_id) {
            (Some(s), None) => Scope::Session(s),
            (None, Some(l)) => Scope::Ledger(l),
            _ => return Err(GatewayError::Invalid("give session_id or ledger_id".into())),
        };
        self.with_store(|store| {
            match scope {
                Scope::Session(s) => own_session(store, caller, s)?,
                Scope::Ledger(l) => own_ledger(store, caller, l)?,
                Scope::All => {}
            }
            let report = verify(store, &scope, None, None).map_err(store_error)?;
            Ok(Verified {
                ok: report.ok(),
                records_checked: report.records_checked,
                ledgers_checked: report.ledgers_checked,
                problems: report.problems.iter().map(ToString::to_string).collect(),
            })
        })
    }

    /// An inclusion proof of a record in a sealed ledger.
    pub fn prove(&self, caller: &Caller, req: Prove) -> Result<Proof, GatewayError> {
        self.with_store(|store| {
            own_ledger(store, caller, req.ledger_id)?;
            let p = kura_store::proof::prove(store, req.record_id, req.ledger_id)
                .map_err(store_error)?;
            Ok(Proof {
                proof: serde_json::to_value(&p).unwrap_or(Value::Null),
            })
        })
    }

    /// What differs between two ledgers.
    pub fn diff(&self, caller: &Caller, req: Diff) -> Result<Diffed, GatewayError> {
        self.with_store(|store| {
            own_ledger(store, caller, req.a)?;
            own_ledger(store, caller, req.b)?;
            let d = kura_history::diff::diff(store, req.a, req.b).map_err(store_error)?;
            let side = |v: &[Record]| v.iter().take(MAX_DIFF_SIDE).map(value).collect();
            Ok(Diffed {
                only_a: side(&d.only_a),
                only_b: side(&d.only_b),
                in_both: d.both.len(),
            })
        })
    }

    /// Hands a task to Kura's own agents: the instruction authored by the calling agent,
    /// queued for minato, which runs it in hashi's sandbox under Kura's policy.
    pub fn delegate(&self, caller: &Caller, req: Delegate) -> Result<Delegated, GatewayError> {
        if req.instruction.trim().is_empty() {
            return Err(GatewayError::Invalid("the instruction is empty".into()));
        }
        // Counted and bounded like any record the agent writes.
        let rec = self.record(
            caller,
            proto::RecordType::TaskInstruction,
            proto::Content::text(req.instruction.clone()),
        )?;
        let request = self.with_store(|store| {
            kura_work::submit(store, &req.instruction, &rec.author_id, None).map_err(store_error)
        })?;
        if let Some(bus) = &self.bus {
            bus.ring(
                bus.subjects.session_create(),
                &SessionCreate {
                    record_id: request.record_id,
                    session_id: None,
                },
            );
        }
        self.delegation(
            caller,
            Delegation {
                request_seq: request.request_seq,
                wait_ms: req.wait_ms,
            },
        )
    }

    /// Where a delegated task stands, waiting up to `wait_ms` for it to complete.
    pub fn delegation(&self, caller: &Caller, req: Delegation) -> Result<Delegated, GatewayError> {
        let _slot = self.limits.wait(&caller.agent)?;
        let deadline =
            Instant::now() + Duration::from_millis(req.wait_ms.unwrap_or(0)).min(MAX_WAIT);
        loop {
            let mark = self.wakeup.mark();
            let (status, author) = self.with_store(|store| {
                let author =
                    kura_work::request_submitter(store, req.request_seq).map_err(store_error)?;
                let status =
                    kura_work::request_status(store, req.request_seq).map_err(store_error)?;
                Ok((status, author))
            })?;
            // Another agent's (or a person's) request tells this agent nothing.
            if author != caller.author() {
                return Err(GatewayError::NotFound(format!(
                    "no delegation {} of this agent",
                    req.request_seq
                )));
            }
            if status.complete || Instant::now() >= deadline {
                return Ok(Delegated {
                    request_seq: req.request_seq,
                    session_id: status.session_id,
                    complete: status.complete,
                    deliverable: status
                        .deliverable
                        .as_ref()
                        .and_then(|d| proto::content::text_of(&d.content).map(str::to_owned)),
                });
            }
            self.wakeup.wait(mark, deadline, self.bus_up());
        }
    }
}

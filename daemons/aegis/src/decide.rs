//! Aegis's decisions, each one SQLite transaction: policy on new requests, people's signed
//! votes, expiry. Every decision is an `approval.decision` record in the turn's ledger;
//! every refused message is a recorded rejection.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use kura_store::Store;
use kura_store::work::approvals::{ApprovalState, Outcome, Vote};
use kura_store::work::approvals::{
    add_refusals_in, append_to_turn_in, approval, asked, finalize_in, mark_asked_in, next_pending,
    record_vote_in, reject_in, request_arguments,
};
use kura_store::work::now_ms;
use kura_store::{ConflictKind, StoreError};
use proto::doorbell::ApprovalDecision;
use proto::record::{NewRecord, RecordType};
use serde::Serialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::limit::{Key, Limiter};
use crate::policy::{Policy, Verdict};
use crate::{Approver, keys};

/// aegis's own author id: policy rulings, expiries and refusals.
pub const AUTHOR: &str = "sys:aegis";

fn decision_record(author: &str, content: Value) -> NewRecord {
    NewRecord {
        record_type: RecordType::ApprovalDecision,
        content,
        author_id: author.to_owned(),
        metadata: BTreeMap::new(),
    }
}

/// What policy did with one request: its new state, and the turn to re-dispatch if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evaluated {
    /// The request.
    pub request_id: Uuid,
    /// Where the request is now.
    pub state: ApprovalState,
    /// A parked turn that can run again.
    pub woke: Option<Uuid>,
}

/// Applies policy to `request_id` (or the oldest pending request). `allow`/`deny` are
/// decided at once by `sys:aegis`; `ask` waits for people until `ask_timeout_ms`.
pub fn evaluate(
    store: &mut Store,
    policy: &Policy,
    ask_timeout_ms: i64,
    request_id: Option<Uuid>,
) -> kura_store::Result<Option<Evaluated>> {
    store.write(|tx| {
        let a = match request_id {
            Some(id) => approval(tx, id)?,
            None => next_pending(tx)?,
        };
        let Some(a) = a else { return Ok(None) };
        if a.state != ApprovalState::Pending {
            return Ok(Some(Evaluated { request_id: a.request_id, state: a.state, woke: None }));
        }
        let args = request_arguments(tx, a.request_id)?;
        let ruling = policy.evaluate(&a.tool_name, a.effect.as_str(), &args, &a.session_id.to_string());
        let (state, woke) = match ruling.verdict {
            Verdict::Ask => {
                mark_asked_in(tx, a.request_id, &ruling.rule, ruling.approvers, now_ms() + ask_timeout_ms)?;
                (ApprovalState::Asked, None)
            }
            v => {
                let (state, outcome) = if v == Verdict::Allow {
                    (ApprovalState::Approved, Outcome::Allow)
                } else {
                    (ApprovalState::Denied, Outcome::Deny)
                };
                let rec = append_to_turn_in(
                    tx,
                    a.turn_id,
                    &decision_record(
                        AUTHOR,
                        json!({"request_id": a.request_id, "outcome": outcome, "rule": ruling.rule, "by": "policy"}),
                    ),
                )?;
                (state, finalize_in(tx, &a, state, &ruling.rule, rec.record_id)?)
            }
        };
        tracing::info!(request_id = %a.request_id, tool = %a.tool_name, rule = %ruling.rule, %state, "approval request evaluated");
        Ok(Some(Evaluated { request_id: a.request_id, state, woke }))
    })
}

/// Adds refusals the rate limit held back to the stored counts, in one write.
pub fn add_refusals(store: &mut Store, held: &[(Key, i64)]) -> kura_store::Result<()> {
    if held.is_empty() {
        return Ok(());
    }
    store.write(|tx| {
        for ((request, approver), n) in held {
            add_refusals_in(tx, request, approver, *n)?;
        }
        Ok(())
    })
}

/// Denies every ask past its deadline (a decision by `sys:aegis`); returns woken turns.
pub fn expire_overdue(store: &mut Store, now: i64) -> kura_store::Result<Vec<Uuid>> {
    store.write(|tx| {
        let mut woke = Vec::new();
        for a in asked(tx)?.into_iter().filter(|a| a.deadline_ms.is_some_and(|d| d < now)) {
            let rule = a.rule.clone().unwrap_or_default();
            let rec = append_to_turn_in(
                tx,
                a.turn_id,
                &decision_record(
                    AUTHOR,
                    json!({"request_id": a.request_id, "outcome": Outcome::Deny, "rule": rule, "by": "expiry",
                           "reason": "no decision before the deadline"}),
                ),
            )?;
            tracing::info!(request_id = %a.request_id, "approval request expired: denied");
            woke.extend(finalize_in(tx, &a, ApprovalState::Denied, &rule, rec.record_id)?);
        }
        Ok(woke)
    })
}

/// The answer to a person's decision message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Verdicted {
    /// Whether the decision was accepted.
    pub ok: bool,
    /// The request's state afterwards (when known).
    pub state: String,
    /// What happened, for the person.
    pub message: String,
    /// A parked turn that can run again.
    #[serde(skip)]
    pub woke: Option<Uuid>,
}

fn rejected(message: String) -> Verdicted {
    Verdicted {
        ok: false,
        state: String::new(),
        message,
        woke: None,
    }
}

/// Checks and records a person's signed decision. Unsigned, wrongly signed, unknown-key,
/// wrong-request, replayed, duplicate or late decisions are refused and recorded.
/// Refuses a `signed_at` that is not an RFC 3339 UTC time within `window` of `now`: a
/// decision signed long ago (or "in the future") is stale or forged.
fn check_signed_at(text: &str, now: SystemTime, window: Duration) -> Result<(), String> {
    let shown: String = text.chars().take(40).collect();
    let t = humantime::parse_rfc3339(text)
        .map_err(|_| format!("signed_at {shown:?} is not an RFC 3339 UTC time"))?;
    let skew = now
        .duration_since(t)
        .or_else(|e| Ok::<_, ()>(e.duration()))
        .unwrap_or(Duration::MAX);
    if skew > window {
        return Err(format!(
            "signed_at {shown} is {} s from aegis's clock; decisions must be signed within {} s",
            skew.as_secs(),
            window.as_secs()
        ));
    }
    Ok(())
}

/// Checks and records a person's signed decision. Unsigned, wrongly signed, unknown-key,
/// stale, wrong-request, replayed, duplicate or late decisions are refused and counted
/// (the first few per request and approver recorded in full).
pub fn decide(
    store: &mut Store,
    approvers: &[Approver],
    signed_within: Duration,
    limiter: &mut Limiter,
    d: &ApprovalDecision,
) -> kura_store::Result<Verdicted> {
    let raw = serde_json::to_string(d).unwrap_or_default();
    let outcome = store.write(|tx| {
        let Some(a) = approval(tx, d.request_id)? else {
            return Ok(Err((None, format!("no approval request {}", d.request_id))));
        };
        let check = (|| -> Result<(&Approver, Vote), String> {
            let vote: Vote = d
                .decision
                .parse()
                .map_err(|_| format!("decision must be approve or deny, not {:?}", d.decision))?;
            let who = approvers
                .iter()
                .find(|x| x.name == d.approver)
                .ok_or_else(|| format!("approver {:?} has no trusted key", d.approver))?;
            keys::verify(&who.public_key, d, &a.request_hash)?;
            check_signed_at(&d.signed_at, SystemTime::now(), signed_within)?;
            if a.state != ApprovalState::Asked {
                return Err(format!(
                    "request is not waiting for people (it is {})",
                    a.state
                ));
            }
            Ok((who, vote))
        })();
        let (who, decision) = match check {
            Ok(w) => w,
            Err(reason) => return Ok(Err((Some(a), reason))),
        };
        let author = format!("user:{}", who.name);
        let vote = decision_record(
            &author,
            json!({
                "request_id": a.request_id, "request_hash": a.request_hash, "outcome": d.decision,
                "approver": author, "note": d.note, "signed_at": d.signed_at,
                "signature": d.signature, "public_key": who.public_key, "rule": a.rule,
            }),
        );
        // Only a second vote is the sender's fault; a full disk or an I/O error is ours and
        // propagates instead of being recorded as a refusal.
        let (rec, count) = match record_vote_in(
            tx,
            &a,
            (&author, &who.public_key),
            decision,
            &vote,
            &d.signature,
        ) {
            Ok(x) => x,
            Err(StoreError::Conflict {
                kind: ConflictKind::DuplicateVote,
                ..
            }) => {
                return Ok(Err((Some(a), "duplicate or replayed decision".to_owned())));
            }
            Err(e) => return Err(e),
        };
        let rule = a.rule.clone().unwrap_or_default();
        let (state, woke) = if decision == Vote::Deny {
            (
                ApprovalState::Denied,
                finalize_in(tx, &a, ApprovalState::Denied, &rule, rec.record_id)?,
            )
        } else if count >= a.required {
            (
                ApprovalState::Approved,
                finalize_in(tx, &a, ApprovalState::Approved, &rule, rec.record_id)?,
            )
        } else {
            (ApprovalState::Asked, None)
        };
        let message = match state {
            ApprovalState::Asked => format!("approval recorded ({count} of {} needed)", a.required),
            s => format!("request {s} by {author}"),
        };
        Ok(Ok(Verdicted {
            ok: true,
            state: state.to_string(),
            message,
            woke,
        }))
    })?;
    match outcome {
        Ok(v) => Ok(v),
        Err((a, reason)) => {
            tracing::warn!(request_id = %d.request_id, approver = %d.approver, %reason, "rejected approval decision");
            // Refusals are counted per request and *trusted* name: a name the sender made up
            // is counted as untrusted, so inventing names cannot multiply rows or writes.
            let approver = approvers
                .iter()
                .any(|x| x.name == d.approver)
                .then(|| format!("user:{}", d.approver));
            let key = (
                a.as_ref()
                    .map(|a| a.request_id.to_string())
                    .unwrap_or_default(),
                approver.clone().unwrap_or_default(),
            );
            // Past a few per window, a refusal is only counted in memory (see `limit`).
            if limiter.admit(&key, std::time::Instant::now()) {
                store.write(|tx| {
                    reject_in(tx, AUTHOR, a.as_ref(), approver.as_deref(), &reason, &raw)
                })?;
            }
            Ok(Verdicted {
                state: a.map(|a| a.state.to_string()).unwrap_or_default(),
                ..rejected(format!("rejected: {reason}"))
            })
        }
    }
}

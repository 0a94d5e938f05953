//! Aegis's decisions, each one SQLite transaction: policy on new requests, people's signed
//! votes, expiry. Every decision is an `approval.decision` record in the turn's ledger;
//! every refused message is a recorded rejection.

use kura_work::WorkTx;
use proto::{RequestId, TurnId};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use kura_store::Store;
use kura_store::{ConflictKind, StoreError};
use kura_work::approvals::Approval;
use kura_work::approvals::{ApprovalState, Vote};
use kura_work::approvals::{approval, approvals_so_far, asked, next_pending};
use kura_work::now_ms;
use proto::content::{ExpiryContent, SignedVoteContent};
use proto::doorbell::ApprovalDecision;
use proto::doorbell::SentVote;
use proto::record::{NewRecord, RecordType};
use serde_json::Value;

use crate::limit::{Key, Limiter};
use crate::policy::Policy;
use crate::{Approver, Approvers, keys};

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
    pub request_id: RequestId,
    /// Where the request is now.
    pub state: ApprovalState,
    /// A parked turn that can run again.
    pub woke: Option<TurnId>,
    /// True when this evaluation put the request to people (notify them).
    pub asked_now: bool,
}

/// Applies policy to `request_id` (or the oldest pending request). `allow`/`deny` are
/// decided at once by `sys:aegis`; `ask` waits for people until `ask_timeout_ms`.
pub fn evaluate(
    store: &mut Store,
    policy: &Policy,
    issuers: &[kura_policy::writ::Issuer],
    ask_timeout_ms: i64,
    request_id: Option<RequestId>,
) -> kura_store::Result<Option<Evaluated>> {
    store.write(|tx| {
        let a = match request_id {
            Some(id) => approval(tx, id)?,
            None => next_pending(tx)?,
        };
        let Some(a) = a else { return Ok(None) };
        if a.state != ApprovalState::Pending {
            return Ok(Some(Evaluated { request_id: a.request_id, state: a.state, woke: None, asked_now: false }));
        }
        let ruled = kura_work::gate::rule_pending(tx, &a, policy, issuers, now_ms() + ask_timeout_ms)?;
        tracing::info!(request_id = %a.request_id, tool = %a.tool_name, rule = %ruled.rule, state = %ruled.state, "approval request evaluated");
        let asked_now = ruled.state == ApprovalState::Asked;
        Ok(Some(Evaluated { request_id: a.request_id, state: ruled.state, woke: ruled.woke, asked_now }))
    })
}

/// Adds refusals the rate limit held back to the stored counts, in one write.
pub fn add_refusals(store: &mut Store, held: &[(Key, i64)]) -> kura_store::Result<()> {
    if held.is_empty() {
        return Ok(());
    }
    store.write(|tx| {
        for ((request, approver), n) in held {
            tx.add_refusals(request, approver, *n)?;
        }
        Ok(())
    })
}

/// Denies every ask past its deadline (a decision by `sys:aegis`); returns each expired
/// request with the turn it woke.
pub fn expire_overdue(
    store: &mut Store,
    now: i64,
) -> kura_store::Result<Vec<(RequestId, Option<TurnId>)>> {
    store.write(|tx| {
        let mut woke = Vec::new();
        for a in asked(tx)?
            .into_iter()
            .filter(|a| a.deadline_ms.is_some_and(|d| d < now))
        {
            let rule = a.rule.clone().unwrap_or_default();
            let rec = tx.append_to_turn(
                a.turn_id,
                &decision_record(
                    AUTHOR,
                    ExpiryContent::new(a.request_id, rule.clone()).to_value(),
                ),
            )?;
            tracing::info!(request_id = %a.request_id, "approval request expired: denied");
            let turn = tx.finalize(&a, ApprovalState::Denied, &rule, rec.record_id)?;
            woke.push((a.request_id, turn));
        }
        Ok(woke)
    })
}

/// What deciding did: aegis's answer for the person, and a parked turn that can run again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdicted {
    /// The signed answer.
    pub verdict: proto::doorbell::Verdicted,
    /// A parked turn that can run again.
    pub woke: Option<TurnId>,
}

impl std::ops::Deref for Verdicted {
    type Target = proto::doorbell::Verdicted;
    fn deref(&self) -> &proto::doorbell::Verdicted {
        &self.verdict
    }
}

fn rejected(message: String) -> Verdicted {
    Verdicted {
        verdict: proto::doorbell::Verdicted::refused(message),
        woke: None,
    }
}

/// Why `name`'s decision is not trusted, saying where to look.
fn untrusted(approvers: &Approvers, name: &str) -> String {
    if let Some(why) = approvers.refused(name) {
        format!("approver {name:?} {why}; their decisions are refused however they arrive")
    } else {
        format!("approver {name:?} has no trusted key")
    }
}

/// Checks and records a person's signed decision. Unsigned, wrongly signed, unknown-key,
/// wrong-request, replayed, duplicate or late decisions are refused and recorded.
/// Refuses a `signed_at` that is not an RFC 3339 UTC time within `window` of `now`: a
/// decision signed long ago (or "in the future") is stale or forged.
fn check_signed_at(text: &str, now: SystemTime, window: Duration) -> Result<(), Refusal> {
    let shown: String = text.chars().take(40).collect();
    let t = humantime::parse_rfc3339(text).map_err(|_| {
        Refusal::SignedAt(format!("signed_at {shown:?} is not an RFC 3339 UTC time"))
    })?;
    let skew = now
        .duration_since(t)
        .or_else(|e| Ok::<_, ()>(e.duration()))
        .unwrap_or(Duration::MAX);
    if skew > window {
        return Err(Refusal::SignedAt(format!(
            "signed_at {shown} is {} s from aegis's clock; decisions must be signed within {} s",
            skew.as_secs(),
            window.as_secs()
        )));
    }
    Ok(())
}

/// An approval's edit that may stand: the arguments (canonical JSON) and, when policy rules
/// on them by a different rule, that rule and its quorum.
#[derive(Debug, Clone, PartialEq)]
struct Edit {
    canonical: String,
    /// Set when the edited call falls under another rule: the request then needs the higher
    /// of the two quorums, and records the new rule.
    stricter: Option<(String, i64)>,
}

/// What a person's decision is held to: the policy aegis holds and who may grant writs.
#[derive(Clone, Copy)]
pub struct Ruled<'a> {
    /// The policy in force.
    pub policy: &'a Policy,
    /// `[writs] issuers`.
    pub issuers: &'a [kura_policy::writ::Issuer],
}

/// Tests rule by a policy alone; the daemon always names `[writs] issuers`.
#[cfg(test)]
impl<'a> From<&'a Policy> for Ruled<'a> {
    fn from(policy: &'a Policy) -> Ruled<'a> {
        Ruled {
            policy,
            issuers: &[],
        }
    }
}

/// The gate's ruling on an edit, on the arguments exactly as hashi (or the agent) will run
/// them: in normal form (the person signed them; nobody respells a signature), within the
/// call's writs, not denied; a rule that needs more people raises the request's quorum.
fn rule_on_edit(
    tx: &kura_store::Tx<'_>,
    args: &serde_json::Map<String, Value>,
    a: &kura_work::approvals::Approval,
    ruled: &Ruled<'_>,
) -> kura_store::Result<Result<Edit, Refusal>> {
    let ruling = match kura_work::gate::rule_edit(tx, a, args, ruled.policy, ruled.issuers)? {
        Ok(r) => r,
        Err(e) => return Ok(Err(Refusal::Edit(e.to_string()))),
    };
    let canonical = match proto::canonical::canonical_json(&Value::Object(args.clone())) {
        Ok(c) => c,
        Err(e) => return Ok(Err(Refusal::Edit(e.to_string()))),
    };
    let stricter = (a.rule.as_deref() != Some(ruling.rule.as_str()))
        .then(|| (ruling.rule, ruling.approvers.max(a.required)));
    Ok(Ok(Edit {
        canonical,
        stricter,
    }))
}

/// An edit, if `d` edits and the edit may stand: only an approval edits, policy rules on
/// the new arguments ([`rule_on_edit`]), and every approving vote of a request binds the
/// same arguments (the first approval decides whether it was edited).
fn check_edit(
    tx: &kura_store::Tx<'_>,
    d: &ApprovalDecision,
    vote: Vote,
    a: &kura_work::approvals::Approval,
    approved_so_far: i64,
    ruled: &Ruled<'_>,
) -> kura_store::Result<Result<Option<Edit>, Refusal>> {
    let edit = match &d.arguments {
        None => None,
        Some(_) if vote != Vote::Approve => {
            return Ok(Err(Refusal::Edit(
                "only an approval can edit the arguments".into(),
            )));
        }
        Some(args) => match rule_on_edit(tx, args, a, ruled)? {
            Ok(e) => Some(e),
            Err(r) => return Ok(Err(r)),
        },
    };
    if vote != Vote::Approve {
        return Ok(Ok(None));
    }
    Ok(match (&a.edited_arguments, &edit) {
        (Some(bound), Some(e)) if *bound != e.canonical => Err(Refusal::Edit(
            "another approver approved other edited arguments; approve those or deny".into(),
        )),
        (Some(_), None) => Err(Refusal::Edit(
            "this request was approved with edited arguments; approve those or deny".into(),
        )),
        (None, Some(_)) if approved_so_far > 0 => Err(Refusal::Edit(
            "others approved the arguments as requested; approve them or deny".into(),
        )),
        _ => Ok(edit),
    })
}

/// Checks and records a person's signed decision. Unsigned, wrongly signed, unknown-key,
/// stale, wrong-request, replayed, duplicate or late decisions are refused and counted
/// (the first few per request and approver recorded in full). An approval may edit the
/// call's arguments: only an approval, never past a deny rule, the same for every vote.
pub fn decide<'a>(
    store: &mut Store,
    approvers: &Approvers,
    signed_within: Duration,
    limiter: &mut Limiter,
    d: &ApprovalDecision,
    ruled: impl Into<Ruled<'a>>,
) -> kura_store::Result<Verdicted> {
    let raw = serde_json::to_string(d).unwrap_or_default();
    let ruled: Ruled<'_> = ruled.into();
    let outcome = store.write(|tx| {
        let Some(a) = approval(tx, d.request_id)? else {
            return Ok(Err((None, Refusal::NoRequest(d.request_id))));
        };
        let approved_so_far = approvals_so_far(tx, a.request_id)?;
        let (who, vote) = match check_decision(approvers, signed_within, d, &a) {
            Ok(w) => w,
            Err(reason) => return Ok(Err((Some(a), reason))),
        };
        let edit = match check_edit(tx, d, vote, &a, approved_so_far, &ruled)? {
            Ok(e) => e,
            Err(reason) => return Ok(Err((Some(a), reason))),
        };
        // An approval is held to the call's writs on the arguments that will run (an edit
        // was, by the gate's ruling on it): a writ revoked or expired since the call was
        // filed denies the request, and nobody's approval can run it.
        if vote == Vote::Approve && edit.is_none() {
            let (hash, _) = ruled.policy.canonical().map_err(|e| StoreError::Invalid(e.to_string()))?;
            if let Err((r, woke)) = kura_work::gate::hold_approval(tx, &a, ruled.issuers, &hash)? {
                tracing::info!(request_id = %a.request_id, refusal = %r, "an approval its writ no longer allows: denied");
                let message = format!("{r}; the request is denied (no approval can run it)");
                let verdict = proto::doorbell::Verdicted { ok: false, state: ApprovalState::Denied.to_string(), message };
                return Ok(Ok(Verdicted { verdict, woke }));
            }
        }
        record_vote(tx, d, a, who, vote, edit)
    })?;
    match outcome {
        Ok(v) => Ok(v),
        Err((a, reason)) => refuse(store, approvers, limiter, d, a, reason, &raw),
    }
}

/// A refused decision: the request, when there is one, and why.
type Refused = (Option<Approval>, Refusal);

/// Why a person's decision is refused: each refusal is recorded, in these words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// No such approval request.
    #[error("no approval request {0}")]
    NoRequest(RequestId),
    /// Over PROTOCOL.md's limits.
    #[error("{0}")]
    Limits(#[from] proto::doorbell::DecisionLimit),
    /// The approver is unknown, removed, or has no usable key.
    #[error("{0}")]
    Untrusted(String),
    /// The signature does not hold.
    #[error("{0}")]
    Signature(#[from] keys::SignatureError),
    /// `signed_at` is unreadable or too far from aegis's clock.
    #[error("{0}")]
    SignedAt(String),
    /// The request is not waiting for people.
    #[error("request is not waiting for people (it is {0})")]
    NotWaiting(ApprovalState),
    /// The edit may not stand.
    #[error("{0}")]
    Edit(String),
    /// This person voted on this request already.
    #[error("duplicate or replayed decision")]
    Duplicate,
    /// The decision is neither `approve` nor `deny`.
    #[error("decision must be approve or deny, not {:?}", match .0 { SentVote::Known(v) => v.as_str().to_owned(), SentVote::Other(s) => s.chars().take(64).collect() })]
    NotAVote(SentVote),
}

/// Who may cast `d` on `a` and their vote, or why it is refused: within limits, by a
/// trusted approver, signed by their key for this very request, fresh, while the request
/// waits for people.
fn check_decision<'a>(
    approvers: &'a Approvers,
    signed_within: Duration,
    d: &ApprovalDecision,
    a: &Approval,
) -> Result<(&'a Approver, Vote), Refusal> {
    d.check_limits()?;
    let vote = d
        .decision
        .known()
        .ok_or_else(|| Refusal::NotAVote(d.decision.clone()))?;
    let who = approvers
        .iter()
        .find(|x| x.name == d.approver)
        .ok_or_else(|| Refusal::Untrusted(untrusted(approvers, &d.approver)))?;
    keys::verify(&who.public_key, d, &a.request_hash)?;
    check_signed_at(&d.signed_at, SystemTime::now(), signed_within)?;
    if a.state != ApprovalState::Asked {
        return Err(Refusal::NotWaiting(a.state));
    }
    Ok((who, vote))
}

/// Records a checked vote in the request's turn and counts it: a deny or the last vote
/// needed decides the request. A second vote by the same person is refused.
fn record_vote(
    tx: &kura_store::Tx<'_>,
    d: &ApprovalDecision,
    a: Approval,
    who: &Approver,
    decision: Vote,
    edit: Option<Edit>,
) -> kura_store::Result<Result<Verdicted, Refused>> {
    // An edit that falls under a stricter rule: the request now needs that rule's quorum
    // and says so, before this vote is counted against it.
    let mut a = a;
    if let Some((rule, required)) = edit.as_ref().and_then(|e| e.stricter.clone())
        && a.edited_arguments.is_none()
    {
        tx.raise_requirement(a.request_id, &rule, required)?;
        a.rule = Some(rule);
        a.required = required;
    }
    let author = format!("user:{}", who.name);
    let content = SignedVoteContent {
        request_id: a.request_id,
        request_hash: a.request_hash.clone(),
        outcome: decision,
        approver: author.clone(),
        note: d.note.clone(),
        signed_at: d.signed_at.clone(),
        signature: d.signature.clone(),
        public_key: who.public_key.clone(),
        rule: a.rule.clone(),
        // The edited arguments are signed: the record keeps them, so anyone can check
        // the signature and see what ran instead of what the model asked for.
        arguments: edit.as_ref().and(d.arguments.clone()),
    };
    let vote = decision_record(&author, content.to_value());
    // Only a second vote is the sender's fault; a full disk or an I/O error is ours and
    // propagates instead of being recorded as a refusal.
    let (rec, count) = match tx.record_vote(
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
            return Ok(Err((Some(a), Refusal::Duplicate)));
        }
        Err(e) => return Err(e),
    };
    if let Some(edit) = &edit
        && a.edited_arguments.is_none()
    {
        tx.set_edited_arguments(a.request_id, &edit.canonical)?;
    }
    let rule = a.rule.clone().unwrap_or_default();
    let (state, woke) = if decision == Vote::Deny {
        (
            ApprovalState::Denied,
            tx.finalize(&a, ApprovalState::Denied, &rule, rec.record_id)?,
        )
    } else if count >= a.required {
        (
            ApprovalState::Approved,
            tx.finalize(&a, ApprovalState::Approved, &rule, rec.record_id)?,
        )
    } else {
        (ApprovalState::Asked, None)
    };
    let message = match state {
        ApprovalState::Asked => format!("approval recorded ({count} of {} needed)", a.required),
        s if edit.is_some() => format!("request {s} with edited arguments by {author}"),
        s => format!("request {s} by {author}"),
    };
    Ok(Ok(Verdicted {
        verdict: proto::doorbell::Verdicted {
            ok: true,
            state: state.to_string(),
            message,
        },
        woke,
    }))
}

/// Records (or, past the rate limit, only counts) a refused decision and says why.
#[allow(clippy::too_many_arguments)]
fn refuse(
    store: &mut Store,
    approvers: &Approvers,
    limiter: &mut Limiter,
    d: &ApprovalDecision,
    a: Option<Approval>,
    reason: Refusal,
    raw: &str,
) -> kura_store::Result<Verdicted> {
    let reason = reason.to_string();
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
        store.write(|tx| tx.reject(AUTHOR, a.as_ref(), approver.as_deref(), &reason, raw))?;
    }
    let mut refused = rejected(format!("rejected: {reason}"));
    refused.verdict.state = a.map(|a| a.state.to_string()).unwrap_or_default();
    Ok(refused)
}

/// PROTOCOL.md's `signed_at` grammar and freshness window, checked against the parser aegis
/// uses (humantime's RFC 3339): the spellings it says are accepted are, the ones it says are
/// refused are.
#[cfg(test)]
mod protocol_md_signed_at {
    use super::check_signed_at;
    use std::time::{Duration, SystemTime};

    #[test]
    fn protocol_md_signed_at_grammar_and_window() {
        // 2026-11-22T10:00:00Z
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_341_600);
        let window = Duration::from_secs(600);
        for ok in [
            "2026-11-22T10:00:00Z",
            "2026-11-22T10:00:00.5Z",
            "2026-11-22T10:00:00.123456789Z",
            "2026-11-22T10:00:00+00:00",
            "2026-11-22T10:00:00.250+00:00",
            // The window is inclusive, either way.
            "2026-11-22T09:50:00Z",
            "2026-11-22T10:10:00Z",
        ] {
            assert_eq!(check_signed_at(ok, at, window), Ok(()), "{ok}");
        }
        for bad in [
            "2026-11-22t10:00:00Z",
            "2026-11-22T10:00:00z",
            "2026-11-22 10:00:00Z",
            "2026-11-22T10:00:00",
            "2026-11-22T12:00:00+02:00",
            "2026-11-22T10:00:00-00:00",
            "2026-11-22T10:00Z",
            "20261122T100000Z",
            "2026-11-22T10:00:00,5Z",
        ] {
            let err = check_signed_at(bad, at, window).expect_err(bad).to_string();
            assert!(err.contains("not an RFC 3339 UTC time"), "{bad}: {err}");
        }
        for stale in ["2026-11-22T09:49:59Z", "2026-11-22T10:10:00.001Z"] {
            let err = check_signed_at(stale, at, window)
                .expect_err(stale)
                .to_string();
            assert!(
                err.contains("must be signed within 600 s"),
                "{stale}: {err}"
            );
        }
    }
}

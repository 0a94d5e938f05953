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
use kura_work::approvals::{approval, approvals_so_far, asked, next_pending, request_content};
use kura_work::now_ms;
use proto::content::{ApprovalRequestContent, ExpiryContent, SignedVoteContent};
use proto::doorbell::ApprovalDecision;
use proto::doorbell::SentVote;
use proto::record::{NewRecord, RecordType};
use serde_json::Value;

use crate::limit::{Key, Limiter};
use crate::policy::{Policy, Verdict};
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
        let content = request_content(tx, a.request_id)?;
        let request = ApprovalRequestContent::read(&content);
        let args = request.as_ref().map_or(Value::Null, |r| Value::Object(r.arguments.clone()));
        let author = kura_work::approvals::request_author(tx, a.request_id)?;
        let submitter = kura_work::turn_submitter(tx, a.turn_id)?;
        let session = a.session_id.to_string();
        // An outside agent's call is held to its writ (its session's, else its own) before
        // policy; hashi checks its own calls before it files them.
        if kura_work::agents::turn_agent(tx, a.turn_id)?.is_some()
            && let Some(w) = kura_work::writs::held_by(tx, a.session_id, Some(&author))?
        {
            let args = args.as_object().cloned().unwrap_or_default();
            let id = w.writ.body.id;
            // The gateway checked and debited it when the agent declared it; here it is held
            // to the writ again (revoked or expired meanwhile), not charged twice.
            let verdict =
                kura_work::writs::recheck_call(tx, &id, issuers, &a.tool_name, a.effect, &args, now_ms())?;
            if let Err(e) = verdict {
                kura_work::writs::count_refusal(tx, &id)?;
                let rule = proto::text::excerpt(&format!("writ: {e}"), 512);
                let (hash, _) = policy.canonical()?;
                let woke = tx.decide_by_policy(&a, false, &rule, &hash, BTreeMap::new())?;
                tracing::info!(request_id = %a.request_id, tool = %a.tool_name, %rule, "refused by its writ");
                return Ok(Some(Evaluated { request_id: a.request_id, state: ApprovalState::Denied, woke, asked_now: false }));
            }
        }
        let mut ruling = policy.evaluate(&kura_policy::Call {
            tool: &a.tool_name,
            effect: a.effect.as_str(),
            args: &args,
            session: &session,
            author: &author,
            on_behalf_of: submitter.as_deref(),
        });
        if request.is_some_and(|r| r.rerun_of.is_some()) {
            ruling = ruling.for_rerun();
        }
        let (state, woke) = match ruling.verdict {
            Verdict::Ask => {
                tx.mark_asked(a.request_id, &ruling.rule, ruling.approvers, now_ms() + ask_timeout_ms)?;
                (ApprovalState::Asked, None)
            }
            v => {
                let (hash, _) = policy.canonical()?;
                let allow = v == Verdict::Allow;
                let woke = tx.decide_by_policy(&a, allow, &ruling.rule, &hash, BTreeMap::new())?;
                (if allow { ApprovalState::Approved } else { ApprovalState::Denied }, woke)
            }
        };
        tracing::info!(request_id = %a.request_id, tool = %a.tool_name, rule = %ruling.rule, %state, "approval request evaluated");
        let asked_now = state == ApprovalState::Asked;
        Ok(Some(Evaluated { request_id: a.request_id, state, woke, asked_now }))
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

/// Denies every ask past its deadline (a decision by `sys:aegis`); returns woken turns.
pub fn expire_overdue(store: &mut Store, now: i64) -> kura_store::Result<Vec<TurnId>> {
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
            woke.extend(tx.finalize(&a, ApprovalState::Denied, &rule, rec.record_id)?);
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

/// The policy an edit is ruled by, and who filed the request (for `author` rules).
#[derive(Clone, Copy)]
pub(crate) struct Ruled<'a> {
    pub(crate) policy: &'a Policy,
    pub(crate) author: &'a str,
    pub(crate) on_behalf_of: Option<&'a str>,
}

/// What policy says of an edit, ruled on the arguments exactly as hashi will run them: they
/// must be in normal form (the person signed them; nobody respells a signature), not denied,
/// and a rule that needs more people raises the request's quorum.
fn rule_on_edit(
    args: &serde_json::Map<String, Value>,
    a: &kura_work::approvals::Approval,
    ruled: &Ruled<'_>,
) -> Result<Edit, Refusal> {
    let Ruled {
        policy,
        author,
        on_behalf_of,
    } = *ruled;
    kura_policy::path::check_normal_args(args)
        .map_err(|e| Refusal::Edit(format!("the edited arguments: {e}")))?;
    let args = Value::Object(args.clone());
    let session = a.session_id.to_string();
    let ruling = policy.evaluate(&kura_policy::Call {
        tool: &a.tool_name,
        effect: a.effect.as_str(),
        args: &args,
        session: &session,
        author,
        on_behalf_of,
    });
    if ruling.verdict == Verdict::Deny {
        return Err(Refusal::Edit(format!(
            "the edited arguments are denied by policy ({})",
            ruling.rule
        )));
    }
    let canonical =
        proto::canonical::canonical_json(&args).map_err(|e| Refusal::Edit(e.to_string()))?;
    let stricter = (a.rule.as_deref() != Some(ruling.rule.as_str()))
        .then(|| (ruling.rule, ruling.approvers.max(a.required)));
    Ok(Edit {
        canonical,
        stricter,
    })
}

/// An edit, if `d` edits and the edit may stand: only an approval edits, policy rules on
/// the new arguments ([`rule_on_edit`]), and every approving vote of a request binds the
/// same arguments (the first approval decides whether it was edited).
fn check_edit(
    d: &ApprovalDecision,
    vote: Vote,
    a: &kura_work::approvals::Approval,
    approved_so_far: i64,
    policy: &Ruled<'_>,
) -> Result<Option<Edit>, Refusal> {
    let edit = match &d.arguments {
        None => None,
        Some(_) if vote != Vote::Approve => {
            return Err(Refusal::Edit(
                "only an approval can edit the arguments".into(),
            ));
        }
        Some(args) => Some(rule_on_edit(args, a, policy)?),
    };
    if vote != Vote::Approve {
        return Ok(None);
    }
    match (&a.edited_arguments, &edit) {
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
    }
}

/// Checks and records a person's signed decision. Unsigned, wrongly signed, unknown-key,
/// stale, wrong-request, replayed, duplicate or late decisions are refused and counted
/// (the first few per request and approver recorded in full). An approval may edit the
/// call's arguments: only an approval, never past a deny rule, the same for every vote.
pub fn decide(
    store: &mut Store,
    approvers: &Approvers,
    signed_within: Duration,
    limiter: &mut Limiter,
    d: &ApprovalDecision,
    policy: &Policy,
) -> kura_store::Result<Verdicted> {
    let raw = serde_json::to_string(d).unwrap_or_default();
    let outcome = store.write(|tx| {
        let Some(a) = approval(tx, d.request_id)? else {
            return Ok(Err((None, Refusal::NoRequest(d.request_id))));
        };
        let approved_so_far = approvals_so_far(tx, a.request_id)?;
        let author = kura_work::approvals::request_author(tx, a.request_id)?;
        let submitter = kura_work::turn_submitter(tx, a.turn_id)?;
        let ruled = Ruled {
            policy,
            author: &author,
            on_behalf_of: submitter.as_deref(),
        };
        let check = check_decision(approvers, signed_within, d, &a, approved_so_far, &ruled);
        let (who, decision, edit) = match check {
            Ok(w) => w,
            Err(reason) => return Ok(Err((Some(a), reason))),
        };
        record_vote(tx, d, a, who, decision, edit)
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

/// Who may cast `d` on `a`, their vote and the edit it makes, or why it is refused: within
/// limits, by a trusted approver, signed by their key for this very request, fresh, while
/// the request waits for people, with an edit that may stand.
fn check_decision<'a>(
    approvers: &'a Approvers,
    signed_within: Duration,
    d: &ApprovalDecision,
    a: &Approval,
    approved_so_far: i64,
    policy: &Ruled<'_>,
) -> Result<(&'a Approver, Vote, Option<Edit>), Refusal> {
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
    let edit = check_edit(d, vote, a, approved_so_far, policy)?;
    Ok((who, vote, edit))
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

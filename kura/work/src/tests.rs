//! The work operations through the store's transaction: a turn claimed, fenced, parked on an
//! approval and woken by its decision; a duplicate vote and a second decision refused.

use kura_store::{ConflictKind, Store, StoreError, StoreOptions};
use proto::record::{NewRecord, RecordType};
use proto::{ApprovalState, Effect, Vote};
use serde_json::json;

use crate::{WorkTx, approvals, claim_next, fenced, now_ms, submit, turn};

pub(crate) fn pending_turn(store: &mut Store) -> proto::TurnId {
    let request = submit(store, "write a file", "user:oles", None).expect("submit");
    let session = store.create_session("s").expect("session");
    let ctx = store
        .open_ledger(session.session_id, "turn-1-ctx", &[])
        .expect("ctx");
    store
        .write(|tx| tx.append_existing(ctx.ledger_id, request.record_id))
        .expect("append");
    store.seal_ledger(ctx.ledger_id).expect("seal");
    store
        .write(|tx| {
            tx.mark_accepted(request.request_seq, session.session_id)?;
            tx.insert_turn(session.session_id, 1, request.request_seq, ctx.ledger_id)
        })
        .expect("turn")
}

#[test]
fn a_parked_turn_wakes_on_its_decision_and_a_stale_claim_is_fenced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store =
        Store::create(dir.path().join("w.db"), &StoreOptions::default()).expect("create");
    let turn_id = pending_turn(&mut store);
    let claim = claim_next(&mut store, "w1", 60_000, now_ms())
        .expect("claim")
        .expect("a turn");
    assert_eq!(claim.turn_id, turn_id);

    let args = json!({"path": "a.txt"})
        .as_object()
        .cloned()
        .expect("object");
    let a = fenced(&mut store, &claim, |tx| {
        tx.request_approval(
            &claim,
            &"c1".into(),
            "fs.write",
            &args,
            Effect::Write,
            "agent:hashi",
            Default::default(),
        )
    })
    .expect("request");
    assert_eq!(a.state, ApprovalState::Pending);
    assert!(
        fenced(&mut store, &claim, |tx| tx.park_turn(&claim, a.request_id)).expect("park"),
        "an undecided request parks the turn"
    );

    // People decide: one vote, a second by the same key refused, then the decision.
    let vote = NewRecord::new(
        RecordType::ApprovalDecision,
        proto::record::Content::text("approve"),
        "user:ann",
    );
    store
        .write(|tx| {
            tx.mark_asked(a.request_id, "people", 1, now_ms() + 60_000)?;
            tx.record_vote(&a, ("user:ann", "ab"), Vote::Approve, &vote, "sig")
        })
        .expect("vote");
    let again =
        store.write(|tx| tx.record_vote(&a, ("user:bob", "AB"), Vote::Approve, &vote, "sig"));
    assert!(matches!(
        again,
        Err(StoreError::Conflict {
            kind: ConflictKind::DuplicateVote,
            ..
        })
    ));
    let woke = store
        .write(|tx| tx.finalize(&a, ApprovalState::Approved, "people", a.request_id.record()))
        .expect("finalize");
    assert_eq!(woke, Some(turn_id));
    let twice =
        store.write(|tx| tx.finalize(&a, ApprovalState::Denied, "people", a.request_id.record()));
    assert!(matches!(
        twice,
        Err(StoreError::Conflict {
            kind: ConflictKind::AlreadyDecided,
            ..
        })
    ));
    assert_eq!(
        approvals::approval(&store, a.request_id)
            .expect("read")
            .map(|a| a.state),
        Some(ApprovalState::Approved)
    );

    // The woken turn is claimed anew under a higher epoch; the old claim no longer writes.
    let next = claim_next(&mut store, "w2", 60_000, now_ms())
        .expect("claim")
        .expect("the woken turn");
    assert!(next.epoch > claim.epoch);
    let stale = fenced(&mut store, &claim, |_| Ok(()));
    assert!(matches!(stale, Err(StoreError::Fenced { .. })));
    let sealer = store.sealer().cloned();
    let out = fenced(&mut store, &next, |tx| {
        tx.complete_turn(&next, sealer.as_ref())
    })
    .expect("complete");
    assert_eq!(out, next.output_ledger_id);
    assert_eq!(
        turn(&store, turn_id).expect("turn").state,
        proto::TurnState::Done
    );
}

/// Attack: an outside agent's turn taken over by a hashi worker (or its request accepted
/// again by minato) would run Kura's own model in the agent's session. Neither can happen:
/// the request is filed accepted and skipped by minato's queue, the turn is never claimable,
/// and only its agent holds a claim on it.
#[test]
fn an_agents_turn_is_never_claimed_by_a_worker_nor_accepted_by_minato() {
    use crate::agents::{AgentSession, AgentStart, agent_claim, open_agent_turn, open_agent_turns};
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store =
        Store::create(dir.path().join("a.db"), &StoreOptions::default()).expect("create");
    let instruction = NewRecord::new(
        RecordType::TaskInstruction,
        proto::record::Content::text("outside work"),
        "agent:laptop",
    );
    let claim = store
        .write(|tx| {
            let rec = tx.write_record(&instruction)?;
            let start = AgentStart {
                agent: "agent:laptop",
                instruction: rec.record_id,
                session: AgentSession::New("outside"),
                memory: &[],
            };
            open_agent_turn(tx, &start, None)
        })
        .expect("open");
    assert_eq!(
        open_agent_turns(&store, "agent:laptop").expect("open turns"),
        1
    );
    // Even with its (absent) lease long past, no worker claims it.
    let later = now_ms() + 86_400_000;
    assert!(
        claim_next(&mut store, "w1", 60_000, later)
            .expect("claim")
            .is_none()
    );
    assert!(
        crate::next_request_after(&store, 0)
            .expect("queue")
            .is_none()
    );
    // Another agent cannot write to it; its own agent can, and ends it.
    assert!(matches!(
        agent_claim(&store, "agent:other", claim.turn_id),
        Err(StoreError::NotFound { .. })
    ));
    let mine = agent_claim(&store, "agent:laptop", claim.turn_id).expect("own claim");
    fenced(&mut store, &mine, |tx| tx.complete_turn(&mine, None)).expect("end");
    assert!(matches!(
        agent_claim(&store, "agent:laptop", claim.turn_id),
        Err(StoreError::Invalid(_))
    ));
    // A continuation must be the agent's own session.
    let rec = store.write_record(&instruction).expect("again");
    let refused = store.write(|tx| {
        open_agent_turn(
            tx,
            &AgentStart {
                agent: "agent:other",
                instruction: rec.0.record_id,
                session: AgentSession::Continue(claim.session_id),
                memory: &[],
            },
            None,
        )
    });
    assert!(matches!(refused, Err(StoreError::NotFound { .. })));
}

/// Regression (issue 34): an ALARM was told by the words a daemon's detail began with; a
/// note that merely starts with them is not one, and an ALARM is one whatever its words.
#[test]
fn a_daemons_alarm_is_its_state_not_the_words_its_detail_begins_with() {
    use crate::ops::{Detail, heartbeat, status};
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store =
        Store::create(dir.path().join("w.db"), &StoreOptions::default()).expect("create");
    let note = Detail::from("ALARMING news: none".to_owned());
    heartbeat(&mut store, "a", "kura", "t", true, false, Some(&note)).expect("beat");
    let alarm = Detail::alarm("fleet: a forged ledger at this Pi's place");
    heartbeat(&mut store, "b", "kura", "t", true, false, Some(&alarm)).expect("beat");
    heartbeat(&mut store, "c", "hashi", "t", true, false, None).expect("beat");
    let st = status(&store).expect("status");
    let by = |i: &str| st.daemons.iter().find(|d| d.instance == i).expect("daemon");
    assert!(!by("a").alarm, "a note is not an ALARM");
    assert!(by("b").alarm);
    assert_eq!(
        by("b").detail.as_deref(),
        Some("ALARM: fleet: a forged ledger at this Pi's place")
    );
    assert!(!by("c").alarm && by("c").detail.is_none());
}

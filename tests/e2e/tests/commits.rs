//! What a turn costs in durable commits, counted in the WAL (every process's commits, so
//! nothing can be left out of the count): a change that adds a commit to the hot path fails
//! here, loudly, and says what the budget is made of.

use std::time::{Duration, Instant};

use kura_testkit::stack::Stack;
use kura_testkit::wal;

/// A thought, one write the policy allows, the deliverable: one model round per step.
const ONE_WRITE: &str = r#"{"turns": [[
  {"thought": "I will keep the note."},
  {"tool": "fs.write", "args": {"path": "notes/today.md", "content": "buy rice"}},
  {"deliver": "kept: {instruction}"}
]]}"#;

/// The whole stack's commits for one such turn:
/// - `minato submit`: the instruction and its request (1);
/// - minato: the session, the context ledger sealed, the turn queued (1);
/// - hashi: the claim (1); the thought, the call, the approval request, the policy's
///   decision and the start mark, before the tool runs (1); the result, before the model is
///   asked again (1); the deliverable, the seal and the completion (1);
/// - minato: the session's completion (1).
///
/// aegis writes nothing for a call its published policy allows: hashi applied it.
const TURN_COMMITS: u64 = 7;
/// hashi's share of [`TURN_COMMITS`]: claim, call, result, end.
const WORKER_COMMITS: u64 = 4;

/// Waits until no process has committed for `quiet` (a daemon may still be finishing).
fn settled(db: &std::path::Path, quiet: Duration) -> Option<wal::WalMark> {
    let mut last = wal::mark(db);
    let mut since = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(10);
    while since.elapsed() < quiet && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        let now = wal::mark(db);
        if now != last {
            last = now;
            since = Instant::now();
        }
    }
    last
}

/// The median of the whole stack's commits per turn over 15 turns of its script (after one
/// warm-up turn that also publishes the policy), with every sample.
fn commits_per_turn(s: &mut Stack) -> (u64, Vec<u64>) {
    // A long lease: no renewal falls inside a measured turn.
    s.extra_env
        .push(("KURA_WORKER__LEASE_MS".into(), "60000".into()));
    for d in ["aegis", "minato", "hashi"] {
        s.spawn(d, d);
    }
    let r = s.submit("warm up");
    s.wait_complete(r, Duration::from_secs(60));
    let mut counts = Vec::new();
    for i in 0..15 {
        let before = settled(&s.db, Duration::from_millis(300));
        let r = s.submit(&format!("turn {i}"));
        s.wait_complete(r, Duration::from_secs(60));
        let after = settled(&s.db, Duration::from_millis(300));
        // A WAL that restarted in between (a checkpoint) cannot be compared: skip that one.
        if let Some(n) = wal::commits_between(before, after) {
            counts.push(n);
        }
    }
    assert!(counts.len() >= 8, "too few comparable turns: {counts:?}");
    counts.sort_unstable();
    // The median: a heartbeat (one commit per daemon every 10 s) may fall into a window.
    (counts[counts.len() / 2], counts)
}

/// The types of the first `n` records of the first turns' output ledgers, in order.
fn first_output_types(s: &Stack, n: usize) -> Vec<String> {
    s.store()
        .conn()
        .prepare(
            "SELECT r.record_type FROM ledger_records m JOIN records r USING (record_id)
               JOIN ledgers l USING (ledger_id)
              WHERE l.label LIKE 'turn-%-out' ORDER BY l.created_at, m.position LIMIT ?1",
        )
        .expect("prepare")
        .query_map([n as i64], |r| r.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows")
}

#[test]
fn a_one_tool_turn_under_an_allow_rule_costs_seven_commits_four_of_them_hashis() {
    let mut s = Stack::new(ONE_WRITE);
    let (median, counts) = commits_per_turn(&mut s);
    assert!(
        median <= TURN_COMMITS,
        "a one-tool turn now costs {median} commits (budget {TURN_COMMITS}, of which hashi \
         {WORKER_COMMITS}); every sample: {counts:?}"
    );
    // Every tool call still has its request and decision on record, the call before them.
    let types = first_output_types(&s, 5);
    assert_eq!(
        types,
        [
            "agent.thought",
            "tool.call",
            "approval.request",
            "approval.decision",
            "tool.result"
        ]
    );
    s.verify_all();
    s.shutdown_cleanly();
}

/// Three rounds of thought → directory listing, then the deliverable: the benchmarks'
/// 10-step turn.
const THREE_READS: &str = r#"{"turns": [[
  {"thought": "step 1"}, {"tool": "fs.list", "args": {}},
  {"thought": "step 2"}, {"tool": "fs.list", "args": {}},
  {"thought": "step 3"}, {"tool": "fs.list", "args": {}},
  {"deliver": "listed: {instruction}"}
]]}"#;

/// A read's result need not be durable before the model is asked again: a worker lost
/// before the next commit leaves the call unanswered, and the next worker runs the read
/// again (only reads are ever re-run). So it rides with the next commit the turn needs —
/// the next call, or the end. hashi: the claim, each call with the previous read's result
/// (3), the last result with the deliverable, seal and completion (1). It was 8 (a commit
/// per result) — 11 for the stack.
#[test]
fn a_turn_of_three_reads_commits_each_result_with_the_next_call() {
    let mut s = Stack::new(THREE_READS);
    let (median, counts) = commits_per_turn(&mut s);
    assert!(
        median <= 8,
        "a three-read turn now costs {median} commits (budget 8: submit 1, minato 2, hashi \
         5); every sample: {counts:?}"
    );
    // Every result is on record after its call and before the next thought.
    let types = first_output_types(&s, 16);
    let round = [
        "agent.thought",
        "tool.call",
        "approval.request",
        "approval.decision",
        "tool.result",
    ];
    let expected: Vec<&str> = round
        .iter()
        .cycle()
        .take(15)
        .copied()
        .chain(["task.deliverable"])
        .collect();
    assert_eq!(types, expected);
    s.verify_all();
    s.shutdown_cleanly();
}

//! End to end: minato, hashi and mikado as separate processes on one SQLite file, ringing
//! each other over a real nats-server — including when NATS or a worker dies.

use std::time::Duration;

use kura_testkit::stack::{Stack, session_records};
use proto::record::RecordType;
use serde_json::json;

const TWO_TURNS: &str = r#"{"turns": [
  [{"thought": "I will write a note, then look at the workspace."},
   {"tool": "fs.write", "args": {"path": "notes/hello.md", "content": "hello from turn 1"}},
   {"tool": "fs.list", "args": {"path": "notes"}},
   {"deliver": "wrote notes/hello.md", "final": false}],
  [{"tool": "fs.read", "args": {"path": "notes/hello.md"}},
   {"deliver": "the note says: hello from turn 1"}]
]}"#;

const MINUTE: Duration = Duration::from_secs(60);

#[test]
fn a_full_session_under_mikados_bundled_nats_then_clean_shutdown() {
    let mut s = Stack::new(TWO_TURNS);
    // Mikado runs its own nats-server for this test, on the harness server's port.
    s.nats.kill();
    s.spawn("mikado", "mikado");
    s.spawn("aegis", "aegis");
    s.spawn("minato", "minato");
    s.spawn("hashi", "hashi");
    let (status, out) = s.submit_and_wait("Write a note, then read it back");
    assert!(status.success(), "submit --wait failed\n{}", s.logs());
    assert_eq!(out.trim(), "the note says: hello from turn 1");

    let store = s.store();
    let session = store.sessions().expect("sessions")[0].clone();
    assert_eq!(session.status, proto::SessionStatus::Complete);
    let ledgers = store.session_ledgers(session.session_id).expect("ledgers");
    let labels: Vec<&str> = ledgers.iter().rev().map(|l| l.label.as_str()).collect();
    assert_eq!(
        labels,
        ["turn-1-ctx", "turn-1-out", "turn-2-ctx", "turn-2-out"]
    );
    for w in ledgers.windows(2) {
        assert_eq!(
            w[0].parent_ids,
            vec![w[1].ledger_id],
            "a chain: each ledger's parent is the one before"
        );
    }
    // Who sealed each: minato packs contexts, hashi seals outputs, each with its own key.
    for l in &ledgers {
        let sealer =
            kura_tlog::storage::LogStorage::sealer_of(&store.seal_log(), &l.ledger_id.to_string())
                .expect("sealer");
        let role = if l.label.ends_with("-ctx") {
            kura_runtime::identity::Role::Minato
        } else {
            kura_runtime::identity::Role::Hashi
        };
        assert_eq!(sealer, Some(s.nats.signer(role)), "{}", l.label);
    }
    let recs = session_records(&store, session.session_id);
    let types: Vec<&str> = recs.iter().map(|r| r.record_type.as_str()).collect();
    // Every call was approved by aegis (policy: allow) before it ran.
    assert_eq!(
        types,
        [
            "agent.thought",
            "tool.call",
            "approval.request",
            "approval.decision",
            "tool.result",
            "tool.call",
            "approval.request",
            "approval.decision",
            "tool.result",
            "task.deliverable",
            "tool.call",
            "approval.request",
            "approval.decision",
            "tool.result",
            "task.deliverable"
        ]
    );
    assert_eq!(recs[3].author_id, "sys:aegis");
    assert_eq!(recs[3].content["outcome"], json!("allow"));
    assert_eq!(
        recs[13].content["result"]["content"],
        json!("hello from turn 1")
    );
    let file = s.path(&format!("ws/{}/notes/hello.md", session.session_id));
    assert_eq!(
        std::fs::read_to_string(file).expect("workspace file"),
        "hello from turn 1"
    );
    s.verify_all();
    s.assert_all_running();
    s.shutdown_cleanly();
}

#[test]
fn two_hashi_workers_share_the_load() {
    let script = r#"{"turns": [[{"thought": "thinking", "delay_ms": 150}, {"deliver": "done"}]]}"#;
    let mut s = Stack::new(script);
    s.spawn("aegis", "aegis");
    s.spawn("minato", "minato");
    s.spawn("hashi", "hashi-a");
    s.spawn("hashi", "hashi-b");
    let requests: Vec<i64> = (0..8).map(|i| s.submit(&format!("task {i}"))).collect();
    for r in requests {
        s.wait_complete(r, MINUTE);
    }
    let store = s.store();
    let mut stmt = store
        .conn()
        .prepare("SELECT DISTINCT completed_by FROM turns ORDER BY 1")
        .expect("prepare");
    let workers: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(
        workers,
        ["hashi-a", "hashi-b"],
        "both workers ran turns\n{}",
        s.logs()
    );
    s.verify_all();
    s.assert_all_running();
}

#[test]
fn malformed_doorbells_are_rejected_counted_and_harmless() {
    let mut s = Stack::new(TWO_TURNS);
    s.spawn("aegis", "aegis");
    s.spawn("minato", "minato");
    s.spawn("hashi", "hashi");
    s.wait_log("hashi", "NATS connected", MINUTE);
    s.wait_log("minato", "NATS connected", MINUTE);
    std::thread::sleep(Duration::from_millis(300));
    let before = kura_testkit::stack::session_records_count(&s);
    let nats = &s.nats;
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let c = nats
            .client(kura_runtime::identity::Role::Operator)
            .await
            .expect("connect");
        let subjects = [
            "oclaw.v1.hashi.cmd.worker.dispatch",
            "oclaw.v1.hashi.evt.worker.complete",
            "oclaw.v1.minato.cmd.session.create",
        ];
        let id = uuid::Uuid::now_v7();
        let payloads: Vec<Vec<u8>> = vec![
            b"not json".to_vec(),
            vec![0xff, 0x00, 0x13],
            format!(
                r#"{{"turn_id":"{id}","ledger_id":"{id}","record_id":"{id}","extra":"payload"}}"#
            )
            .into_bytes(),
            format!(r#"{{"turn_id":"{id}"}}{}"#, " ".repeat(2000)).into_bytes(),
            b"{}".to_vec(),
        ];
        for subject in subjects {
            for p in &payloads {
                c.publish(subject, p.clone().into()).await.expect("publish");
            }
        }
        c.flush().await.expect("flush");
    });
    std::thread::sleep(Duration::from_millis(500));
    s.assert_all_running();
    assert_eq!(
        kura_testkit::stack::session_records_count(&s),
        before,
        "garbage touched the store"
    );
    for (daemon, subject) in [
        ("hashi", "oclaw.v1.hashi.cmd.worker.dispatch"),
        ("minato", "oclaw.v1.minato.cmd.session.create"),
        ("minato", "oclaw.v1.hashi.evt.worker.complete"),
    ] {
        let log = s.log(daemon);
        let n = log
            .lines()
            .filter(|l| l.contains("rejected doorbell") && l.contains(subject))
            .count();
        assert_eq!(
            n, 5,
            "{daemon} should log each of the 5 bad messages on {subject}:\n{log}"
        );
    }
    assert!(
        s.log("minato").contains("rejected_total=10"),
        "{}",
        s.log("minato")
    );
    // And real work still flows.
    let r = s.submit("after the garbage");
    s.wait_complete(r, MINUTE);
    s.verify_all();
}

#[test]
fn hashi_killed_mid_tool_call_resumes_elsewhere_without_repeating_the_side_effect() {
    let dir = tempfile::tempdir().expect("tempdir");
    let effects = dir.path().join("effects.log");
    let script = format!(
        r#"{{"turns": [[
            {{"tool": "shell.run", "args": {{"argv": ["sh", "-c", "echo ran >> {e}; sleep 3"]}}}},
            {{"tool": "fs.list", "args": {{}}}},
            {{"deliver": "finished after the takeover"}}
        ]]}}"#,
        e = effects.display()
    );
    let mut s = Stack::new(&script);
    std::fs::write(&effects, "").expect("effects log");
    s.extra_env
        .push(("KURA_TOOLS__SHELL_ALLOWLIST".into(), r#"["sh"]"#.into()));
    // The sandbox lets the call append to the log outside its workspace, nothing more.
    s.extra_env.push((
        "KURA_TOOLS__SANDBOX_READ_WRITE".into(),
        format!("[\"{}\"]", effects.display()),
    ));
    s.spawn("aegis", "aegis");
    s.spawn("minato", "minato");
    s.spawn("hashi", "hashi-a");
    s.spawn("hashi", "hashi-b");
    let r = s.submit("do something with a side effect");
    // Wait until the side effect ran and its tool.call is recorded without a result.
    let mut holder = String::new();
    // The holder's epoch: 1, or 2 when the turn first parked because aegis was not up yet.
    let mut held_epoch = 0i64;
    s.wait_until("the tool call to start", MINUTE, |store| {
        let running: Option<(Option<String>, i64)> = store
            .conn()
            .query_row(
                "SELECT lease_owner, epoch FROM turns WHERE state = 'running'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .ok();
        let owner = running.as_ref().and_then(|(o, _)| o.clone());
        held_epoch = running.map_or(0, |(_, e)| e);
        let calls: i64 = store
            .conn()
            .query_row(
                "SELECT count(*) FROM records WHERE record_type = 'tool.call'",
                [],
                |r| r.get(0),
            )
            .unwrap_or(0);
        match owner {
            Some(o) if calls == 1 && std::fs::metadata(&effects).is_ok_and(|m| m.len() > 0) => {
                holder = o;
                true
            }
            _ => false,
        }
    });
    s.signal(&holder, "KILL");
    let st = s.wait_complete(r, MINUTE);
    let effects_text = std::fs::read_to_string(&effects).expect("effects");
    assert_eq!(
        effects_text.lines().count(),
        1,
        "the side effect ran exactly once: {effects_text:?}"
    );

    let store = s.store();
    let recs = session_records(&store, st.session_id.expect("session"));
    let results: Vec<&proto::Record> = recs
        .iter()
        .filter(|r| r.record_type == RecordType::ToolResult)
        .collect();
    assert_eq!(
        results[0].content["status"],
        json!("unknown"),
        "{:?}",
        results[0].content
    );
    assert_eq!(
        results[0].metadata.get("resumed").map(String::as_str),
        Some("true")
    );
    let survivor = if holder == "hashi-a" {
        "hashi-b"
    } else {
        "hashi-a"
    };
    assert_eq!(
        results[0].metadata.get("worker").map(String::as_str),
        Some(survivor)
    );
    assert_eq!(
        results[0].metadata.get("epoch").map(String::as_str),
        Some((held_epoch + 1).to_string().as_str()),
        "the successor's claim wrote it"
    );
    assert_eq!(results[1].content["status"], json!("success"));
    assert_eq!(
        st.deliverable.expect("deliverable").content["text"],
        json!("finished after the takeover")
    );
    s.verify_all();
}

/// The worker holding the running turn once `owner_sql` (one row: the lease owner) names one.
fn running_turn_holder(s: &Stack, what: &str, owner_sql: &str) -> String {
    let mut holder = String::new();
    s.wait_until(what, MINUTE, |store| {
        let owner: Option<String> = store
            .conn()
            .query_row(owner_sql, [], |r| r.get(0))
            .ok()
            .flatten();
        owner.map(|o| holder = o).is_some()
    });
    holder
}

/// A read's result rides with the turn's next commit instead of getting one of its own. A
/// worker killed after the read ran, while the model is thinking, takes that result with
/// it: the successor finds the call unanswered, runs the read again (reads are the only
/// calls ever re-run) and the turn ends as it would have.
#[test]
fn hashi_killed_after_a_read_before_its_result_was_committed_reads_again_elsewhere() {
    let script = r#"{"turns": [[
        {"tool": "fs.list", "args": {}},
        {"thought": "a slow model", "delay_ms": 3000},
        {"deliver": "listed after the takeover"}
    ]]}"#;
    let mut s = Stack::new(script);
    s.spawn("aegis", "aegis");
    s.spawn("minato", "minato");
    s.spawn("hashi", "hashi-a");
    s.spawn("hashi", "hashi-b");
    let r = s.submit("list, then think slowly");
    let holder = running_turn_holder(
        &s,
        "the read to be called",
        "SELECT t.lease_owner FROM turns t WHERE t.state = 'running' AND EXISTS
           (SELECT 1 FROM records WHERE record_type = 'tool.call')",
    );
    // The read has run and the model is in its three seconds.
    std::thread::sleep(Duration::from_millis(500));
    let results_before: i64 = s
        .store()
        .conn()
        .query_row(
            "SELECT count(*) FROM records WHERE record_type = 'tool.result'",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(
        results_before, 0,
        "the read's result waits for the next commit"
    );
    s.signal(&holder, "KILL");
    let st = s.wait_complete(r, MINUTE);
    let survivor = if holder == "hashi-a" {
        "hashi-b"
    } else {
        "hashi-a"
    };
    let store = s.store();
    let recs = session_records(&store, st.session_id.expect("session"));
    let results: Vec<&proto::Record> = recs
        .iter()
        .filter(|r| r.record_type == RecordType::ToolResult)
        .collect();
    assert_eq!(results.len(), 1, "one result for the one call");
    assert_eq!(results[0].content["status"], json!("success"));
    assert_eq!(
        results[0].metadata.get("resumed").map(String::as_str),
        Some("true"),
        "the successor ran the read again"
    );
    assert_eq!(
        results[0].metadata.get("worker").map(String::as_str),
        Some(survivor)
    );
    assert_eq!(
        st.deliverable.expect("deliverable").content["text"],
        json!("listed after the takeover")
    );
    s.verify_all();
}

#[test]
fn nats_killed_mid_session_and_restarted_loses_nothing() {
    let script = r#"{"turns": [
        [{"thought": "slow 1", "delay_ms": 400}, {"deliver": "one", "final": false}],
        [{"thought": "slow 2", "delay_ms": 400}, {"deliver": "two", "final": false}],
        [{"deliver": "three"}]
    ]}"#;
    let mut s = Stack::new(script);
    s.spawn("aegis", "aegis");
    s.spawn("minato", "minato");
    s.spawn("hashi", "hashi");
    // Both daemons are connected before NATS goes away (so a disconnect is what they see).
    s.wait_log("hashi", "NATS connected", MINUTE);
    s.wait_log("minato", "NATS connected", MINUTE);
    let r = s.submit("three slow turns");
    s.wait_until("turn 1 to start", MINUTE, |store| {
        store
            .conn()
            .query_row(
                "SELECT count(*) FROM turns WHERE state = 'running'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .unwrap_or(0)
            > 0
    });
    s.nats.kill();
    std::thread::sleep(Duration::from_millis(1200)); // longer than the 200 ms poll interval
    s.nats.restart();
    let st = s.wait_complete(r, MINUTE);
    assert_eq!(
        st.deliverable.expect("deliverable").content["text"],
        json!("three")
    );
    let store = s.store();
    let turns: i64 = store
        .conn()
        .query_row("SELECT count(*) FROM turns WHERE state = 'done'", [], |r| {
            r.get(0)
        })
        .expect("count");
    assert_eq!(turns, 3);
    s.verify_all();
    s.assert_all_running();
    assert!(
        s.log("hashi").contains("NATS disconnected"),
        "{}",
        s.log("hashi")
    );
}

#[test]
fn with_nats_gone_for_good_after_dispatch_polling_alone_finishes_the_work() {
    let mut s = Stack::new(TWO_TURNS);
    s.spawn("aegis", "aegis");
    s.spawn("minato", "minato");
    s.spawn("hashi", "hashi");
    std::thread::sleep(Duration::from_millis(300));
    let r = s.submit("no doorbells from here on");
    s.nats.kill();
    let st = s.wait_complete(r, MINUTE);
    assert_eq!(
        st.deliverable.expect("deliverable").content["text"],
        json!("the note says: hello from turn 1")
    );
    s.verify_all();
    s.assert_all_running();
    s.shutdown_cleanly();
}

#[test]
fn sigterm_releases_the_turn_to_another_worker_at_once() {
    let script = r#"{"turns": [[{"thought": "slow thought", "delay_ms": 1500}, {"thought": "second"}, {"deliver": "done by the other worker"}]]}"#;
    let mut s = Stack::new(script);
    // A lease far longer than the test: only an explicit release lets the other worker in.
    s.extra_env
        .push(("KURA_WORKER__LEASE_MS".into(), "600000".into()));
    s.spawn("aegis", "aegis");
    s.spawn("minato", "minato");
    s.spawn("hashi", "hashi-a");
    s.spawn("hashi", "hashi-b");
    let r = s.submit("a slow task");
    let holder = running_turn_holder(
        &s,
        "a worker to claim the turn",
        "SELECT lease_owner FROM turns WHERE state = 'running'",
    );
    s.signal(&holder, "TERM");
    let status = s.wait_exit(&holder, Duration::from_secs(15));
    assert_eq!(status.code(), Some(0), "{}", s.log(&holder));
    assert!(
        s.log(&holder).contains("turn released"),
        "{}",
        s.log(&holder)
    );
    let st = s.wait_complete(r, Duration::from_secs(20));
    assert_eq!(
        st.deliverable.expect("deliverable").content["text"],
        json!("done by the other worker")
    );
    let store = s.store();
    let (claims, by): (i64, String) = store
        .conn()
        .query_row("SELECT claims, completed_by FROM turns", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .expect("turn");
    assert_eq!(claims, 2);
    assert_ne!(by, holder);
    s.verify_all();
}

#[test]
fn kura_status_shows_every_daemon_the_backlog_and_the_last_sweep() {
    let mut s = Stack::new(TWO_TURNS);
    s.nats.kill();
    for (bin, name) in [
        ("mikado", "mikado"),
        ("kura", "kura"),
        ("aegis", "aegis"),
        ("minato", "minato"),
        ("hashi", "hashi"),
    ] {
        s.spawn(bin, name);
    }
    let (status, _) = s.submit_and_wait("Write a note, then read it back");
    assert!(status.success(), "{}", s.logs());
    let db = s.db.clone();
    let status = move || -> serde_json::Value {
        let out = std::process::Command::new(kura_testkit::bin("kura"))
            .arg("--db")
            .arg(&db)
            .args(["status", "--json"])
            .output()
            .expect("status");
        assert!(out.status.success());
        serde_json::from_slice(&out.stdout).expect("json")
    };
    s.wait_until("a sweep", MINUTE, |store| {
        store
            .conn()
            .query_row("SELECT count(*) FROM sweeps", [], |r| r.get::<_, i64>(0))
            .unwrap_or(0)
            > 0
    });
    let st = status();
    let kinds: Vec<(&str, bool)> = st["daemons"]
        .as_array()
        .expect("daemons")
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap_or(""),
                d["up"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("aegis", true),
            ("hashi", true),
            ("kura", true),
            ("mikado", true),
            ("minato", true)
        ]
    );
    for d in st["daemons"].as_array().expect("daemons") {
        if d["kind"] != "kura" {
            assert_eq!(d["nats_connected"], true, "{d}");
        }
    }
    assert_eq!(st["backlog"]["pending_turns"], 0);
    assert_eq!(st["last_sweep"]["ok"], true, "{st}");
    assert!(st["db_bytes"].as_u64().expect("size") > 0);
    s.shutdown_cleanly();
    let st = status();
    assert!(
        st["daemons"]
            .as_array()
            .expect("daemons")
            .iter()
            .all(|d| d["up"] == false),
        "{st}"
    );
}

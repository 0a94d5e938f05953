//! Unit tests of the store on real SQLite files in a temp directory.

use std::collections::BTreeMap;

use proto::ledger::LedgerState;
use proto::record::{Content, NewRecord, RecordType};
use serde_json::json;
use tempfile::TempDir;

use super::*;
use crate::verify::{Scope, verify};

fn fresh() -> (TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::create(dir.path().join("k.db"), &StoreOptions::default()).expect("create");
    (dir, store)
}

fn thought(text: &str) -> NewRecord {
    NewRecord::new(RecordType::AgentThought, Content::text(text), "agent:test")
}

#[test]
fn append_hydrate_seal_round_trip() {
    let (_d, mut s) = fresh();
    let session = s.create_session("t").expect("session");
    let l = s.open_ledger(session.session_id, "out", &[]).expect("open");
    for i in 0..5 {
        let a = s
            .append(l.ledger_id, &thought(&format!("step {i}")))
            .expect("append");
        assert_eq!(a.position, i);
        assert!(!a.deduplicated);
    }
    let records = s.hydrate(l.ledger_id).expect("hydrate");
    let texts: Vec<_> = records.iter().map(|r| r.content["text"].clone()).collect();
    assert_eq!(
        texts,
        (0..5)
            .map(|i| json!(format!("step {i}")))
            .collect::<Vec<_>>()
    );
    let (sealed, newly) = s.seal_ledger(l.ledger_id).expect("seal");
    assert!(newly);
    assert_eq!(sealed.state, LedgerState::Sealed);
    assert_eq!(sealed.record_count, 5);
    assert!(sealed.root_hash.is_some() && sealed.ledger_hash.is_some());
    assert_eq!(s.read_ledger(l.ledger_id).expect("read"), sealed);
    let (again, newly) = s.seal_ledger(l.ledger_id).expect("seal twice");
    assert!(!newly);
    assert_eq!(again, sealed);
    let head = s.read_session(session.session_id).expect("session");
    assert_eq!(head.head_ledger_id, Some(l.ledger_id));
    assert_eq!(s.reflog(session.session_id).expect("reflog").len(), 1);
    assert!(verify(&s, &Scope::All, None, None).expect("verify").ok());
}

#[test]
fn same_content_is_deduplicated() {
    let (_d, mut s) = fresh();
    let (a, dup_a) = s.write_record(&thought("same")).expect("write");
    let mut with_meta = thought("same");
    with_meta.metadata.insert("k".into(), "v".into());
    let (b, dup_b) = s.write_record(&with_meta).expect("write again");
    assert!(!dup_a);
    assert!(dup_b);
    assert_eq!(a, b, "the existing record is returned unchanged");
    assert_eq!(
        s.exists_by_hash(&a.hash)
            .expect("lookup")
            .map(|r| r.record_id),
        Some(a.record_id)
    );
    assert!(s.exists_by_hash(&"0".repeat(64)).expect("lookup").is_none());
    // In a ledger, the same content twice is two positions of one record.
    let session = s.create_session("t").expect("session");
    let l = s.open_ledger(session.session_id, "l", &[]).expect("open");
    let x = s.append(l.ledger_id, &thought("same")).expect("append");
    let y = s.append(l.ledger_id, &thought("same")).expect("append");
    assert!(x.deduplicated && y.deduplicated);
    assert_eq!((x.position, y.position), (0, 1));
    assert_eq!(x.record.record_id, a.record_id);
}

#[test]
fn appending_to_a_sealed_ledger_is_refused_and_changes_nothing() {
    let (_d, mut s) = fresh();
    let session = s.create_session("t").expect("session");
    let l = s.open_ledger(session.session_id, "l", &[]).expect("open");
    s.append(l.ledger_id, &thought("one")).expect("append");
    s.seal_ledger(l.ledger_id).expect("seal");
    let before = s.query(&Query::default()).expect("query").len();
    let err = s.append(l.ledger_id, &thought("two")).expect_err("sealed");
    assert!(matches!(err, StoreError::Sealed(_)), "{err}");
    assert_eq!(
        s.query(&Query::default()).expect("query").len(),
        before,
        "no orphan record left"
    );
}

#[test]
fn parents_must_exist_and_be_sealed() {
    let (_d, mut s) = fresh();
    let session = s.create_session("t").expect("session");
    let open = s.open_ledger(session.session_id, "a", &[]).expect("open");
    let err = s
        .open_ledger(session.session_id, "b", &[open.ledger_id])
        .expect_err("open parent");
    assert!(matches!(err, StoreError::ParentOpen(_)), "{err}");
    let err = s
        .open_ledger(session.session_id, "b", &[proto::LedgerId::new()])
        .expect_err("missing parent");
    assert!(
        matches!(err, StoreError::NotFound { kind: "ledger", .. }),
        "{err}"
    );
    s.seal_ledger(open.ledger_id).expect("seal");
    let child = s
        .open_ledger(session.session_id, "b", &[open.ledger_id])
        .expect("child");
    assert_eq!(child.parent_ids, vec![open.ledger_id]);
    let err = s
        .open_ledger(session.session_id, "c", &[open.ledger_id, open.ledger_id])
        .expect_err("dup");
    assert!(matches!(err, StoreError::Invalid(_)), "{err}");
    let err = s
        .open_ledger(proto::SessionId::new(), "c", &[])
        .expect_err("no session");
    assert!(
        matches!(
            err,
            StoreError::NotFound {
                kind: "session",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn triggers_refuse_rewriting_history() {
    let (_d, mut s) = fresh();
    let session = s.create_session("t").expect("session");
    let l = s.open_ledger(session.session_id, "l", &[]).expect("open");
    let a = s.append(l.ledger_id, &thought("one")).expect("append");
    let rid = a.record.record_id.to_string();
    let lid = l.ledger_id.to_string();
    let c = s.conn();
    let refused = |sql: &str, arg: &str| {
        let err = c.execute(sql, [arg]).expect_err(sql);
        assert!(err.to_string().contains("kura:"), "{sql}: {err}");
    };
    refused(
        "UPDATE records SET content = '{\"text\":\"two\"}' WHERE record_id = ?1",
        &rid,
    );
    refused("DELETE FROM records WHERE record_id = ?1", &rid);
    refused(
        "UPDATE ledger_records SET position = 5 WHERE ledger_id = ?1",
        &lid,
    );
    refused("DELETE FROM ledger_records WHERE ledger_id = ?1", &lid);
    refused("UPDATE ledgers SET label = 'x' WHERE ledger_id = ?1", &lid);
    refused(
        "UPDATE ledgers SET record_count = 0 WHERE ledger_id = ?1",
        &lid,
    );
    refused(
        "INSERT INTO ledger_records (ledger_id, position, record_id, leaf_hash) VALUES (?1, 7, 'x', 'x')",
        &lid,
    );
    refused("UPDATE sessions SET head_ledger_id = ?1", &lid);
    s.seal_ledger(l.ledger_id).expect("seal");
    let c = s.conn();
    let err = c
        .execute(
            "UPDATE ledgers SET root_hash = 'x' WHERE ledger_id = ?1",
            [&lid],
        )
        .expect_err("sealed");
    assert!(
        err.to_string().contains("sealed ledgers are immutable"),
        "{err}"
    );
    let err = c
        .execute("DELETE FROM ledgers WHERE ledger_id = ?1", [&lid])
        .expect_err("delete");
    assert!(err.to_string().contains("kura:"), "{err}");
    let err = c
        .execute("DELETE FROM session_reflog", [])
        .expect_err("reflog");
    assert!(err.to_string().contains("append-only"), "{err}");
    assert!(verify(&s, &Scope::All, None, None).expect("verify").ok());
}

#[test]
fn append_writes_a_constant_number_of_rows() {
    // No full-ledger rewrite per append: each append touches the same rows whatever the size.
    let (_d, mut s) = fresh();
    let session = s.create_session("t").expect("session");
    let l = s.open_ledger(session.session_id, "big", &[]).expect("open");
    let batch: Vec<NewRecord> = (0..2000).map(|i| thought(&format!("r{i}"))).collect();
    s.append_batch(l.ledger_id, &batch).expect("batch");
    let mut deltas = Vec::new();
    for i in 0..3 {
        let before = s.conn().total_changes();
        s.append(l.ledger_id, &thought(&format!("late {i}")))
            .expect("append");
        deltas.push(s.conn().total_changes() - before);
    }
    let first = s.conn().total_changes();
    let l2 = s
        .open_ledger(session.session_id, "small", &[])
        .expect("open");
    let opened = s.conn().total_changes() - first;
    let before = s.conn().total_changes();
    s.append(l2.ledger_id, &thought("small one"))
        .expect("append");
    let small = s.conn().total_changes() - before;
    assert_eq!(opened, 1);
    assert_eq!(
        deltas,
        vec![3, 3, 3],
        "record + member + count, at 2000 members"
    );
    assert_eq!(small, 3, "the same at 0 members");
}

#[test]
fn group_commit_is_all_or_nothing() {
    let (_d, mut s) = fresh();
    let session = s.create_session("t").expect("session");
    let l = s.open_ledger(session.session_id, "l", &[]).expect("open");
    let mut batch = vec![thought("a"), thought("b")];
    batch.push(NewRecord {
        record_type: RecordType::ToolCall,
        content: json!({"tool_name": "x"}),
        author_id: "agent:test".into(),
        metadata: BTreeMap::new(),
    });
    let err = s
        .append_batch(l.ledger_id, &batch)
        .expect_err("bad third record");
    assert!(matches!(err, StoreError::Record(_)), "{err}");
    assert_eq!(s.read_ledger(l.ledger_id).expect("read").record_count, 0);
    assert!(s.query(&Query::default()).expect("query").is_empty());
    batch.pop();
    assert_eq!(s.append_batch(l.ledger_id, &batch).expect("batch").len(), 2);
}

#[test]
fn query_filters() {
    let (_d, mut s) = fresh();
    let s1 = s.create_session("one").expect("session");
    let s2 = s.create_session("two").expect("session");
    let l1 = s.open_ledger(s1.session_id, "l", &[]).expect("open");
    let l2 = s.open_ledger(s2.session_id, "l", &[]).expect("open");
    s.append(l1.ledger_id, &thought("t1")).expect("append");
    s.append(
        l2.ledger_id,
        &NewRecord::new(RecordType::MemoryFact, Content::text("f"), "agent:mikado"),
    )
    .expect("append");
    let cutoff = crate::time::now();
    s.append(l2.ledger_id, &thought("t2")).expect("append");
    let q = |q: Query| s.query(&q).expect("query").len();
    assert_eq!(q(Query::default()), 3);
    assert_eq!(
        q(Query {
            record_type: Some(RecordType::AgentThought),
            ..Query::default()
        }),
        2
    );
    assert_eq!(
        q(Query {
            author_id: Some("agent:mikado".into()),
            ..Query::default()
        }),
        1
    );
    assert_eq!(
        q(Query {
            session_id: Some(s2.session_id),
            ..Query::default()
        }),
        2
    );
    assert_eq!(
        q(Query {
            since: Some(cutoff),
            ..Query::default()
        }),
        1
    );
    assert_eq!(
        q(Query {
            limit: Some(1),
            ..Query::default()
        }),
        1
    );
    let newest = s.query(&Query::default()).expect("query");
    assert_eq!(newest[0].content["text"], json!("t2"), "newest first");
}

#[test]
fn opening_refuses_missing_foreign_and_corrupt_files_without_writing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("nope.db");
    assert!(matches!(
        Store::open(&missing, &StoreOptions::default()),
        Err(StoreError::NoDatabase(_))
    ));
    assert!(!missing.exists(), "open must not create the file");

    let junk = dir.path().join("junk.db");
    let bytes =
        b"this is not a database, just some text that is long enough to look like a header...."
            .repeat(20);
    std::fs::write(&junk, &bytes).expect("write");
    for result in [
        Store::open(&junk, &StoreOptions::default()),
        Store::create(&junk, &StoreOptions::default()),
    ] {
        let err = result.expect_err("junk");
        assert!(matches!(err, StoreError::NotKura { .. }), "{err}");
    }
    assert_eq!(
        std::fs::read(&junk).expect("read"),
        bytes,
        "junk file untouched"
    );

    let foreign = dir.path().join("other.db");
    {
        let c = rusqlite::Connection::open(&foreign).expect("sqlite");
        c.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
            .expect("foreign schema");
    }
    let before = std::fs::read(&foreign).expect("read");
    for result in [
        Store::open(&foreign, &StoreOptions::default()),
        Store::create(&foreign, &StoreOptions::default()),
    ] {
        let err = result.expect_err("foreign");
        assert!(matches!(err, StoreError::NotKura { .. }), "{err}");
    }
    assert_eq!(
        std::fs::read(&foreign).expect("read"),
        before,
        "foreign file untouched"
    );
    assert!(!dir.path().join("other.db-wal").exists());
}

#[test]
fn a_newer_schema_is_refused() {
    let (d, s) = fresh();
    s.conn()
        .pragma_update(None, "user_version", 99)
        .expect("bump");
    drop(s);
    let err = Store::open(d.path().join("k.db"), &StoreOptions::default()).expect_err("too new");
    assert!(err.to_string().contains("newer than this kura"), "{err}");
}

#[test]
fn pragmas_are_set_per_connection() {
    let (_d, s) = fresh();
    let c = s.conn();
    let get = |p: &str| -> String {
        c.query_row(&format!("PRAGMA {p}"), [], |r| {
            r.get::<_, rusqlite::types::Value>(0)
        })
        .map(|v| format!("{v:?}"))
        .expect("pragma")
    };
    assert_eq!(get("journal_mode"), "Text(\"wal\")");
    assert_eq!(get("synchronous"), "Integer(2)", "FULL");
    assert_eq!(get("foreign_keys"), "Integer(1)");
    assert_eq!(get("application_id"), format!("Integer({APPLICATION_ID})"));
}

/// Verify splits many ledgers over threads; what it finds must not depend on that: every
/// problem named once per place, records counted once even when two chunks share one.
#[test]
fn parallel_verify_names_every_problem_once() {
    let (_d, mut s) = fresh();
    let session = s.create_session("t").expect("session");
    let mut ledgers = Vec::new();
    let mut parent: Vec<proto::LedgerId> = Vec::new();
    let mut shared = None;
    for l in 0..40 {
        let ledger = s
            .open_ledger(session.session_id, "l", &parent)
            .expect("open")
            .ledger_id;
        for i in 0..5 {
            let a = s
                .append(ledger, &thought(&format!("ledger {l} step {i}")))
                .expect("append");
            if l == 2 && i == 0 {
                shared = Some(a.record.record_id);
            }
        }
        if l == 35 {
            // The same record in a ledger at the far end (another thread's chunk).
            let id = shared.expect("shared record");
            s.write_raw(|tx| ledgers::append_existing_in(tx, ledger, id))
                .expect("append existing");
        }
        s.seal_ledger(ledger).expect("seal");
        ledgers.push(ledger);
        parent = vec![ledger];
    }
    let clean = verify(&s, &Scope::Session(session.session_id), None, None).expect("verify");
    assert!(clean.ok(), "{:?}", clean.problems);
    assert_eq!(clean.records_checked, 200);
    assert_eq!(clean.ledgers_checked, 40);

    let shared = shared.expect("shared").to_string();
    let raw = rusqlite::Connection::open(s.path()).expect("raw");
    raw.execute_batch("DROP TRIGGER records_no_update; DROP TRIGGER ledgers_sealed_immutable;")
        .expect("drop triggers");
    raw.execute(
        r#"UPDATE records SET content = '{"text":"forged"}' WHERE record_id = ?1"#,
        [&shared],
    )
    .expect("tamper record");
    let forged_ledger = ledgers[20].to_string();
    raw.execute(
        "UPDATE ledgers SET ledger_hash = ?2 WHERE ledger_id = ?1",
        [&forged_ledger, &"0".repeat(64)],
    )
    .expect("tamper ledger");
    let r = verify(&s, &Scope::Session(session.session_id), None, None).expect("verify");
    let count = |kind: &str, id: &str, check: &str| {
        r.problems
            .iter()
            .filter(|p| p.kind == kind && p.id == id && p.check == check)
            .count()
    };
    assert_eq!(
        count("record", &shared, "record_hash"),
        1,
        "{:#?}",
        r.problems
    );
    assert_eq!(
        count("record", &shared, "record_leaf"),
        2,
        "{:#?}",
        r.problems
    );
    assert_eq!(count("ledger", &ledgers[2].to_string(), "merkle_root"), 1);
    assert_eq!(count("ledger", &ledgers[35].to_string(), "merkle_root"), 1);
    assert_eq!(count("ledger", &forged_ledger, "ledger_hash"), 1);
    assert_eq!(r.records_checked, 200);
}

/// Regression: the busy timeout was one process-wide static, so opening a second store
/// changed how long the first one waited. Each store now keeps its own.
#[test]
fn busy_timeout_is_per_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("k.db");
    let patient_opts = StoreOptions {
        busy_timeout: Duration::from_secs(30),
        ..StoreOptions::default()
    };
    let mut patient = Store::create(&path, &patient_opts).expect("create");
    let mut holder = Store::open(&path, &StoreOptions::default()).expect("holder");
    // Opened last: under the old static, its 300 ms would have become everybody's timeout.
    let impatient_opts = StoreOptions {
        busy_timeout: Duration::from_millis(300),
        ..StoreOptions::default()
    };
    let mut impatient = Store::open(&path, &impatient_opts).expect("impatient");

    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let holder_thread = std::thread::spawn(move || {
        holder
            .write_raw(|_tx| {
                locked_tx.send(()).expect("send");
                // Hold the write lock until the impatient writer has given up.
                release_rx.recv().expect("release");
                std::thread::sleep(Duration::from_millis(600));
                Ok(())
            })
            .expect("holder write");
    });
    locked_rx.recv().expect("locked");

    let err = impatient
        .write_raw(|_tx| Ok(()))
        .expect_err("impatient must give up");
    assert!(
        matches!(&err, StoreError::Sqlite(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)),
        "expected busy, got {err:?}"
    );
    release_tx.send(()).expect("release");
    // The lock is still held for 600 ms: longer than one busy round, well inside 30 s.
    patient
        .write_raw(|_tx| Ok(()))
        .expect("patient writer waits for the lock");
    holder_thread.join().expect("join");
}

//! Tamper tests: bypass SQL (drop the triggers, edit the file directly) and prove that
//! `kura verify` exits 1 and names what was altered.

use kura_testkit::cli::{Demo, Kura};
use serde_json::Value;

/// Runs `kura verify <target> --json`, asserts exit 1, returns the problems.
fn problems(k: &Kura, target: &[&str]) -> Vec<Value> {
    let mut args = vec!["verify"];
    args.extend_from_slice(target);
    let (text, _) = k.fails(1, &args);
    assert!(text.contains("VERIFICATION FAILED"), "{text}");
    args.push("--json");
    let (out, _) = k.fails(1, &args);
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["ok"], Value::Bool(false));
    v["problems"].as_array().cloned().expect("problems")
}

fn has(problems: &[Value], kind: &str, id: &str, check: &str) -> bool {
    problems
        .iter()
        .any(|p| p["kind"] == kind && p["id"] == id && p["check"] == check)
}

fn assert_has(problems: &[Value], kind: &str, id: &str, check: &str) {
    assert!(
        has(problems, kind, id, check),
        "expected {kind} {id} {check} in {problems:#?}"
    );
}

fn setup() -> (Kura, Demo) {
    let k = Kura::new();
    let d = k.demo_session();
    k.ok(&["verify", "--all"]);
    (k, d)
}

#[test]
fn changed_record_content_is_named() {
    let (k, d) = setup();
    k.drop_triggers()
        .execute(
            r#"UPDATE records SET content = '{"result":["a","b","c"],"status":"success"}' WHERE record_id = ?1"#,
            [&d.result],
        )
        .expect("tamper");
    for target in [&[d.session.as_str()][..], &[d.out1.as_str()], &["--all"]] {
        let p = problems(&k, target);
        assert_has(&p, "record", &d.result, "record_hash");
        assert_has(&p, "record", &d.result, "record_leaf");
        assert_has(&p, "ledger", &d.out1, "merkle_root");
    }
    // Ledgers that do not contain it are clean: only out1 is blamed.
    let p = problems(&k, &[&d.session]);
    assert!(
        !p.iter()
            .any(|x| x["id"] == d.ctx1.as_str() || x["id"] == d.out2.as_str()),
        "{p:#?}"
    );
}

#[test]
fn whitespace_only_content_change_is_caught() {
    let (k, d) = setup();
    k.drop_triggers()
        .execute(
            r#"UPDATE records SET content = '{"result": ["a","b"],"status":"success"}' WHERE record_id = ?1"#,
            [&d.result],
        )
        .expect("tamper");
    let p = problems(&k, &["--all"]);
    assert_has(&p, "record", &d.result, "content_not_canonical");
    assert_has(&p, "ledger", &d.out1, "merkle_root");
}

#[test]
fn changed_metadata_is_named() {
    let (k, d) = setup();
    k.drop_triggers()
        .execute(
            r#"UPDATE records SET metadata = '{"step":"2"}' WHERE record_id = ?1"#,
            [&d.thought],
        )
        .expect("tamper");
    let p = problems(&k, &[&d.session]);
    assert_has(&p, "record", &d.thought, "record_leaf");
    assert_has(&p, "ledger", &d.out1, "merkle_root");
    assert!(
        !has(&p, "record", &d.thought, "record_hash"),
        "metadata is not in the content hash"
    );
}

#[test]
fn changed_time_is_named() {
    let (k, d) = setup();
    k.drop_triggers()
        .execute(
            "UPDATE records SET created_at = '2020-01-01T00:00:00.000000Z' WHERE record_id = ?1",
            [&d.call],
        )
        .expect("tamper");
    let p = problems(&k, &[&d.session]);
    assert_has(&p, "record", &d.call, "record_leaf");
    assert_has(&p, "ledger", &d.out1, "merkle_root");
}

#[test]
fn changed_author_and_type_are_named() {
    let (k, d) = setup();
    let c = k.drop_triggers();
    c.execute(
        "UPDATE records SET author_id = 'user:mallory' WHERE record_id = ?1",
        [&d.deliv],
    )
    .expect("tamper");
    c.execute(
        "UPDATE records SET record_type = 'agent.plan' WHERE record_id = ?1",
        [&d.thought],
    )
    .expect("tamper");
    let p = problems(&k, &["--all"]);
    assert_has(&p, "record", &d.deliv, "record_hash");
    assert_has(&p, "record", &d.thought, "record_hash");
    assert_has(&p, "ledger", &d.out1, "merkle_root");
}

#[test]
fn deleted_member_is_named() {
    let (k, d) = setup();
    k.drop_triggers()
        .execute(
            "DELETE FROM ledger_records WHERE ledger_id = ?1 AND position = 1",
            [&d.out1],
        )
        .expect("tamper");
    let p = problems(&k, &[&d.session]);
    assert_has(&p, "ledger", &d.out1, "member_positions");
    assert_has(&p, "ledger", &d.out1, "record_count");
    assert_has(&p, "ledger", &d.out1, "merkle_root");
}

#[test]
fn deleted_record_is_named() {
    let (k, d) = setup();
    let c = k.drop_triggers();
    c.execute_batch("PRAGMA foreign_keys = OFF")
        .expect("fk off");
    c.execute("DELETE FROM records WHERE record_id = ?1", [&d.call])
        .expect("tamper");
    let p = problems(&k, &[&d.out1]);
    assert_has(&p, "ledger", &d.out1, "member_missing");
    assert_has(&p, "ledger", &d.out1, "merkle_root");
}

#[test]
fn reordered_members_are_named() {
    let (k, d) = setup();
    let c = k.drop_triggers();
    c.execute_batch(&format!(
        "UPDATE ledger_records SET position = 100 WHERE ledger_id = '{l}' AND position = 1;
         UPDATE ledger_records SET position = 1 WHERE ledger_id = '{l}' AND position = 2;
         UPDATE ledger_records SET position = 2 WHERE ledger_id = '{l}' AND position = 100;",
        l = d.out1
    ))
    .expect("tamper");
    let p = problems(&k, &[&d.out1]);
    assert_has(&p, "ledger", &d.out1, "merkle_root");
    assert!(
        !p.iter().any(|x| x["kind"] == "record"),
        "every record is itself intact: {p:#?}"
    );
}

#[test]
fn changed_parent_is_named() {
    let (k, d) = setup();
    k.drop_triggers()
        .execute(
            "UPDATE ledgers SET parent_ids = ?2 WHERE ledger_id = ?1",
            [&d.ctx2, &format!("[\"{}\"]", d.ctx1)],
        )
        .expect("tamper");
    let p = problems(&k, &[&d.session]);
    assert_has(&p, "ledger", &d.ctx2, "ledger_hash");
}

#[test]
fn rewritten_ancestor_breaks_the_chain_of_its_descendants() {
    // The attacker changes a record in turn 1 and recomputes turn 1's root and hash, but
    // cannot recompute the children's hashes without it showing.
    let (k, d) = setup();
    let c = k.drop_triggers();
    c.execute(
        "UPDATE records SET content = '{\"text\":\"count nothing\"}' WHERE record_id = ?1",
        [&d.instr],
    )
    .expect("tamper");
    c.execute(
        "UPDATE ledgers SET root_hash = 'f00d', ledger_hash = 'beef' WHERE ledger_id = ?1",
        [&d.ctx1],
    )
    .expect("tamper");
    let p = problems(&k, &[&d.out2]);
    assert_has(&p, "record", &d.instr, "record_hash");
    assert_has(&p, "ledger", &d.ctx1, "merkle_root");
    assert_has(&p, "ledger", &d.out1, "ledger_hash");
}

#[test]
fn truncated_session_is_named() {
    let (k, d) = setup();
    let c = k.drop_triggers();
    c.execute("DELETE FROM ledger_records WHERE ledger_id = ?1", [&d.out2])
        .expect("tamper");
    // The seal log names the ledger (a foreign key): its leaf goes too.
    c.execute(
        "DELETE FROM seal_log_leaves WHERE ledger_id = ?1",
        [&d.out2],
    )
    .expect("tamper");
    c.execute("DELETE FROM ledgers WHERE ledger_id = ?1", [&d.out2])
        .expect("tamper");
    let p = problems(&k, &[&d.session]);
    assert_has(&p, "session", &d.session, "head_missing");
}

#[test]
fn consistent_truncation_is_caught_with_a_trusted_head() {
    // A careful attacker removes the last turn AND rewinds the head and the ref log so the
    // rest is self-consistent. Only a hash noted earlier can reveal it — as with any log.
    let (k, d) = setup();
    let head_hash = k.json(&["show", &d.out2])["ledger"]["ledger_hash"]
        .as_str()
        .expect("hash")
        .to_owned();
    k.ok(&["verify", &d.session, "--trusted-head", &head_hash]);
    // Careful: the triggers are put back afterwards, so even the schema looks untouched.
    let triggers: Vec<String> = k
        .raw()
        .prepare("SELECT sql FROM sqlite_schema WHERE type = 'trigger'")
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    let c = k.drop_triggers();
    c.execute("DELETE FROM ledger_records WHERE ledger_id = ?1", [&d.out2])
        .expect("tamper");
    // The seal log is truncated consistently too: the last leaf and the hashes its append
    // wrote (1 + the trailing ones of its index).
    let n: i64 = c
        .query_row(
            "SELECT leaf_index FROM seal_log_leaves WHERE ledger_id = ?1",
            [&d.out2],
            |r| r.get(0),
        )
        .expect("leaf");
    let last: i64 = c
        .query_row("SELECT max(leaf_index) FROM seal_log_leaves", [], |r| {
            r.get(0)
        })
        .expect("max");
    assert_eq!(n, last, "out2 was sealed last");
    let written = 1 + i64::from((n + 1).trailing_zeros());
    c.execute(
        "DELETE FROM seal_log_leaves WHERE ledger_id = ?1",
        [&d.out2],
    )
    .expect("tamper");
    c.execute(
        "DELETE FROM seal_log_hashes WHERE hash_index IN
           (SELECT hash_index FROM seal_log_hashes ORDER BY hash_index DESC LIMIT ?1)",
        [written],
    )
    .expect("tamper");
    c.execute("DELETE FROM ledgers WHERE ledger_id = ?1", [&d.out2])
        .expect("tamper");
    c.execute(
        "DELETE FROM session_reflog WHERE session_id = ?1 AND new_head = ?2",
        [&d.session, &d.out2],
    )
    .expect("tamper");
    c.execute(
        "UPDATE sessions SET head_ledger_id = ?2 WHERE session_id = ?1",
        [&d.session, &d.ctx2],
    )
    .expect("tamper");
    for sql in &triggers {
        c.execute_batch(sql).expect("restore trigger");
    }
    k.ok(&["verify", &d.session]); // self-consistent without a witness
    let p = problems(&k, &[&d.session, "--trusted-head", &head_hash]);
    assert_has(&p, "session", &d.session, "trusted_head");
}

#[test]
fn rewound_head_is_named() {
    let (k, d) = setup();
    k.drop_triggers()
        .execute(
            "UPDATE sessions SET head_ledger_id = ?2 WHERE session_id = ?1",
            [&d.session, &d.out1],
        )
        .expect("tamper");
    let p = problems(&k, &[&d.session]);
    assert_has(&p, "session", &d.session, "head");
}

#[test]
fn edited_ref_log_is_named() {
    let (k, d) = setup();
    let c = k.drop_triggers();
    c.execute(
        "UPDATE session_reflog SET reason = 'nothing to see' WHERE session_id = ?1 AND seq = 2",
        [&d.session],
    )
    .expect("tamper");
    let p = problems(&k, &[&d.session]);
    assert_has(&p, "session", &d.session, "reflog_hash");
}

#[test]
fn several_problems_are_all_reported() {
    let (k, d) = setup();
    let c = k.drop_triggers();
    c.execute(
        "UPDATE records SET content = '{\"text\":\"x\"}' WHERE record_id = ?1",
        [&d.deliv],
    )
    .expect("t");
    c.execute(
        "UPDATE records SET metadata = '{\"a\":\"b\"}' WHERE record_id = ?1",
        [&d.instr],
    )
    .expect("t");
    c.execute(
        "UPDATE ledgers SET label = 'renamed' WHERE ledger_id = ?1",
        [&d.out2],
    )
    .expect("t");
    let p = problems(&k, &["--all"]);
    assert_has(&p, "record", &d.deliv, "record_hash");
    assert_has(&p, "ledger", &d.out1, "merkle_root");
    assert_has(&p, "record", &d.instr, "record_leaf");
    assert_has(&p, "ledger", &d.ctx1, "merkle_root");
    assert_has(&p, "ledger", &d.out2, "ledger_hash");
}

#[test]
fn untouched_store_verifies_and_sealing_a_tampered_open_ledger_is_refused() {
    let k = Kura::new();
    let s = k.ok(&["session", "new"]);
    let l = k.ok(&["ledger", "open", "--session", &s, "--label", "l"]);
    let r = k.ok(&[
        "record",
        "add",
        "--ledger",
        &l,
        "--type",
        "agent.thought",
        "--author",
        "agent:x",
        "--text",
        "hi",
    ]);
    k.ok(&["verify", "--all"]);
    k.drop_triggers()
        .execute(
            r#"UPDATE records SET metadata = '{"x":"y"}' WHERE record_id = ?1"#,
            [&r],
        )
        .expect("tamper");
    let p = problems(&k, &[&l]);
    assert_has(&p, "record", &r, "record_leaf");
    let (_, err) = k.fails(2, &["ledger", "seal", &l]);
    assert!(
        err.contains(&format!("record {r} changed after it was appended")),
        "{err}"
    );
}

/// Dropping the immutability triggers (the first step of every edit above) is itself
/// reported, even when no row was changed.
#[test]
fn dropped_triggers_are_named() {
    let (k, _d) = setup();
    drop(k.drop_triggers());
    let p = problems(&k, &["--all"]);
    assert_has(&p, "schema", "records_no_update", "schema_object");
}

/// Attack: a crafted file with Kura's application id and a recursive view where a table
/// belongs made `kura verify --all` run forever. A schema that is not Kura's is refused at
/// open, with exit 2, and the file is left as it was.
#[test]
fn crafted_schema_with_a_recursive_view_is_refused() {
    let k = Kura::new();
    k.ok(&["init"]);
    let c = k.drop_triggers();
    c.execute_batch(
        "DROP TABLE ledger_records;
         CREATE VIEW ledger_records AS
           WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n)
           SELECT 'x' AS ledger_id, i AS position, 'y' AS record_id FROM n;",
    )
    .expect("craft");
    drop(c);
    // The file's bytes (reading its rows would never end: that is the attack).
    let before = std::fs::read(&k.db).expect("read");
    let (_, err) = k.fails(2, &["verify", "--all"]);
    assert!(err.contains("schema is not Kura's"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    let (_, err) = k.fails(2, &["status"]);
    assert!(err.contains("schema is not Kura's"), "{err}");
    assert!(
        std::fs::read(&k.db).expect("read") == before,
        "the file was not changed"
    );

    // An extra trigger that would run on our writes is refused the same way.
    let k = Kura::new();
    k.ok(&["init"]);
    k.raw()
        .execute_batch(
            "CREATE TRIGGER sneaky AFTER INSERT ON records BEGIN DELETE FROM sessions; END;",
        )
        .expect("craft");
    let (_, err) = k.fails(2, &["verify", "--all"]);
    assert!(
        err.contains("unexpected or altered trigger \"sneaky\""),
        "{err}"
    );
}

/// `kura init` makes the database and its WAL and shared-memory files private (0600).
#[test]
fn init_creates_private_database_files() {
    use std::os::unix::fs::PermissionsExt as _;
    let k = Kura::new();
    k.ok(&["init"]);
    // While a connection is open, SQLite keeps the -wal and -shm files beside it.
    let c = k.raw();
    c.query_row("SELECT count(*) FROM records", [], |r| r.get::<_, i64>(0))
        .expect("read");
    for suffix in ["", "-wal", "-shm"] {
        let path = format!("{}{suffix}", k.db.display());
        let mode = std::fs::metadata(&path)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{path}");
    }
}

#[test]
fn altered_column_types_are_reported_not_fatal() {
    let (k, d) = setup();
    let c = k.drop_triggers();
    c.execute(
        "UPDATE ledger_records SET position = 'one' WHERE ledger_id = ?1 AND position = 1",
        [&d.out1],
    )
    .expect("tamper");
    c.execute(
        "UPDATE records SET content = x'00ff10' WHERE record_id = ?1",
        [&d.deliv],
    )
    .expect("tamper");
    c.execute(
        "UPDATE session_reflog SET seq = 'two' WHERE session_id = ?1 AND seq = 2",
        [&d.session],
    )
    .expect("tamper");
    let p = problems(&k, &["--all"]);
    assert_has(&p, "ledger", &d.out1, "member_positions");
    assert_has(&p, "record", &d.deliv, "record_content");
    assert_has(&p, "session", &d.session, "reflog_sequence");
}

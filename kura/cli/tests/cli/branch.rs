//! Rewinds and forks through the real `kura` binary: heads move back without deleting
//! anything, forks share history without copying it, and `verify` stays clean throughout.

use kura_testkit::cli::Kura;
use serde_json::Value;

/// A sealed ledger in `session` after `parent`, holding one deliverable `text`.
fn next(k: &Kura, session: &str, label: &str, parent: Option<&str>, text: &str) -> String {
    let mut args = vec!["ledger", "open", "--session", session, "--label", label];
    if let Some(p) = parent {
        args.extend(["--parent", p]);
    }
    let ledger = k.ok(&args);
    k.ok(&[
        "record",
        "add",
        "--ledger",
        &ledger,
        "--type",
        "task.deliverable",
        "--author",
        "agent:hashi",
        "--text",
        text,
    ]);
    k.ok(&["ledger", "seal", &ledger]);
    ledger
}

fn json(k: &Kura, args: &[&str]) -> Value {
    let mut a = vec!["--json"];
    a.extend_from_slice(args);
    serde_json::from_str(&k.ok(&a)).expect("json")
}

#[test]
fn a_reset_moves_the_head_back_keeps_the_rest_unreachable_and_verifies() {
    let k = Kura::new();
    let s = k.ok(&["session", "new", "--label", "shopping"]);
    let a = next(&k, &s, "turn-1", None, "rice");
    let b = next(&k, &s, "turn-2", Some(&a), "miso");
    let c = next(&k, &s, "turn-3", Some(&b), "a bad answer");

    // Refused: forward or sideways moves, other sessions' ledgers, no reason, the head itself.
    let other = k.ok(&["session", "new"]);
    let foreign = next(&k, &other, "x", None, "elsewhere");
    for (ledger, why) in [(&foreign, "fork it instead"), (&c, "already the head")] {
        let (_, err) = k.fails(2, &["session", "reset", &s, ledger, "--reason", "undo"]);
        assert!(err.contains(why), "{err}");
    }
    let (_, err) = k.fails(2, &["session", "reset", &s, &b, "--reason", "  "]);
    assert!(err.contains("needs a reason"), "{err}");

    let out = k.ok(&["session", "reset", &s, &b, "--reason", "turn 3 went wrong"]);
    assert!(out.contains(&format!("{c} -> {b}")), "{out}");
    let show = json(&k, &["show", &s]);
    assert_eq!(show["session"]["head_ledger_id"], b.as_str());
    let last = show["reflog"]
        .as_array()
        .and_then(|r| r.last())
        .cloned()
        .expect("reflog");
    assert_eq!(last["reason"], "reset: turn 3 went wrong");
    assert_eq!(
        (last["old_head"].as_str(), last["new_head"].as_str()),
        (Some(c.as_str()), Some(b.as_str()))
    );
    // Nothing deleted: c is still there, marked unreachable.
    let log = json(&k, &["log", &s]);
    let flags: Vec<(String, bool)> = log["ledgers"]
        .as_array()
        .expect("ledgers")
        .iter()
        .map(|l| {
            (
                l["ledger_id"].as_str().unwrap_or("").to_owned(),
                l["unreachable"] == true,
            )
        })
        .collect();
    assert_eq!(
        flags,
        [(c.clone(), true), (b.clone(), false), (a.clone(), false)]
    );
    assert!(k.ok(&["log", &s]).contains("unreachable"));
    k.ok(&["verify", "--all"]);

    // Work continues from the new head; a reset can also go back past it again later.
    let d = next(&k, &s, "turn-3b", Some(&b), "a better answer");
    let graph = k.ok(&["log", &s, "--graph"]);
    println!("{graph}");
    let line = |id: &str| {
        graph
            .lines()
            .find(|l| l.contains(id))
            .expect("in graph")
            .to_owned()
    };
    assert!(
        line(&d).starts_with("* ") && line(&d).contains("HEAD"),
        "{graph}"
    );
    assert!(
        line(&c).starts_with("| * ") && line(&c).contains("unreachable"),
        "{graph}"
    );
    assert!(line(&b).starts_with("* "), "{graph}");
    k.ok(&["verify", "--all"]);
    // The ref log is still one hash chain: a reset cannot be edited out unseen.
    let conn = k.drop_triggers();
    conn.execute("DELETE FROM session_reflog WHERE reason LIKE 'reset:%'", [])
        .expect("tamper");
    drop(conn);
    let (out, _) = k.fails(1, &["verify", "--all"]);
    assert!(out.contains("reflog"), "{out}");
}

#[test]
fn a_fork_from_another_sessions_middle_ledger_shares_history_and_continues() {
    let k = Kura::new();
    let s = k.ok(&["session", "new", "--label", "origin"]);
    let a = next(&k, &s, "turn-1", None, "rice");
    let b = next(&k, &s, "turn-2", Some(&a), "miso");
    let _c = next(&k, &s, "turn-3", Some(&b), "nori");
    let open = k.ok(&["ledger", "open", "--session", &s, "--label", "still open"]);
    let (_, err) = k.fails(2, &["session", "fork", &open]);
    assert!(err.contains("not sealed"), "{err}");

    let records_before: i64 = k
        .raw()
        .query_row("SELECT count(*) FROM records", [], |r| r.get(0))
        .expect("count");
    let f = k.ok(&["session", "fork", &b, "--label", "what if"]);
    let forked = json(&k, &["show", &f]);
    let head = forked["session"]["head_ledger_id"]
        .as_str()
        .expect("head")
        .to_owned();
    let first = json(&k, &["show", &head]);
    assert_eq!(first["ledger"]["parent_ids"], serde_json::json!([b]));
    let fork_record = &first["records"][0];
    assert_eq!(fork_record["record_type"], "session.fork");
    assert_eq!(fork_record["content"]["origin_ledger"], b.as_str());
    assert_eq!(fork_record["content"]["origin_session"], s.as_str());
    // Copying nothing: one new record (the fork's), no copies of the origin's.
    let records_after: i64 = k
        .raw()
        .query_row("SELECT count(*) FROM records", [], |r| r.get(0))
        .expect("count");
    assert_eq!(records_after, records_before + 1);

    // It continues on its own, and both sessions know about each other.
    let d = next(&k, &f, "turn-3", Some(&head), "wakame instead");
    let show = json(&k, &["show", &s]);
    assert_eq!(show["forks"][0]["session_id"], f.as_str());
    assert_eq!(show["forks"][0]["origin"], b.as_str());
    assert!(
        k.ok(&["show", &s])
            .contains(&format!("Fork:    session {f} grew from ledger {b}"))
    );
    let graph = k.ok(&["log", &f, "--graph"]);
    assert!(
        graph.contains(&format!("forked from ledger {b} (turn-2) of session {s}")),
        "{graph}"
    );
    assert!(
        k.ok(&["log", &s, "--graph"])
            .contains(&format!("session {f} grew from here"))
    );
    // Across sessions, diff compares by record hash.
    let diff = json(&k, &["diff", &_c, &d]);
    assert_eq!(diff["only_a"][0]["content"]["text"], "nori");
    assert_eq!(diff["only_b"][0]["content"]["text"], "wakame instead");
    k.ok(&["verify", "--all"]);
}

fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A session's export carries its forks as branches that share the origin's commits, is
/// the same every time, and `git fsck --strict` accepts it.
#[test]
fn export_writes_forks_as_branches_sharing_commits() {
    let k = Kura::new();
    let s = k.ok(&["session", "new", "--label", "origin"]);
    let a = next(&k, &s, "turn-1", None, "rice");
    let b = next(&k, &s, "turn-2", Some(&a), "miso");
    let f = k.ok(&["session", "fork", &a, "--label", "what if"]);
    let fork_head = json(&k, &["show", &f])["session"]["head_ledger_id"]
        .as_str()
        .expect("head")
        .to_owned();
    let c = next(&k, &f, "turn-2", Some(&fork_head), "wakame");
    let out = |name: &str| {
        let dir = k.dir.path().join(name);
        k.ok(&[
            "export",
            &s,
            "--format",
            "git",
            "--out",
            dir.to_str().expect("utf8"),
        ]);
        dir
    };
    let (one, two) = (out("one"), out("two"));
    git(&one, &["fsck", "--strict", "--no-dangling"]);
    let branches = git(&one, &["branch", "--format=%(refname:short)"]);
    assert_eq!(branches, format!("fork/{f}\nmain"));
    let commit_of = |dir: &std::path::Path, ledger: &str| {
        git(dir, &["rev-parse", &format!("refs/tags/ledger/{ledger}")])
    };
    // Shared, not copied: the fork's history reaches the origin's turn-1 commit itself.
    let base = git(&one, &["merge-base", "main", &format!("fork/{f}")]);
    assert_eq!(base, commit_of(&one, &a));
    assert_eq!(git(&one, &["rev-parse", "main"]), commit_of(&one, &b));
    assert_eq!(
        git(&one, &["rev-parse", &format!("fork/{f}")]),
        commit_of(&one, &c)
    );
    assert_eq!(
        git(&one, &["rev-list", "--count", "--all"]),
        "4",
        "turn-1, turn-2, fork, fork's turn-2"
    );
    // Deterministic: a second export gives the same commits.
    assert_eq!(
        git(&one, &["rev-parse", &format!("fork/{f}")]),
        git(&two, &["rev-parse", &format!("fork/{f}")])
    );
}

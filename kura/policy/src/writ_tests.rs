//! Writs refused for each attack on them: forged, wider, out of scope, above the ceiling,
//! past budget or expiry, revoked by the wrong key — and the protocol's test vector.

use super::*;
use proto::writ::REVOCATION_KIND;
use serde_json::json;

fn key(b: u8) -> SigningKey {
    SigningKey::from_bytes(&[b; 32])
}

fn ana() -> Vec<Issuer> {
    vec![Issuer {
        name: "ana".into(),
        public_key: hex::encode(key(1).verifying_key().to_bytes()),
    }]
}

fn body() -> WritBody {
    WritBody {
        paths: vec!["notes/*".into()],
        budget: Budget {
            tool_calls: Some(3),
            tokens: Some(1000),
            money_micros: None,
            wall_ms: None,
        },
        issued_at: "2026-11-26T00:00:00Z".into(),
        expires_at: "2026-11-27T00:00:00Z".into(),
        delegate_key: Some(hex::encode(key(2).verifying_key().to_bytes())),
        ..WritBody::fixture(
            "01930000-0000-7000-8000-000000000001",
            "session:01930000-0000-7000-8000-0000000000aa",
        )
    }
}

fn child() -> WritBody {
    WritBody {
        id: "01930000-0000-7000-8000-000000000002".parse().expect("id"),
        holder: "session:01930000-0000-7000-8000-0000000000bb".into(),
        issuer: "writ:01930000-0000-7000-8000-000000000001".into(),
        parent: Some("01930000-0000-7000-8000-000000000001".parse().expect("id")),
        tools: vec!["fs.read".into()],
        ceiling: Effect::Read,
        budget: Budget {
            tool_calls: Some(2),
            tokens: Some(500),
            ..Budget::default()
        },
        delegate_key: None,
        ..body()
    }
}

const NOON: i64 = 1_795_694_400_000; // 2026-11-26T12:00:00Z

/// The vector in PROTOCOL.md ("Writs"): secret key 32 bytes of 0x01, the body above.
#[test]
fn the_protocol_test_vector_signs_and_verifies() {
    let w = sign_writ(&key(1), body());
    let bytes = String::from_utf8(w.body.signing_bytes()).expect("utf8");
    assert!(bytes.starts_with(r#"{"budget":{"tokens":1000,"tool_calls":3},"ceiling":"write","#));
    assert_eq!(
        proto::sha256_hex(bytes.as_bytes()),
        include_str!("../testdata/writ-vector.sha256").trim()
    );
    assert_eq!(
        w.signature,
        include_str!("../testdata/writ-vector.sig").trim()
    );
    verify_grant(&w, &ana()).expect("verifies");
}

#[test]
fn a_forged_writ_is_refused() {
    // Altered after signing: a wider ceiling.
    let mut w = sign_writ(&key(1), body());
    w.body.ceiling = Effect::Irreversible;
    assert_eq!(verify_grant(&w, &ana()), Err(WritError::BadSignature));
    // Signed by a key that is not the issuer's.
    let w = sign_writ(&key(9), body());
    assert!(matches!(
        verify_grant(&w, &ana()),
        Err(WritError::Untrusted(_))
    ));
    // Signed by nobody trusted, naming someone else.
    let w = sign_writ(
        &key(1),
        WritBody {
            issuer: "user:bob".into(),
            ..body()
        },
    );
    assert!(matches!(
        verify_grant(&w, &ana()),
        Err(WritError::Untrusted(_))
    ));
    // An approval's kind cannot pass for a writ.
    let w = sign_writ(
        &key(1),
        WritBody {
            kind: "kura.approval.v1".into(),
            ..body()
        },
    );
    assert!(matches!(
        verify_grant(&w, &ana()),
        Err(WritError::Malformed(_))
    ));
}

#[test]
fn a_child_writ_wider_than_its_parent_is_refused() {
    let parent = sign_writ(&key(1), body());
    verify_delegation(&sign_writ(&key(2), child()), &parent).expect("a narrower child");
    let wider: Vec<(&str, WritBody)> = vec![
        (
            "tool",
            WritBody {
                tools: vec!["shell.run".into()],
                ..child()
            },
        ),
        (
            "tool glob",
            WritBody {
                tools: vec!["*".into()],
                ..child()
            },
        ),
        (
            "path",
            WritBody {
                paths: vec!["*".into()],
                ..child()
            },
        ),
        (
            "ceiling",
            WritBody {
                ceiling: Effect::External,
                ..child()
            },
        ),
        (
            "tool_calls",
            WritBody {
                budget: Budget {
                    tool_calls: Some(4),
                    ..child().budget
                },
                ..child()
            },
        ),
        (
            "tokens unlimited",
            WritBody {
                budget: Budget {
                    tokens: None,
                    ..child().budget
                },
                ..child()
            },
        ),
        (
            "expiry",
            WritBody {
                expires_at: "2026-11-28T00:00:00Z".into(),
                ..child()
            },
        ),
    ];
    for (axis, b) in wider {
        let r = verify_delegation(&sign_writ(&key(2), b), &parent);
        assert!(matches!(r, Err(WritError::Wider(_))), "{axis}: {r:?}");
    }
    // Signed by someone other than the parent's delegate key.
    let r = verify_delegation(&sign_writ(&key(3), child()), &parent);
    assert!(matches!(r, Err(WritError::Untrusted(_))), "{r:?}");
    // A parent without a delegate key cannot be delegated at all.
    let closed = sign_writ(
        &key(1),
        WritBody {
            delegate_key: None,
            ..body()
        },
    );
    let r = verify_delegation(&sign_writ(&key(2), child()), &closed);
    assert!(matches!(r, Err(WritError::Untrusted(_))), "{r:?}");
}

#[test]
fn a_call_outside_the_scope_above_the_ceiling_or_past_budget_or_expiry_is_refused() {
    let w = body();
    let args = |p: &str| json!({ "path": p }).as_object().cloned().expect("object");
    let ok = check_call(
        &w,
        "fs.write",
        Effect::Write,
        &args("notes/a"),
        Spent::default(),
        NOON,
    );
    assert_eq!(ok, Ok(()));
    let r = check_call(
        &w,
        "shell.run",
        Effect::Read,
        &args("notes/a"),
        Spent::default(),
        NOON,
    );
    assert!(matches!(r, Err(WritError::OutOfScope { .. })), "{r:?}");
    let r = check_call(
        &w,
        "fs.read",
        Effect::Read,
        &args("secrets/k"),
        Spent::default(),
        NOON,
    );
    assert!(matches!(r, Err(WritError::OutOfScope { .. })), "{r:?}");
    // A path spelled to climb back in is judged in its normal form.
    let r = check_call(
        &w,
        "fs.read",
        Effect::Read,
        &args("notes/../secrets/k"),
        Spent::default(),
        NOON,
    );
    assert!(matches!(r, Err(WritError::OutOfScope { .. })), "{r:?}");
    let r = check_call(
        &w,
        "fs.write",
        Effect::External,
        &args("notes/a"),
        Spent::default(),
        NOON,
    );
    assert!(matches!(r, Err(WritError::AboveCeiling { .. })), "{r:?}");
    let spent = Spent {
        tool_calls: 3,
        ..Spent::default()
    };
    let r = check_call(&w, "fs.read", Effect::Read, &args("notes/a"), spent, NOON);
    assert!(
        matches!(
            r,
            Err(WritError::BudgetSpent {
                axis: "tool_calls",
                ..
            })
        ),
        "{r:?}"
    );
    let spent = Spent {
        tokens: 1000,
        ..Spent::default()
    };
    let r = check_call(&w, "fs.read", Effect::Read, &args("notes/a"), spent, NOON);
    assert!(
        matches!(r, Err(WritError::BudgetSpent { axis: "tokens", .. })),
        "{r:?}"
    );
    let late = NOON + 13 * 3_600_000;
    let r = check_call(
        &w,
        "fs.read",
        Effect::Read,
        &args("notes/a"),
        Spent::default(),
        late,
    );
    assert!(matches!(r, Err(WritError::Expired { .. })), "{r:?}");
    let early = NOON - 13 * 3_600_000;
    let r = check_call(
        &w,
        "fs.read",
        Effect::Read,
        &args("notes/a"),
        Spent::default(),
        early,
    );
    assert!(matches!(r, Err(WritError::Expired { .. })), "{r:?}");
}

#[test]
fn a_revocation_without_a_valid_signature_is_refused() {
    let body = RevocationBody {
        kind: REVOCATION_KIND.into(),
        writ_id: body().id,
        by: "user:ana".into(),
        reason: "done".into(),
        revoked_at: "2026-11-26T12:00:00Z".into(),
    };
    verify_revocation(&sign_revocation(&key(1), body.clone()), &ana(), None).expect("ana's");
    let mut altered = sign_revocation(&key(1), body.clone());
    altered.body.writ_id = child().id;
    assert_eq!(
        verify_revocation(&altered, &ana(), None),
        Err(WritError::BadSignature)
    );
    let r = verify_revocation(&sign_revocation(&key(7), body.clone()), &ana(), None);
    assert!(matches!(r, Err(WritError::Untrusted(_))), "{r:?}");
    // A delegator takes back its own child with its delegate key, and nobody else's.
    let parent = sign_writ(&key(1), super::tests::body());
    let by_parent = RevocationBody {
        by: format!("writ:{}", parent.body.id),
        writ_id: child().id,
        ..body
    };
    verify_revocation(
        &sign_revocation(&key(2), by_parent.clone()),
        &ana(),
        Some(&parent),
    )
    .expect("delegator");
    let r = verify_revocation(&sign_revocation(&key(2), by_parent), &ana(), None);
    assert!(matches!(r, Err(WritError::Untrusted(_))), "{r:?}");
}

/// PROTOCOL.md's revocation and redaction vectors (key 32 bytes of 0x01), as Python's
/// `cryptography` signs them (`testdata/writ-vector.py`).
#[test]
fn the_protocol_revocation_and_redaction_vectors_verify() {
    let rev = sign_revocation(
        &key(1),
        RevocationBody {
            kind: REVOCATION_KIND.into(),
            writ_id: "01930000-0000-7000-8000-000000000001".parse().expect("id"),
            by: "user:ana".into(),
            reason: "done".into(),
            revoked_at: "2026-11-26T12:00:00Z".into(),
        },
    );
    assert_eq!(
        rev.signature,
        "530ac7f9d832f18a929c43958c3ccabe525242b28e5c8a95df03d7c8749b0b3ad7397d2f81a2f282f63e0db745630807f4e1803e77020d46464875f7a13f1f08"
    );
    let red = sign_redaction(
        &key(1),
        proto::writ::RedactionBody {
            kind: proto::writ::REDACTION_KIND.into(),
            record_id: "01930000-0000-7000-8000-0000000000c1".into(),
            record_hash: "15150c2c9711709f8f3fca7f2c38dc26ad522c5f8c3aa6be1fbb82a97a053ed9".into(),
            by: "user:ana".into(),
            reason: "a key leaked".into(),
            redacted_at: "2026-11-26T12:00:00Z".into(),
        },
    );
    assert_eq!(
        red.signature,
        "7f8fedc52e7cc98cd75248178a72ec1778a4976021e0e6b11319db4d4d08d9706de9313226b38c8d7a0ebfade9d298290520385cd7773b7005d95e89ab71fb04"
    );
    verify_redaction(&red, &ana()).expect("ana's redaction");
    let mut other = red.clone();
    other.body.record_hash = "00".repeat(32);
    assert_eq!(
        verify_redaction(&other, &ana()),
        Err(WritError::BadSignature)
    );
}

/// Money and wall time end a writ like tokens do; a delegation may not drop a limit its
/// parent has on either.
#[test]
fn money_and_wall_time_budgets_are_held() {
    let w = WritBody {
        budget: Budget {
            money_micros: Some(500),
            wall_ms: Some(60_000),
            ..Budget::default()
        },
        ..body()
    };
    let args = json!({"path": "notes/a"})
        .as_object()
        .cloned()
        .expect("object");
    let spent = |money, wall| Spent {
        money_micros: money,
        wall_ms: wall,
        ..Spent::default()
    };
    assert_eq!(
        check_call(&w, "fs.read", Effect::Read, &args, spent(499, 59_999), NOON),
        Ok(())
    );
    let r = check_call(&w, "fs.read", Effect::Read, &args, spent(500, 0), NOON);
    assert!(
        matches!(
            r,
            Err(WritError::BudgetSpent {
                axis: "money_micros",
                ..
            })
        ),
        "{r:?}"
    );
    let r = check_call(&w, "fs.read", Effect::Read, &args, spent(0, 60_000), NOON);
    assert!(
        matches!(
            r,
            Err(WritError::BudgetSpent {
                axis: "wall_ms",
                ..
            })
        ),
        "{r:?}"
    );
    let parent = sign_writ(&key(1), w.clone());
    let unlimited = WritBody {
        budget: Budget {
            money_micros: None,
            wall_ms: Some(1),
            ..Budget::default()
        },
        ..child()
    };
    let r = verify_delegation(&sign_writ(&key(2), unlimited), &parent);
    assert!(matches!(r, Err(WritError::Wider(_))), "{r:?}");
}

/// Attack: a path that climbs out of the writ's paths with `..`, relative (which has no
/// normal form) or absolute (as outside agents send them), or names another argument.
#[test]
fn a_path_that_climbs_out_of_the_writs_paths_is_refused() {
    let w = WritBody {
        paths: vec!["notes/*".into(), "/home/ana/notes/*".into()],
        ..body()
    };
    let call = |k: &str, p: &str| {
        let args = json!({ k: p }).as_object().cloned().expect("object");
        check_call(&w, "fs.read", Effect::Read, &args, Spent::default(), NOON)
    };
    assert_eq!(call("path", "notes/a"), Ok(()));
    assert_eq!(call("file_path", "/home/ana/notes/a.md"), Ok(()));
    for (k, p) in [
        ("path", "notes/../../etc/passwd"),
        ("file_path", "/home/ana/notes/../../.ssh/id_rsa"),
        ("file_path", "/home/ana/notes/../../../../etc/shadow"),
        ("notebook_path", "secrets/n.ipynb"),
        ("path", "notes/\0x"),
    ] {
        let r = call(k, p);
        assert!(
            matches!(r, Err(WritError::OutOfScope { .. })),
            "{k}={p:?}: {r:?}"
        );
    }
    assert_eq!(writ_path("/a/./b//c/../d"), Some("/a/b/d".into()));
    assert_eq!(writ_path("a/../.."), None);
}

/// Issue 35 (9): under `--path 'notes/*'`, `shell.run cat secret.txt` read a file outside
/// the writ's paths (its argv names no path the writ can bound). A call with no path
/// argument under narrowed paths runs only when the writ names its tool exactly.
#[test]
fn under_narrowed_paths_a_tool_with_no_path_runs_only_when_named() {
    let narrowed = |tools: &[&str]| WritBody {
        tools: tools.iter().map(|t| t.to_string()).collect(),
        paths: vec!["notes/*".into()],
        ceiling: Effect::External,
        ..body()
    };
    let argv = json!({"argv": ["cat", "secret.txt"]})
        .as_object()
        .cloned()
        .expect("object");
    let run = |w: &WritBody| {
        check_call(
            w,
            "shell.run",
            Effect::External,
            &argv,
            Spent::default(),
            NOON,
        )
    };
    let r = run(&narrowed(&["*"]));
    assert!(matches!(r, Err(WritError::OutOfScope { .. })), "{r:?}");
    let r = run(&narrowed(&["shell.*"]));
    assert!(matches!(r, Err(WritError::OutOfScope { .. })), "{r:?}");
    assert_eq!(run(&narrowed(&["shell.run"])), Ok(()));
    // Second review: a path beside the command bounds nothing (`cat /etc/x` with a dummy
    // path ran through the glob); named exactly, its argv may name any place.
    let with_path = json!({"argv": ["cat", "/etc/shadow"], "path": "notes/a"})
        .as_object()
        .cloned()
        .expect("object");
    let call = |w: &WritBody| {
        check_call(
            w,
            "shell.run",
            Effect::External,
            &with_path,
            Spent::default(),
            NOON,
        )
    };
    let r = call(&narrowed(&["shell.*"]));
    assert!(matches!(r, Err(WritError::OutOfScope { .. })), "{r:?}");
    assert_eq!(call(&narrowed(&["shell.run"])), Ok(()));
    // Any path: nothing to bound, the glob suffices.
    let open = WritBody {
        tools: vec!["*".into()],
        ceiling: Effect::External,
        ..body()
    };
    let open = WritBody {
        paths: vec!["*".into()],
        ..open
    };
    assert_eq!(run(&open), Ok(()));
}

/// Issue 35 (9): `fs.list {}` listed the workspace root under `--path 'notes/*'`. With no
/// path it is judged as `.`, which the writ's paths do not hold.
#[test]
fn under_narrowed_paths_fs_list_with_no_path_is_judged_as_the_root() {
    let w = WritBody {
        paths: vec!["notes/*".into()],
        ..body()
    };
    let none = serde_json::Map::new();
    let r = check_call(&w, "fs.list", Effect::Read, &none, Spent::default(), NOON);
    assert!(matches!(r, Err(WritError::OutOfScope { .. })), "{r:?}");
    let any = WritBody {
        paths: vec!["*".into()],
        ..body()
    };
    assert_eq!(
        check_call(&any, "fs.list", Effect::Read, &none, Spent::default(), NOON),
        Ok(())
    );
    let notes = json!({"path": "notes/a"})
        .as_object()
        .cloned()
        .expect("object");
    assert_eq!(
        check_call(&w, "fs.list", Effect::Read, &notes, Spent::default(), NOON),
        Ok(())
    );
}

/// Review of issue 35 (9): a tool matched by a glob carried another argument naming a place
/// (`fs.copy {path: notes/a, destination: /etc/cron.d/x}`), and only `path` was held to the
/// writ's paths. Under narrowed paths every argument that may name a place is: by its name
/// (`destination`, `target`, `dir`, `src`, `output`, `to`, …), strings and lists of strings.
#[test]
fn under_narrowed_paths_every_argument_naming_a_place_is_held_to_them() {
    let w = WritBody {
        tools: vec!["fs.*".into()],
        paths: vec!["notes/*".into()],
        ceiling: Effect::Write,
        ..body()
    };
    let call = |args: serde_json::Value| {
        let args = args.as_object().cloned().expect("object");
        check_call(&w, "fs.copy", Effect::Write, &args, Spent::default(), NOON)
    };
    for escaping in [
        json!({"path": "notes/a", "destination": "/etc/cron.d/x"}),
        json!({"path": "notes/a", "target_dir": "../outside"}),
        json!({"path": "notes/a", "to": "secrets/key"}),
        json!({"path": "notes/a", "sources": ["notes/b", "/home/ana/.ssh/id_ed25519"]}),
        // Review: other names, nested values, a path key that is no string, a file URL, a
        // value that reads as a path under a name that does not say so.
        json!({"path": "notes/a", "dst": "/tmp/x"}),
        json!({"path": "notes/a", "out": "secrets/key"}),
        json!({"path": "notes/a", "options": {"dest": "/etc/x"}}),
        json!({"path": "notes/a", "options": [{"name": "x", "where": "/etc/x"}]}),
        json!({"file_path": "notes/a", "path": ["/etc/shadow"]}),
        json!({"path": "notes/a", "uri": "file:///etc/passwd"}),
        json!({"path": "notes/a", "mode": "~/.ssh/authorized_keys"}),
        // Second review: an absolute Glob pattern, a file URL with escapes or a host.
        json!({"path": "notes", "glob": "/home/ana/.ssh/*"}),
        json!({"path": "notes/a", "uri": "file:///notes/%2e%2e/%2e%2e/etc/passwd"}),
        json!({"path": "notes/a", "uri": "file://evil.example/share"}),
        // Third review: climbing or braced file globs, a scheme in capitals.
        json!({"path": "notes", "glob": "../../etc/*"}),
        json!({"path": "notes", "glob": "{/etc/passwd,x}"}),
        json!({"path": "notes/a", "uri": "FILE:///etc/passwd"}),
    ] {
        let r = call(escaping.clone());
        assert!(
            matches!(&r, Err(WritError::OutOfScope { why, .. }) if why.contains("argument")),
            "{escaping}: {r:?}"
        );
    }
    for within in [
        json!({"path": "notes/a", "destination": "notes/b", "overwrite": true}),
        json!({"path": "notes/a", "output": {"file": "notes/c"}, "timeout": 5}),
        json!({"path": "notes/a", "content": "/etc/passwd is where users live"}),
        // Second review: choices named like places are not places.
        json!({"path": "notes/a", "output_mode": "files_with_matches"}),
        json!({"path": "notes/a", "new_source": "print('hi')"}),
        json!({"path": "notes/a", "new_source": "/ a cell that opens with a slash"}),
        // A Grep regex is no place; a relative file glob is relative to a held path.
        json!({"path": "notes/a", "pattern": "/api/v1", "glob": "*.rs"}),
    ] {
        assert_eq!(call(within.clone()), Ok(()), "{within}");
    }
    // A Glob tool's pattern is a file glob: absolute, it is held to the paths too.
    let glob = WritBody {
        tools: vec!["Glob".into()],
        ..w.clone()
    };
    let args = json!({"path": "notes", "pattern": "/home/ana/.ssh/*"});
    let r = check_call(
        &glob,
        "Glob",
        Effect::Write,
        args.as_object().expect("object"),
        Spent::default(),
        NOON,
    );
    assert!(matches!(r, Err(WritError::OutOfScope { .. })), "{r:?}");
    // The root a writ grants is within it: `notes/*` covers `notes` itself (third review:
    // Glob, Grep or `fs.list` on the project root were refused).
    let args = json!({"path": "notes", "pattern": "**/*.md"});
    let r = check_call(
        &glob,
        "Glob",
        Effect::Read,
        args.as_object().expect("object"),
        Spent::default(),
        NOON,
    );
    assert_eq!(r, Ok(()));
    // Writing to the root's own name is not within `notes/*`.
    let r = call(json!({"path": "notes", "content": "x"}));
    assert!(matches!(r, Err(WritError::OutOfScope { .. })), "{r:?}");
    let open = WritBody {
        paths: vec!["*".into()],
        ..w.clone()
    };
    let args = json!({"path": "notes/a", "destination": "/etc/cron.d/x"});
    assert_eq!(
        check_call(
            &open,
            "fs.copy",
            Effect::Write,
            args.as_object().expect("object"),
            Spent::default(),
            NOON
        ),
        Ok(()),
        "any path: nothing to bound"
    );
}

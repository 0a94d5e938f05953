//! Plans on the real daemons: a turn's `agent.plan` runs as sub-sessions on two hashi
//! workers at once, its join waits for all three, the planning session joins every output,
//! and `kura verify --all` checks the whole tree; hostile plans are refused and recorded.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use kura_testkit::bin;
use kura_testkit::stack::Stack;
use proto::record::RecordType;
use proto::{LedgerId, SessionId};

const MINUTE: Duration = Duration::from_secs(60);

/// The default role plans: three independent steps and a join; when they are done, its
/// second turn delivers.
const PLANNER: &str = r#"{"turns": [
  [{"plan": {"text": "three looks and a summary", "steps": [
      {"id": "a", "role": "looker", "instruction": "look at a"},
      {"id": "b", "role": "looker", "instruction": "look at b"},
      {"id": "c", "role": "looker", "instruction": "look at c"},
      {"id": "join", "role": "writer", "instruction": "sum up", "after": ["a", "b", "c"]}]}},
   {"deliver": "planned", "final": false}],
  [{"deliver": "all done"}]
]}"#;

/// A step: one read, then (after some simulated model time) its deliverable.
const LOOKER: &str = r#"{"turns": [[
  {"tool": "fs.list", "args": {}},
  {"deliver": "looked: {instruction}", "delay_ms": 600}
]]}"#;

const WRITER: &str = r#"{"turns": [[{"deliver": "summed up"}]]}"#;

/// A planner whose plan goes round.
const CYCLIC: &str = r#"{"turns": [[
  {"plan": {"steps": [
      {"id": "a", "instruction": "x", "after": ["b"]},
      {"id": "b", "instruction": "y", "after": ["a"]}]}},
  {"deliver": "planned"}]]}"#;

/// A planner naming a role nobody configured.
const UNKNOWN: &str = r#"{"turns": [[
  {"plan": {"steps": [{"id": "a", "role": "root", "instruction": "x"}]}},
  {"deliver": "planned"}]]}"#;

/// The roster: each role's script in the stack's directory.
fn roster(s: &mut Stack, extra: &[(&str, String)]) {
    let mut roles = Vec::new();
    for (name, script) in [
        ("looker", LOOKER),
        ("writer", WRITER),
        ("cyclic", CYCLIC),
        ("unknown", UNKNOWN),
    ] {
        let path = s.path(&format!("{name}.json"));
        std::fs::write(&path, script).expect("script");
        roles.push(format!(
            "{{name = \"{name}\", script = \"{}\"}}",
            path.display()
        ));
    }
    for (name, script) in extra {
        let path = s.path(&format!("{name}.json"));
        std::fs::write(&path, script).expect("script");
        roles.push(format!(
            "{{name = \"{name}\", script = \"{}\"}}",
            path.display()
        ));
    }
    s.extra_env.push((
        "KURA_ROSTER__ROLES".into(),
        format!("[{}]", roles.join(", ")),
    ));
}

fn start(s: &mut Stack) {
    for (bin, instance) in [
        ("minato", "minato"),
        ("hashi", "hashi-1"),
        ("hashi", "hashi-2"),
        ("aegis", "aegis"),
        ("mikado", "mikado"),
    ] {
        s.spawn(bin, instance);
    }
}

/// A plan's steps: (step id, its session) from the work tables.
fn steps(s: &Stack) -> Vec<(String, SessionId)> {
    let store = s.store();
    let mut stmt = store
        .conn()
        .prepare("SELECT step, session_id FROM plan_steps ORDER BY ord")
        .expect("prepare");
    stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
        .expect("query")
        .map(|r| {
            let (step, session) = r.expect("row");
            (step, kura_store::store::parse_id(&session).expect("id"))
        })
        .collect()
}

/// A session's turns: (context ledger, output ledger, output created, output sealed).
fn turns(s: &Stack, session: SessionId) -> Vec<(LedgerId, LedgerId, String, String)> {
    let store = s.store();
    let mut stmt = store
        .conn()
        .prepare(
            "SELECT t.context_ledger_id, t.output_ledger_id, l.created_at, l.sealed_at
               FROM turns t JOIN ledgers l ON l.ledger_id = t.output_ledger_id
              WHERE t.session_id = ?1 ORDER BY t.seq",
        )
        .expect("prepare");
    stmt.query_map([session.to_string()], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
        ))
    })
    .expect("query")
    .map(|r| {
        let (c, o, a, b) = r.expect("row");
        let id = |t: &str| kura_store::store::parse_id(t).expect("id");
        (id(&c), id(&o), a, b)
    })
    .collect()
}

/// Every record of every ledger of a session (contexts, outputs, minato's own).
fn records(s: &Stack, session: SessionId) -> Vec<proto::Record> {
    let store = s.store();
    let mut out = Vec::new();
    let mut ledgers = store.session_ledgers(session).expect("ledgers");
    ledgers.reverse();
    for l in ledgers {
        out.extend(store.hydrate(l.ledger_id).expect("hydrate"));
    }
    out
}

fn parents(s: &Stack, ledger: LedgerId) -> BTreeSet<LedgerId> {
    s.store()
        .read_ledger(ledger)
        .expect("ledger")
        .parent_ids
        .into_iter()
        .collect()
}

#[test]
fn a_plan_runs_its_independent_steps_at_once_and_joins_their_outputs() {
    let mut s = Stack::new(PLANNER);
    roster(&mut s, &[]);
    start(&mut s);
    let request = s.submit("plan the looks");
    let done = s.wait_complete(request, MINUTE);
    let parent = done.session_id.expect("session");
    let said = done.deliverable.expect("deliverable");
    assert_eq!(said.content["text"], "all done");

    let all = steps(&s);
    assert_eq!(
        all.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(),
        ["a", "b", "c", "join"]
    );
    let planning = turns(&s, parent);
    assert_eq!(planning.len(), 2, "the planning turn and the join turn");
    let plan_ledger = planning[0].1;
    // The three looks ran on two workers at once: some two of them overlap in time.
    let looks: Vec<_> = all[..3]
        .iter()
        .map(|(_, sid)| turns(&s, *sid).remove(0))
        .collect();
    let overlap = (0..3)
        .any(|i| (0..3).any(|j| i != j && looks[i].2 < looks[j].3 && looks[j].2 < looks[i].3));
    assert!(overlap, "no two steps ran at once: {looks:?}");
    for (ctx, ..) in &looks {
        assert_eq!(
            parents(&s, *ctx),
            BTreeSet::from([plan_ledger]),
            "a first step grows from the plan"
        );
    }
    // The join's context has all three outputs as parents, and their deliverables.
    let join = turns(&s, all[3].1).remove(0);
    let outputs: BTreeSet<LedgerId> = looks.iter().map(|l| l.1).collect();
    assert_eq!(parents(&s, join.0), outputs);
    let join_ctx: Vec<String> = s
        .store()
        .hydrate(join.0)
        .expect("ctx")
        .into_iter()
        .filter(|r| r.record_type == RecordType::TaskDeliverable)
        .map(|r| r.content["text"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(
        join_ctx,
        [
            "looked: look at a",
            "looked: look at b",
            "looked: look at c"
        ]
    );
    // The planning session's second turn joins every step's output.
    let mut every = outputs.clone();
    every.insert(join.1);
    assert_eq!(parents(&s, planning[1].0), every);
    // Each step's role was recorded with its reason.
    let routes: Vec<String> = records(&s, all[0].1)
        .into_iter()
        .filter(|r| r.record_type == RecordType::TaskRoute)
        .map(|r| r.content["role"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(routes, ["looker"]);

    let graph = Command::new(bin("kura"))
        .args(["log", "--graph", &parent.to_string(), "--db"])
        .arg(&s.db)
        .output()
        .expect("kura log");
    assert!(
        graph.status.success(),
        "{}",
        String::from_utf8_lossy(&graph.stderr)
    );
    // The graph draws the steps with the plan: each step's ledgers tagged, the join's
    // context where three lanes meet.
    let drawn = String::from_utf8_lossy(&graph.stdout);
    for step in ["[step a]", "[step b]", "[step c]", "[step join]"] {
        assert_eq!(
            drawn.matches(step).count(),
            2,
            "{step} ctx and out:\n{drawn}"
        );
    }
    assert!(
        !drawn.contains("forked from") && !drawn.contains("grew from"),
        "every parent is drawn:\n{drawn}"
    );
    s.verify_all();
}

/// Attack: a model plans a ring of steps that wait on each other, a step for a role the
/// roster does not have (hoping for a default with more tools), or more steps than allowed.
/// None starts anything;
/// each refusal is a `sys.error` in the planning session, which then ends as it said.
#[test]
fn a_cyclic_or_unknown_role_plan_is_refused_and_recorded() {
    let mut s = Stack::new(PLANNER);
    let many: Vec<String> = (0..17)
        .map(|i| format!("{{\"id\": \"s{i}\", \"instruction\": \"x\"}}"))
        .collect();
    let oversized = format!(
        "{{\"turns\": [[{{\"plan\": {{\"steps\": [{}]}}}}, {{\"deliver\": \"planned\"}}]]}}",
        many.join(", ")
    );
    roster(&mut s, &[("oversized", oversized)]);
    start(&mut s);
    for (role, why) in [
        ("cyclic", "plan refused: the plan has a cycle"),
        ("unknown", "unknown role \"root\""),
        ("oversized", "the plan has 17 steps; at most 16"),
    ] {
        let request = s.submit_with("plan badly", &["--role", role]);
        let done = s.wait_complete(request, MINUTE);
        let session = done.session_id.expect("session");
        let errors: Vec<String> = records(&s, session)
            .into_iter()
            .filter(|r| r.record_type == RecordType::SysError)
            .map(|r| r.content["text"].as_str().unwrap_or("").to_owned())
            .collect();
        assert!(errors.iter().any(|e| e.contains(why)), "{role}: {errors:?}");
        assert_eq!(
            done.deliverable.expect("deliverable").content["text"],
            "planned"
        );
    }
    assert!(steps(&s).is_empty(), "no step of a refused plan started");
    // A role nobody configured is refused at submit.
    let out = Command::new(bin("minato"))
        .args(["submit", "x", "--role", "root"])
        .env("KURA_DB", &s.db)
        .env("KURA_ROSTER__ROLES", "[]")
        .output()
        .expect("minato submit");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown role \"root\""));
    s.verify_all();
}

/// Work that writes an empty list first and a full one when sent back (turns 1 and 3; the
/// validator takes turns 2 and 4).
const WORK: &str = r#"{"turns": [
  [{"tool": "fs.write", "args": {"path": "list.md", "content": ""}}, {"deliver": "wrote the list"}],
  [{"deliver": "not used"}],
  [{"tool": "fs.write", "args": {"path": "list.md", "content": "- rice\n"}}, {"deliver": "wrote it again"}]
]}"#;

/// A validating role: fails what it sees first (turn 2), passes the second (turn 4).
const CHECKER: &str = r#"{"turns": [
  [{"deliver": "not used"}],
  [{"deliver": "fail: the list is empty"}],
  [{"deliver": "not used"}],
  [{"deliver": "pass: the list has rice"}]
]}"#;

/// The verdicts of a session, in order: (pass, by, reason).
fn verdicts(s: &Stack, session: SessionId) -> Vec<(bool, String, String)> {
    let mut v: Vec<_> = records(s, session)
        .into_iter()
        .filter(|r| r.record_type == RecordType::TaskVerdict)
        .map(|r| {
            (
                r.content["pass"].as_bool().expect("pass"),
                r.content["by"].as_str().unwrap_or("").to_owned(),
                r.content["reason"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    v.dedup();
    v
}

#[test]
fn a_validator_fails_the_first_deliverable_and_passes_the_second() {
    let mut s = Stack::new(WORK);
    roster(&mut s, &[("checker", CHECKER.to_owned())]);
    // The validator commands run like shell.run: only programs on the allowlist.
    s.extra_env.push((
        "KURA_TOOLS__SHELL_ALLOWLIST".into(),
        r#"["sh", "false"]"#.into(),
    ));
    start(&mut s);
    let by_role = s.submit_with("write the list", &["--validate-role", "checker"]);
    let by_cmd = s.submit_with(
        "write the list",
        &["--validate-cmd", "sh -c 'test -s list.md'"],
    );
    let never = s.submit_with("write the list", &["--validate-cmd", "false"]);
    for (request, by) in [(by_role, "role:checker"), (by_cmd, "command:sh")] {
        let done = s.wait_complete(request, MINUTE);
        let session = done.session_id.expect("session");
        assert_eq!(
            done.deliverable.expect("deliverable").content["text"],
            "wrote it again"
        );
        let v = verdicts(&s, session);
        assert_eq!(
            v.iter().map(|x| x.0).collect::<Vec<_>>(),
            [false, true],
            "{v:?}"
        );
        assert!(v.iter().all(|x| x.1 == by), "{v:?}");
        // Completion names the verdict that allowed it.
        let allowed: String = s
            .store()
            .conn()
            .query_row(
                "SELECT verdict FROM sessions WHERE session_id = ?1",
                [session.to_string()],
                |r| r.get(0),
            )
            .expect("verdict");
        let rec = s
            .store()
            .read_record(kura_store::store::parse_id(&allowed).expect("id"))
            .expect("record");
        assert_eq!(rec.content["pass"], true);
        // Each validation turn's context tells it that it judges, and which deliverable
        // (issue 36: a validator saw the deliverable as its own previous output).
        let notes: i64 = s
            .store()
            .conn()
            .query_row(
                "SELECT count(*) FROM turns t JOIN ledger_records lr ON lr.ledger_id = t.context_ledger_id
                   JOIN records r ON r.record_id = lr.record_id
                  WHERE t.session_id = ?1 AND t.validates IS NOT NULL
                    AND r.record_type = 'sys.context' AND json_extract(r.content, '$.validates') = t.validates",
                [session.to_string()],
                |r| r.get(0),
            )
            .expect("notes");
        assert_eq!(
            notes, 2,
            "one note per validation turn, naming what it judges"
        );
    }
    // A validator that never passes ends the work with its verdict after two tries.
    let done = s.wait_complete(never, MINUTE);
    let said = done.deliverable.expect("deliverable");
    assert_eq!(said.content["error"], true);
    let text = said.content["text"].as_str().unwrap_or("");
    assert!(
        text.contains("the validator (command:false) failed the deliverable 2 times"),
        "{text}"
    );
    // Issue 35 (11): the session its validator failed reads as failed, not complete.
    let failed = s
        .store()
        .sessions()
        .expect("sessions")
        .into_iter()
        .filter(|x| x.status == proto::SessionStatus::Failed)
        .count();
    assert_eq!(failed, 1, "the never-passing request's session is failed");
    s.verify_all();
}

/// A plan whose second step's validator never passes: the join never starts. (A model's
/// plan may name a validating role, never a command.)
const FAILING: &str = r#"{"turns": [
  [{"plan": {"steps": [
      {"id": "a", "role": "looker", "instruction": "look at a"},
      {"id": "b", "role": "looker", "instruction": "look at b", "validator": {"role": "nay"}},
      {"id": "join", "role": "writer", "instruction": "sum up", "after": ["a", "b"]}]}},
   {"deliver": "planned", "final": false}],
  [{"deliver": "not reached"}]
]}"#;

#[test]
fn a_failed_step_ends_the_plan_with_a_partial_deliverable() {
    let mut s = Stack::new(FAILING);
    let nay = r#"{"turns": [[{"deliver": "fail: never good enough"}]]}"#;
    roster(&mut s, &[("nay", nay.to_owned())]);
    start(&mut s);
    let request = s.submit("plan something that fails");
    let done = s.wait_complete(request, MINUTE);
    let said = done.deliverable.expect("deliverable");
    assert_eq!(said.content["error"], true);
    let text = said.content["text"].as_str().unwrap_or("");
    for part in [
        "the plan ended without finishing",
        "a (done): looked: look at a",
        "b (failed): the validator (role:nay) failed the deliverable 2 times",
        "join (skipped)",
    ] {
        assert!(text.contains(part), "{part:?} in {text}");
    }
    let states: Vec<String> = {
        let store = s.store();
        let mut stmt = store
            .conn()
            .prepare("SELECT state FROM plan_steps ORDER BY ord")
            .expect("prepare");
        stmt.query_map([], |r| r.get(0))
            .expect("query")
            .map(|r| r.expect("row"))
            .collect()
    };
    assert_eq!(states, ["done", "failed", "skipped"]);
    let plan_state: String = s
        .store()
        .conn()
        .query_row("SELECT state FROM plans", [], |r| r.get(0))
        .expect("plan");
    assert_eq!(plan_state, "failed");
    s.verify_all();
}

#[test]
fn a_worker_killed_mid_step_resumes_elsewhere_without_repeating_the_side_effect() {
    let mut s = Stack::new(PLANNER);
    let effects = s.path("effects.log");
    std::fs::write(&effects, "").expect("effects log");
    // Each look appends a line outside its workspace, then takes a while.
    let looker = format!(
        r#"{{"turns": [[
            {{"tool": "shell.run", "args": {{"argv": ["sh", "-c", "echo ran >> {e}; sleep 2"]}}}},
            {{"deliver": "looked: {{instruction}}"}}
        ]]}}"#,
        e = effects.display()
    );
    roster(&mut s, &[]);
    std::fs::write(s.path("looker.json"), looker).expect("looker");
    s.extra_env
        .push(("KURA_TOOLS__SHELL_ALLOWLIST".into(), r#"["sh"]"#.into()));
    s.extra_env.push((
        "KURA_TOOLS__SANDBOX_READ_WRITE".into(),
        format!("[\"{}\"]", effects.display()),
    ));
    start(&mut s);
    let request = s.submit("plan the looks");
    // Once a look's side effect ran, kill the worker running it.
    let mut holder = String::new();
    s.wait_until("a look to start its side effect", MINUTE, |store| {
        let owner: Option<String> = store
            .conn()
            .query_row(
                "SELECT t.lease_owner FROM turns t JOIN plan_steps p ON p.session_id = t.session_id
                  WHERE t.state = 'running' AND p.role = 'looker' LIMIT 1",
                [],
                |r| r.get(0),
            )
            .ok()
            .flatten();
        match owner {
            Some(o) if std::fs::metadata(&effects).is_ok_and(|m| m.len() > 0) => {
                holder = o;
                true
            }
            _ => false,
        }
    });
    s.signal(&holder, "KILL");
    let done = s.wait_complete(request, MINUTE);
    assert_eq!(
        done.deliverable.expect("deliverable").content["text"],
        "all done"
    );
    let ran = std::fs::read_to_string(&effects).expect("effects");
    assert_eq!(
        ran.lines().count(),
        3,
        "each look's side effect ran exactly once: {ran:?}"
    );
    s.verify_all();
}

/// `minato replay SESSION --json EXTRA` as the submitter.
fn replay(s: &Stack, session: SessionId, extra: &[&str]) -> serde_json::Value {
    let mut cmd = Command::new(bin("minato"));
    cmd.args(["replay", &session.to_string(), "--json", "--timeout", "60"])
        .args(extra);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("KURA_")) {
        cmd.env_remove(k);
    }
    cmd.env("KURA_DB", &s.db)
        .env("KURA_NATS_URL", s.nats.url())
        .env(
            "KURA_NATS_SEED",
            s.nats.seed(kura_runtime::identity::Role::Submit),
        )
        .env("KURA_NATS_CA", s.nats.ca());
    let out = cmd.output().expect("replay");
    assert!(
        out.status.success(),
        "replay: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

/// (type, hash) of every record a session's turns wrote, and its plans' steps' sessions',
/// sorted.
fn tree(s: &Stack, session: SessionId) -> Vec<(String, String)> {
    let store = s.store();
    let mut sessions = vec![session];
    let mut stmt = store
        .conn()
        .prepare(
            "SELECT st.session_id FROM plan_steps st JOIN plans p ON p.plan_id = st.plan_id
              WHERE p.session_id = ?1 AND st.session_id IS NOT NULL",
        )
        .expect("prepare");
    sessions.extend(
        stmt.query_map([session.to_string()], |r| r.get::<_, String>(0))
            .expect("query")
            .map(|r| kura_store::store::parse_id::<SessionId>(&r.expect("row")).expect("id")),
    );
    let mut out: Vec<(String, String)> = sessions
        .into_iter()
        .flat_map(|id| kura_testkit::stack::session_records(&store, id))
        .map(|r| (r.record_type.as_str().to_owned(), r.hash))
        .collect();
    out.sort();
    out
}

#[test]
fn a_replayed_plan_reproduces_its_records_and_repeats_no_side_effect() {
    let mut s = Stack::new(PLANNER);
    let effects = s.path("effects.log");
    std::fs::write(&effects, "").expect("effects log");
    let looker = format!(
        r#"{{"turns": [[
            {{"tool": "shell.run", "args": {{"argv": ["sh", "-c", "echo ran >> {e}"]}}}},
            {{"deliver": "looked: {{instruction}}"}}
        ]]}}"#,
        e = effects.display()
    );
    roster(&mut s, &[]);
    std::fs::write(s.path("looker.json"), looker).expect("looker");
    s.extra_env
        .push(("KURA_TOOLS__SHELL_ALLOWLIST".into(), r#"["sh"]"#.into()));
    s.extra_env.push((
        "KURA_TOOLS__SANDBOX_READ_WRITE".into(),
        format!("[\"{}\"]", effects.display()),
    ));
    start(&mut s);
    let parent = s
        .wait_complete(s.submit("plan the looks"), MINUTE)
        .session_id
        .expect("session");
    let ran = std::fs::read_to_string(&effects).expect("effects");
    assert_eq!(ran.lines().count(), 3);

    let r = replay(&s, parent, &[]);
    let replayed: SessionId =
        kura_store::store::parse_id(r["session_id"].as_str().expect("session")).expect("id");
    let (a, b) = (tree(&s, parent), tree(&s, replayed));
    let of = |v: &[(String, String)], t: &str| -> Vec<String> {
        v.iter().filter(|x| x.0 == t).map(|x| x.1.clone()).collect()
    };
    for (t, n) in [("agent.plan", 1), ("tool.call", 3), ("task.deliverable", 6)] {
        assert_eq!(of(&a, t).len(), n, "{t}: {a:?}");
        assert_eq!(
            of(&a, t),
            of(&b, t),
            "the replay reproduces every {t} record"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&effects).expect("effects"),
        ran,
        "no side effect ran again"
    );

    // Attack (found in review): a live replay whose model plans a step the recording never
    // ran started it as live work, side effects and all. Its side effect is refused.
    std::fs::write(
        s.path("script.json"),
        PLANNER
            .replace(r#""id": "c""#, r#""id": "new""#)
            .replace(r#"["a", "b", "c"]"#, r#"["a", "b", "new"]"#),
    )
    .expect("script");
    for h in ["hashi-1", "hashi-2"] {
        s.signal(h, "TERM");
        s.wait_exit(h, MINUTE);
        s.spawn("hashi", h);
    }
    let live = replay(&s, parent, &["--live"]);
    let live: SessionId =
        kura_store::store::parse_id(live["session_id"].as_str().expect("session")).expect("id");
    let new_step = steps(&s)
        .into_iter()
        .find(|(id, _)| id == "new")
        .expect("the new step ran")
        .1;
    let refused: Vec<String> = records(&s, new_step)
        .into_iter()
        .filter(|r| r.record_type == RecordType::ToolResult)
        .map(|r| r.content["error"].as_str().unwrap_or("").to_owned())
        .collect();
    assert!(
        refused.iter().any(|e| e.contains("replay")),
        "the new step's side effect was refused: {refused:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&effects).expect("effects"),
        ran,
        "no side effect ran in the live replay either"
    );
    assert!(!tree(&s, live).is_empty());
    s.verify_all();
}

#[test]
fn a_request_is_routed_by_keyword_else_by_the_router_role() {
    let mut s = Stack::new(WRITER);
    let mut roles = Vec::new();
    for (name, script, extra) in [
        ("looker", LOOKER, ""),
        ("writer", WRITER, ", keywords = [\"summarise\"]"),
        ("router", r#"{"turns": [[{"deliver": "looker"}]]}"#, ""),
    ] {
        let path = s.path(&format!("{name}.json"));
        std::fs::write(&path, script).expect("script");
        roles.push(format!(
            "{{name = \"{name}\", script = \"{}\"{extra}}}",
            path.display()
        ));
    }
    s.extra_env.extend([
        (
            "KURA_ROSTER__ROLES".into(),
            format!("[{}]", roles.join(", ")),
        ),
        ("KURA_ROSTER__ROUTER_ROLE".into(), "router".into()),
    ]);
    start(&mut s);
    // A route record stands in its own ledger and in the context it routed.
    let route = |s: &Stack, session: SessionId| -> Vec<(String, String)> {
        let mut why: Vec<(String, String)> = records(s, session)
            .into_iter()
            .filter(|r| r.record_type == RecordType::TaskRoute)
            .map(|r| {
                (
                    r.content["role"].as_str().unwrap_or("").to_owned(),
                    r.content["reason"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect();
        why.dedup();
        why
    };
    let by_keyword = s.wait_complete(s.submit("please Summarise the notes"), MINUTE);
    assert_eq!(
        by_keyword.deliverable.expect("deliverable").content["text"],
        "summed up"
    );
    let why = route(&s, by_keyword.session_id.expect("session"));
    assert_eq!(
        why,
        [(
            "writer".to_owned(),
            "keyword \"summarise\" of role writer".to_owned()
        )]
    );
    let by_model = s.wait_complete(s.submit("what is in the box"), MINUTE);
    let session = by_model.session_id.expect("session");
    assert_eq!(
        by_model.deliverable.expect("deliverable").content["text"],
        "looked: what is in the box"
    );
    let why = route(&s, session);
    assert_eq!(
        why,
        [(
            "looker".to_owned(),
            "chosen by the router role router".to_owned()
        )]
    );
    assert_eq!(
        turns(&s, session).len(),
        2,
        "the router's turn, then the looker's"
    );
    s.verify_all();
}

/// Attack (found in review): a plan inside a step fails, and the outer plan waited for ever
/// on that step. The inner plan's end ends the outer step, and the outer plan ends too.
#[test]
fn a_nested_plan_that_fails_ends_its_outer_plan_instead_of_hanging() {
    let outer = r#"{"turns": [
      [{"plan": {"steps": [{"id": "x", "role": "subplanner", "instruction": "plan again"}]}},
       {"deliver": "planned", "final": false}],
      [{"deliver": "not reached"}]]}"#;
    let inner = r#"{"turns": [
      [{"plan": {"steps": [{"id": "y", "role": "looker", "instruction": "look at y",
                            "validator": {"role": "nay"}}]}},
       {"deliver": "planned inside", "final": false}],
      [{"deliver": "not reached either"}]]}"#;
    let nay = r#"{"turns": [[{"deliver": "fail: never good enough"}]]}"#;
    let mut s = Stack::new(outer);
    roster(
        &mut s,
        &[("subplanner", inner.to_owned()), ("nay", nay.to_owned())],
    );
    start(&mut s);
    let done = s.wait_complete(s.submit("plan twice"), MINUTE);
    let said = done.deliverable.expect("deliverable");
    assert_eq!(said.content["error"], true);
    let text = said.content["text"].as_str().unwrap_or("");
    assert!(
        text.contains("x (failed): the plan ended without finishing: y (failed)"),
        "{text}"
    );
    s.verify_all();
}

/// Attack (found in review): a person held to a narrow writ plans, and the plan's steps —
/// new sessions whose instructions minato wrote — ran under no writ at all. A step works on
/// behalf of whoever submitted the request its plan serves, under their writ.
#[test]
fn a_plan_step_runs_under_the_submitters_writ() {
    let writer = r#"{"turns": [[
      {"tool": "fs.write", "args": {"path": "x.txt", "content": "wide"}},
      {"deliver": "wrote"}]]}"#;
    let planner = r#"{"turns": [
      [{"plan": {"steps": [{"id": "w", "role": "scribe", "instruction": "write x"}]}},
       {"deliver": "planned", "final": false}],
      [{"deliver": "all done"}]]}"#;
    let mut s = Stack::new(planner);
    let ana = s.new_approver("ana");
    let key: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&ana).expect("key")).expect("json");
    let issuers = format!(
        "[{{name = \"ana\", public_key = \"{}\"}}]",
        key["public_key"].as_str().expect("public_key")
    );
    roster(&mut s, &[("scribe", writer.to_owned())]);
    s.extra_env
        .push(("KURA_WRITS__ISSUERS".into(), issuers.clone()));
    let out = Command::new(bin("kura"))
        .args([
            "writ",
            "grant",
            "--holder",
            "user:oles",
            "--tool",
            "fs.list",
            "--db",
        ])
        .arg(&s.db)
        .arg("--key")
        .arg(&ana)
        .arg("--sealer-key")
        .arg(s.nats.seed(kura_runtime::identity::Role::Operator))
        .env("KURA_WRITS__ISSUERS", &issuers)
        .env_remove("KURA_SERVE_CONFIG")
        .output()
        .expect("kura writ grant");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let writ = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    start(&mut s);
    s.wait_complete(
        s.submit_with("plan a write", &["--author", "user:oles"]),
        MINUTE,
    );
    let (_, step) = steps(&s).remove(0);
    let errors: Vec<String> = records(&s, step)
        .into_iter()
        .filter(|r| r.record_type == RecordType::SysError)
        .map(|r| r.content["text"].as_str().unwrap_or("").to_owned())
        .collect();
    assert!(
        errors
            .iter()
            .any(|e| e.contains(&format!("outside writ {writ}'s scope"))),
        "{errors:?}"
    );
    s.verify_all();
}

/// Attack (issue 34, Medium): a role bound by a read-only writ (`role:boss`) plans a step
/// for a role no writ names. The step runs under the writ its planning turn ran under: its
/// write is refused, and nothing is written.
#[test]
fn a_role_bound_planners_step_for_an_unbound_role_is_refused() {
    let writer = r#"{"turns": [[
      {"tool": "fs.write", "args": {"path": "x.txt", "content": "shed"}},
      {"deliver": "wrote"}]]}"#;
    let planner = r#"{"turns": [
      [{"plan": {"steps": [{"id": "w", "role": "scribe", "instruction": "write x"}]}},
       {"deliver": "planned", "final": false}],
      [{"deliver": "all done"}]]}"#;
    let mut s = Stack::new(planner);
    let ana = s.new_approver("ana");
    let key: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&ana).expect("key")).expect("json");
    let issuers = format!(
        "[{{name = \"ana\", public_key = \"{}\"}}]",
        key["public_key"].as_str().expect("public_key")
    );
    roster(
        &mut s,
        &[("boss", planner.to_owned()), ("scribe", writer.to_owned())],
    );
    s.extra_env
        .push(("KURA_WRITS__ISSUERS".into(), issuers.clone()));
    let out = Command::new(bin("kura"))
        .args([
            "writ",
            "grant",
            "--holder",
            "role:boss",
            "--tool",
            "fs.list",
        ])
        .args(["--ceiling", "read", "--db"])
        .arg(&s.db)
        .arg("--key")
        .arg(&ana)
        .arg("--sealer-key")
        .arg(s.nats.seed(kura_runtime::identity::Role::Operator))
        .env("KURA_WRITS__ISSUERS", &issuers)
        .env_remove("KURA_SERVE_CONFIG")
        .output()
        .expect("kura writ grant");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let writ = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    start(&mut s);
    s.wait_complete(s.submit_with("plan a write", &["--role", "boss"]), MINUTE);
    let (_, step) = steps(&s).remove(0);
    let errors: Vec<String> = records(&s, step)
        .into_iter()
        .filter(|r| r.record_type == RecordType::SysError)
        .map(|r| r.content["text"].as_str().unwrap_or("").to_owned())
        .collect();
    assert!(
        errors.iter().any(|e| e.contains(&format!("writ {writ}"))),
        "the step ran under no writ: {errors:?}"
    );
    assert!(
        !s.path(&format!("ws/{step}/x.txt")).exists(),
        "the step's write ran"
    );
    s.verify_all();
}

/// A plan whose write step needs a person.
const PARKING: &str = r#"{"turns": [
  [{"plan": {"steps": [
      {"id": "a", "role": "looker", "instruction": "look at a"},
      {"id": "b", "role": "scribe", "instruction": "write the list"},
      {"id": "join", "role": "writer", "instruction": "sum up", "after": ["a", "b"]}]}},
   {"deliver": "planned", "final": false}],
  [{"deliver": "all done"}]
]}"#;

const SCRIBE: &str = r#"{"turns": [[
  {"tool": "fs.write", "args": {"path": "list.md", "content": "- rice\n"}},
  {"deliver": "wrote the list", "facts": ["the shopping list is in list.md"]}
]]}"#;

fn aegis(s: &Stack, args: &[&str]) -> (i32, String) {
    let out = Command::new(bin("aegis"))
        .args(args)
        .env("KURA_NATS_URL", s.nats.url())
        .env("KURA_NATS_CA", s.nats.ca())
        .env(
            "KURA_AEGIS__REPLY_KEY",
            s.nats.signer(kura_runtime::identity::Role::Aegis),
        )
        .env("KURA_AEGIS_KEY", s.path("oles.key"))
        .output()
        .expect("aegis");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

/// Across a plan, what single sessions promise still holds: a step's write parks for a
/// person without holding a worker (another step finishes meanwhile), the plan goes on once
/// she approves, memory is drawn from a step's deliverable, and a step's ledger can be forked.
#[test]
fn a_plan_step_parks_for_a_person_and_its_plan_goes_on() {
    let mut s = Stack::new(PARKING);
    std::fs::write(
        s.path("policy.toml"),
        "[defaults]\nread = \"allow\"\nwrite = \"ask\"\nexternal = \"allow\"\n",
    )
    .expect("policy");
    let key = s.path("oles.key");
    let out = Command::new(bin("aegis"))
        .args(["keygen", "--name", "oles", "--key"])
        .arg(&key)
        .output()
        .expect("keygen");
    assert!(out.status.success());
    s.add_approver("oles", &key);
    let k: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&key).expect("key")).expect("json");
    s.extra_env.push((
        "KURA_AEGIS__APPROVERS".into(),
        format!(
            "[{{ name = \"oles\", public_key = \"{}\" }}]",
            k["public_key"].as_str().expect("pk")
        ),
    ));
    roster(&mut s, &[("scribe", SCRIBE.to_owned())]);
    start(&mut s);
    let request = s.submit("plan and write");
    // b parks; a finishes meanwhile; nobody holds b's turn.
    s.wait_until("b to park and a to finish", MINUTE, |store| {
        let row: Option<(String, String)> = store
            .conn()
            .query_row(
                "SELECT (SELECT t.state FROM turns t JOIN plan_steps p ON p.session_id = t.session_id
                          WHERE p.step = 'b'),
                        (SELECT state FROM plan_steps WHERE step = 'a')",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .ok();
        row.is_some_and(|(b, a)| b == "waiting" && a == "done")
    });
    let (code, listed) = aegis(&s, &["pending", "--json"]);
    assert_eq!(code, 0, "{listed}");
    let pending: Vec<serde_json::Value> = serde_json::from_str(&listed).expect("json");
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0]["arguments"]["path"], "list.md", "{pending:?}");
    let id = pending[0]["request_id"].as_str().expect("id");
    let (code, said) = aegis(&s, &["approve", id, "--key", key.to_str().expect("utf8")]);
    assert_eq!(code, 0, "{said}");
    let done = s.wait_complete(request, MINUTE);
    assert_eq!(
        done.deliverable.expect("deliverable").content["text"],
        "all done"
    );
    // Memory from the step's deliverable.
    s.wait_until("mikado to remember the step's fact", MINUTE, |store| {
        store
            .conn()
            .query_row(
                "SELECT count(*) FROM records WHERE record_type = 'memory.fact'
                  AND content LIKE '%the shopping list is in list.md%'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .is_ok_and(|n| n >= 1)
    });
    // Any step's ledger can be forked and continued.
    let b = steps(&s)
        .into_iter()
        .find(|(id, _)| id == "b")
        .expect("b")
        .1;
    let b_out = turns(&s, b).remove(0).1;
    let forked = s.wait_complete(
        s.submit_with(
            "carry on from b",
            &["--from", &b_out.to_string(), "--role", "looker"],
        ),
        MINUTE,
    );
    assert_eq!(
        forked.deliverable.expect("deliverable").content["text"],
        "looked: carry on from b"
    );
    s.verify_all();
}

/// Issue 36: with a real model, the router was never shown the roster it chooses from and a
/// join after three steps was sent one of their deliverables. Here the router and the join
/// run on the OpenAI-compatible provider (a fake server speaking the wire format, which
/// records what it is shown): the router's request lists every role, and the join's holds
/// all three steps' deliverables, numbered.
#[test]
fn real_models_are_shown_the_roster_they_route_by_and_every_output_they_join() {
    let mut s = Stack::new(WRITER);
    let shown = std::sync::Arc::new(std::sync::Mutex::new(Vec::<serde_json::Value>::new()));
    let kept = shown.clone();
    let url = kura_testkit::openai::start((10, 5), move |body| {
        kept.lock().expect("lock").push(body.clone());
        let system = body["messages"][0]["content"].as_str().unwrap_or_default();
        let says = if system.starts_with("ROUTER") {
            "planner"
        } else {
            "summed up three looks"
        };
        serde_json::json!({"role": "assistant", "content": says})
    });
    let mut roles = Vec::new();
    // The scripted provider plays a session's turns by number: the router's was the first.
    let planner = PLANNER.replacen(
        "{\"turns\": [",
        "{\"turns\": [[{\"deliver\": \"(the router's turn)\"}],",
        1,
    );
    for (name, script) in [("looker", LOOKER), ("planner", planner.as_str())] {
        let path = s.path(&format!("{name}.json"));
        std::fs::write(&path, script).expect("script");
        roles.push(format!(
            "{{name = \"{name}\", script = \"{}\", system_prompt = \"You {name}.\"}}",
            path.display()
        ));
    }
    roles.push(
        "{name = \"writer\", provider = \"openai\", system_prompt = \"WRITER: you sum up.\"}"
            .into(),
    );
    roles.push(
        "{name = \"router\", provider = \"openai\", system_prompt = \"ROUTER: pick one role.\"}"
            .into(),
    );
    s.extra_env.extend([
        (
            "KURA_ROSTER__ROLES".into(),
            format!("[{}]", roles.join(", ")),
        ),
        ("KURA_ROSTER__ROUTER_ROLE".into(), "router".into()),
        ("KURA_PROVIDER__BASE_URL".into(), url),
        ("KURA_PROVIDER__MODEL".into(), "tiny".into()),
    ]);
    start(&mut s);
    let done = s.wait_complete(s.submit("plan the looks"), MINUTE);
    assert!(done.deliverable.is_some(), "{done:?}");
    let shown = shown.lock().expect("lock").clone();
    let user = |b: &serde_json::Value| {
        b["messages"][1]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let router = shown
        .iter()
        .find(|b| {
            b["messages"][0]["content"]
                .as_str()
                .is_some_and(|p| p.starts_with("ROUTER"))
        })
        .map(user)
        .expect("the router was asked");
    for role in [
        "- looker: You looker.",
        "- planner: You planner.",
        "- writer: WRITER: you sum up.",
    ] {
        assert!(
            router.contains(role),
            "the router was not shown {role:?}:\n{router}"
        );
    }
    let join = shown
        .iter()
        .map(user)
        .find(|u| u.starts_with("sum up"))
        .unwrap_or_else(|| panic!("the join was not asked; steps {:?}", steps(&s)));
    for (i, step) in ["a", "b", "c"].iter().enumerate() {
        assert!(
            join.contains(&format!("[{}] looked: look at {step}", i + 1)),
            "the join was not shown step {step}'s output:\n{join}"
        );
    }
}

/// People as tools inside a plan: a step's role asks a question (`person.ask`), the step
/// waits without holding a worker, a person answers with `aegis answer`, and the step's
/// `tool.result` is her answer, authored by her; the plan then finishes.
#[test]
fn a_plan_steps_question_is_answered_by_a_person_and_the_plan_goes_on() {
    let asker = r#"{"turns": [[
      {"tool": "person.ask", "args": {"question": "ship it today?", "choices": ["yes", "no"]}},
      {"deliver": "asked and answered"}]]}"#;
    let planner = r#"{"turns": [
      [{"plan": {"steps": [{"id": "q", "role": "asker", "instruction": "ask about shipping"}]}},
       {"deliver": "planned", "final": false}],
      [{"deliver": "all done"}]]}"#;
    let mut s = Stack::new(planner);
    s.trusted_approver("oles");
    roster(&mut s, &[("asker", asker.to_owned())]);
    s.extra_env.push((
        "KURA_TOOLS__ALLOW".into(),
        r#"["fs.*", "person.ask"]"#.into(),
    ));
    start(&mut s);
    let request = s.submit("decide about shipping");
    let mut asked = None;
    s.wait_until("the step's question put to people", MINUTE, |st| {
        asked = kura_work::approvals::asked(st)
            .ok()
            .and_then(|a| a.into_iter().find(|a| a.tool_name == "person.ask"));
        asked.is_some()
    });
    let id = asked.expect("asked").request_id.to_string();
    let (code, out) = aegis(&s, &["answer", &id, "yes"]);
    assert_eq!(code, 0, "{out}");
    let st = s.wait_complete(request, MINUTE);
    let delivered = st
        .deliverable
        .as_ref()
        .map(|d| d.content.to_string())
        .unwrap_or_default();
    assert!(delivered.contains("all done"), "{st:?}");
    let (_, step) = steps(&s).into_iter().next().expect("the step");
    let answers: Vec<proto::Record> = records(&s, step)
        .into_iter()
        .filter(|r| r.record_type == RecordType::ToolResult)
        .collect();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0].content["result"]["answer"], "yes");
    assert_eq!(answers[0].author_id, "user:oles");
}

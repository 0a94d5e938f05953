//! People as tools: an agent puts a question to its people (`person.ask` for hashi,
//! `ask_person` for an outside agent) and waits, holding no worker, for a signed answer —
//! given with `aegis answer`, held to the question's choices, authored by the person who
//! signed it. A forged answer, an answer outside the choices and a question the model
//! answers itself are refused; an unanswered question expires into a recorded refusal.

use std::process::Command;
use std::time::Duration;

use kura_runtime::identity::Role;
use kura_testkit::bin;
use kura_testkit::stack::{Stack, session_records};
use proto::record::RecordType;
use serde_json::{Value, json};

const MINUTE: Duration = Duration::from_secs(60);

/// A stack whose hashi may ask questions, with `ana` trusted to answer; `extra` env last.
fn question_stack(script: &Value, extra: &[(&str, &str)]) -> Stack {
    let mut s = Stack::new(&script.to_string());
    s.trusted_approver("ana");
    s.extra_env.push((
        "KURA_TOOLS__ALLOW".into(),
        r#"["fs.*", "person.ask"]"#.into(),
    ));
    s.extra_env.extend(
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    for d in ["aegis", "minato", "hashi"] {
        s.spawn(d, d);
    }
    s
}

/// `aegis answer REQUEST ANSWER` with the key of `who`: (exit code, output).
fn answer(s: &Stack, who: &str, request: &str, text: &str) -> (i32, String) {
    let out = Command::new(bin("aegis"))
        .args(["answer", request, text, "--key"])
        .arg(s.path(&format!("{who}.key")))
        .env("KURA_NATS_URL", s.nats.url())
        .env("KURA_NATS_CA", s.nats.ca())
        .env("KURA_AEGIS__REPLY_KEY", s.nats.signer(Role::Aegis))
        .output()
        .expect("aegis answer");
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The question waiting for people, once it is asked.
fn asked(s: &Stack) -> String {
    let mut found = None;
    s.wait_until("the question put to people", MINUTE, |st| {
        found = kura_work::approvals::asked(st)
            .ok()
            .and_then(|a| a.into_iter().find(|a| a.tool_name == "person.ask"));
        found.is_some()
    });
    found.expect("asked").request_id.to_string()
}

/// The `tool.result` records of a request's session.
fn results(s: &Stack, request: i64) -> Vec<proto::Record> {
    let st = s.wait_complete(request, MINUTE);
    session_records(&s.store(), st.session_id.expect("session"))
        .into_iter()
        .filter(|r| r.record_type == RecordType::ToolResult)
        .collect()
}

/// Attack: anyone on the bus answering in a trusted person's place, or an answer the
/// question does not offer.
#[test]
fn a_question_is_answered_only_by_a_trusted_persons_signed_answer_and_the_answer_is_theirs() {
    let script = json!({"turns": [[
        {"tool": "person.ask", "args": {"question": "which colour for the logo?", "choices": ["red", "blue"]}},
        {"deliver": "asked"}
    ]]});
    let s = question_stack(&script, &[]);
    // mallory may use the bus, but aegis does not trust her key.
    s.new_approver("mallory");
    let request = s.submit("pick a colour");
    let id = asked(&s);
    let (code, out) = answer(&s, "mallory", &id, "red");
    assert_ne!(code, 0, "a forged answer was taken: {out}");
    let (code, out) = answer(&s, "ana", &id, "green");
    assert_ne!(code, 0, "an answer outside the choices was taken: {out}");
    assert!(out.contains("choices"), "{out}");
    let (code, out) = answer(&s, "ana", &id, "blue");
    assert_eq!(code, 0, "{out}");
    let got = results(&s, request);
    assert_eq!(got.len(), 1, "{got:?}\n{}", s.logs());
    assert_eq!(got[0].content["status"], "success", "{}", got[0].content);
    assert_eq!(got[0].content["result"]["answer"], "blue");
    assert_eq!(
        got[0].author_id, "user:ana",
        "the answer is the person's word"
    );
    let verify = s.cli().run(&["verify", "--all"]);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
}

/// Attack: a model that writes the answer into its own question, to have it stand as a
/// person's.
#[test]
fn a_question_the_model_answers_itself_is_refused() {
    let script = json!({"turns": [[
        {"tool": "person.ask", "args": {"question": "may I delete the backups?", "answer": "yes"}},
        {"deliver": "asked"}
    ]]});
    let s = question_stack(&script, &[]);
    let got = results(&s, s.submit("tidy up"));
    assert_eq!(got.len(), 1, "{got:?}\n{}", s.logs());
    assert_eq!(got[0].content["status"], "error", "{}", got[0].content);
    assert!(
        got[0].content.to_string().contains("answered by a person"),
        "{}",
        got[0].content
    );
    assert_ne!(got[0].author_id, "user:ana");
}

#[test]
fn an_unanswered_question_expires_into_a_recorded_refusal() {
    let script = json!({"turns": [[
        {"tool": "person.ask", "args": {"question": "anyone there?"}},
        {"deliver": "nobody answered"}
    ]]});
    let s = question_stack(&script, &[("KURA_AEGIS__ASK_TIMEOUT_MS", "1500")]);
    let request = s.submit("ask into the void");
    let got = results(&s, request);
    assert_eq!(got.len(), 1, "{got:?}\n{}", s.logs());
    assert_eq!(got[0].content["status"], "error", "{}", got[0].content);
    let decided: Vec<Value> = {
        let st = s.wait_complete(request, MINUTE);
        session_records(&s.store(), st.session_id.expect("session"))
            .into_iter()
            .filter(|r| r.record_type == RecordType::ApprovalDecision)
            .map(|r| r.content)
            .collect()
    };
    assert!(
        decided
            .iter()
            .any(|d| d["by"] == "expiry" && d["outcome"] == "deny"),
        "the expiry is recorded: {decided:?}"
    );
}

#[test]
fn an_outside_agent_asks_a_person_and_waits_for_the_signed_answer() {
    let port = kura_testkit::free_port();
    let (s, token) = crate::agents::agent_stack_with(port, &[]);
    let post =
        |op: &str, body: Value| crate::agents::post(port, op, Some(&token), &body.to_string());
    let (status, started) = post("start_session", json!({"instruction": "choose a name"}));
    assert_eq!(status, 200, "{started}");
    let turn = started["turn_id"].as_str().expect("turn").to_owned();
    let (status, declared) = post(
        "ask_person",
        json!({"turn_id": turn, "question": "which name?", "choices": ["kura", "gura"]}),
    );
    assert_eq!(status, 200, "{declared}");
    assert_eq!(declared["decision"], "ask", "{declared}");
    let id = declared["request_id"].as_str().expect("request").to_owned();
    let (status, waiting) = post(
        "wait_decision",
        json!({"request_id": id, "timeout_ms": 100}),
    );
    assert_eq!(status, 200, "{waiting}");
    assert_ne!(waiting["state"], "approved", "{waiting}");
    let (code, out) = answer(&s, "ana", &id, "kura");
    assert_eq!(code, 0, "{out}");
    let (status, decided) = post(
        "wait_decision",
        json!({"request_id": id, "timeout_ms": 8000}),
    );
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["state"], "approved", "{decided}");
    assert_eq!(decided["edited_arguments"]["answer"], "kura", "{decided}");
    // The answer is the call's result in the agent's turn, authored by the person, once.
    let (_, again) = post(
        "wait_decision",
        json!({"request_id": id, "timeout_ms": 100}),
    );
    assert_eq!(again["state"], "approved", "{again}");
    let store = s.store();
    let session = started["session_id"]
        .as_str()
        .expect("session")
        .parse()
        .expect("id");
    let answers: Vec<proto::Record> = session_records(&store, session)
        .into_iter()
        .filter(|r| r.record_type == RecordType::ToolResult)
        .collect();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0].author_id, "user:ana");
    assert_eq!(answers[0].content["result"]["answer"], "kura");
}

/// Attack: an answer a person signed for one question, relayed as the answer to another.
#[test]
fn an_answer_signed_for_one_question_is_refused_for_another() {
    let port = kura_testkit::free_port();
    let (s, token) = crate::agents::agent_stack_with(port, &[]);
    let post =
        |op: &str, body: Value| crate::agents::post(port, op, Some(&token), &body.to_string());
    let (_, started) = post("start_session", json!({"instruction": "two questions"}));
    let turn = started["turn_id"].as_str().expect("turn").to_owned();
    let ask = |q: &str| {
        let (status, d) = post("ask_person", json!({"turn_id": turn, "question": q}));
        assert_eq!(status, 200, "{d}");
        d["request_id"]
            .as_str()
            .expect("request")
            .parse::<proto::RequestId>()
            .expect("id")
    };
    let (harmless, risky) = (ask("may I read the README?"), ask("may I wipe the disk?"));
    let at = aegis::client::Endpoint {
        url: s.nats.url(),
        subjects: proto::subjects::Subjects::default(),
        ca: Some(s.nats.ca()),
        reply_key: s.nats.signer(Role::Aegis),
        key_path: s.path("ana.key"),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let verdict = rt.block_on(async {
        let person = aegis::client::Person::connect(&at)
            .await
            .expect("ana connects");
        let mut yes = None;
        for _ in 0..200 {
            let mut args = serde_json::Map::new();
            args.insert("question".into(), "may I read the README?".into());
            args.insert("answer".into(), "yes".into());
            if let Ok(d) = person.sign(harmless, true, "", Some(args)).await {
                yes = Some(d);
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut relayed = yes.expect("ana signed an answer to the harmless question");
        relayed.request_id = risky;
        person.send(&relayed).await.expect("aegis's verdict")
    });
    assert!(
        !verdict.ok,
        "a relayed answer was taken: {}",
        verdict.message
    );
    let (_, still) = post(
        "wait_decision",
        json!({"request_id": risky.to_string(), "timeout_ms": 100}),
    );
    assert_ne!(still["state"], "approved", "{still}");
}

//! A question an agent put to people (`person.ask`), answered in the browser: the card shows
//! the question from the verified request, offers its choices, and signs the answer with the
//! person's key; the turn's `tool.result` is that answer, authored by her.

use kura_testkit::free_port;
use kura_testkit::stack::{Stack, session_records};
use proto::record::RecordType;
use serde_json::Value;

use super::MINUTE;
use super::browser::{enrolled, eval, type_into, until};

const SCRIPT: &str = r#"{"turns": [[
  {"tool": "person.ask", "args": {"question": "Which shelf for the rice?", "choices": ["top", "bottom"]}},
  {"deliver": "shelved"}
]]}"#;

#[test]
fn a_person_answers_a_question_from_the_browser() {
    let mut s = Stack::new(SCRIPT);
    s.extra_env.push((
        "KURA_TOOLS__ALLOW".into(),
        r#"["fs.*", "person.ask"]"#.into(),
    ));
    let port = free_port();
    let b = enrolled(&mut s, port);
    let request = s.submit("shelve the rice");
    let c = &b.c;
    let url = b.url.clone();
    b.run(async {
        c.goto(&format!("{url}/approvals"))
            .await
            .expect("approvals");
        let card = "document.querySelector('article.approval form.answer:not([hidden])')";
        until(c, "the question, verified", card).await;
        let question = eval(c, "document.querySelector('q.question').textContent").await;
        assert_eq!(question, Value::from("Which shelf for the rice?"));
        let choices = eval(
            c,
            "[...document.querySelectorAll('form.answer datalist option')].map(o => o.value)",
        )
        .await;
        assert_eq!(choices, serde_json::json!(["top", "bottom"]));
        type_into(c, "form.answer input[name=answer]", "bottom").await;
        let button = c
            .find(fantoccini::Locator::Css("form.answer button.answer"))
            .await
            .expect("answer button");
        button.click().await.expect("click");
        until(
            c,
            "the answer taken",
            "document.querySelector('article.approval')?.dataset.decided === 'ok'",
        )
        .await;
    });
    let st = s.wait_complete(request, MINUTE);
    let results: Vec<proto::Record> = session_records(&s.store(), st.session_id.expect("session"))
        .into_iter()
        .filter(|r| r.record_type == RecordType::ToolResult)
        .collect();
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(
        results[0].content["result"]["answer"], "bottom",
        "{}",
        results[0].content
    );
    assert_eq!(results[0].author_id, "user:alice");
}

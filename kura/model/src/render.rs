//! What a model is shown of its turn's sealed context ledger, as one text every provider
//! sends (the OpenAI-compatible one as the user message, a command as `prompt`): the
//! instruction, then what else the context holds, each part labelled, in one fixed order —
//! notes (`sys.context`: a router's roster, a step's notes), the verdicts it answers, the
//! deliverables it carries (a join's every step, or the previous turn's), and the memory
//! found for it with each record's id. Before this, a real model was shown only the
//! instruction and the last deliverable.

use proto::record::{Record, RecordType};

use crate::content_text;

/// The text of `context` a model is shown.
pub fn user_message(context: &[Record]) -> String {
    let of = |t: RecordType| context.iter().filter(move |r| r.record_type == t);
    let mut out = of(RecordType::TaskInstruction)
        .next_back()
        .map(content_text)
        .unwrap_or_default();
    let notes: Vec<String> = of(RecordType::SysContext).map(note).collect();
    section(&mut out, "Notes for this task:", &notes);
    let verdicts: Vec<String> = of(RecordType::TaskVerdict).map(verdict).collect();
    section(&mut out, "The verdict on your last deliverable:", &verdicts);
    let delivered: Vec<String> = of(RecordType::TaskDeliverable).map(content_text).collect();
    // A validator's context names the deliverable it judges (minato's note).
    let judging = of(RecordType::SysContext).any(|r| r.content.get("validates").is_some());
    match &delivered[..] {
        [] => {}
        [one] if judging => {
            out.push_str("\n\nThe deliverable you judge:\n");
            out.push_str(one);
        }
        // One: the previous turn's (the wording every provider has always used).
        [one] => {
            out.push_str("\n\nYour output from the previous turn:\n");
            out.push_str(one);
        }
        many => {
            let labelled: Vec<String> = many
                .iter()
                .enumerate()
                .map(|(i, d)| format!("[{}] {d}", i + 1))
                .collect();
            section(&mut out, "The outputs this step builds on:", &labelled);
        }
    }
    let memory: Vec<String> = context
        .iter()
        .filter(|r| {
            matches!(
                r.record_type,
                RecordType::MemoryFact | RecordType::MemoryDecision
            )
        })
        .map(|r| {
            let kind = match r.record_type {
                RecordType::MemoryDecision => "decision",
                _ => "fact",
            };
            format!("- {kind}: {} (record {})", content_text(r), r.record_id)
        })
        .collect();
    section(&mut out, "What Kura remembers that may help:", &memory);
    out
}

/// Appends `items` under `title`, when there are any.
fn section(out: &mut String, title: &str, items: &[String]) {
    if items.is_empty() {
        return;
    }
    out.push_str("\n\n");
    out.push_str(title);
    for i in items {
        out.push('\n');
        out.push_str(i);
    }
}

/// A `sys.context` note: its text, and a router's roster role by role.
fn note(r: &Record) -> String {
    let mut text = content_text(r);
    if let Some(roles) = r.content.get("roles").and_then(serde_json::Value::as_array) {
        text = proto::content::text_of(&r.content)
            .unwrap_or_default()
            .to_owned();
        for role in roles {
            let name = role.get("name").and_then(serde_json::Value::as_str);
            let prompt = role
                .get("system_prompt")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default();
            if let Some(name) = name {
                text.push_str(&format!("\n- {name}: {prompt}"));
            }
        }
    }
    text
}

/// A verdict: passed or failed, by whom, and why.
fn verdict(r: &Record) -> String {
    let pass = r.content.get("pass").and_then(serde_json::Value::as_bool);
    let by = r
        .content
        .get("by")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("the validator");
    let reason = r
        .content
        .get("reason")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    match pass {
        Some(true) => format!("passed by {by}: {reason}"),
        _ => format!("failed by {by}: {reason}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rec(t: RecordType, content: serde_json::Value) -> Record {
        Record {
            record_id: proto::RecordId::new(),
            hash: String::new(),
            record_type: t,
            content,
            author_id: "agent:t".into(),
            metadata: Default::default(),
            created_at: String::new(),
        }
    }

    /// Issue 36: a real model was shown only the instruction and the last deliverable — not
    /// the memory, the roster or a join's other outputs its context ledger holds.
    #[test]
    fn the_model_is_shown_memory_roster_verdicts_and_every_joined_output() {
        let fact = rec(
            RecordType::MemoryFact,
            json!({"text": "the spare key is in the blue pot"}),
        );
        let context = vec![
            rec(
                RecordType::TaskInstruction,
                json!({"text": "sum up the two reports"}),
            ),
            rec(
                RecordType::SysContext,
                json!({"text": "Pick the role that should do this task.", "roles": [
                    {"name": "writer", "keywords": [], "system_prompt": "You write."},
                    {"name": "checker", "keywords": [], "system_prompt": "You check."}]}),
            ),
            rec(
                RecordType::TaskDeliverable,
                json!({"text": "report x: 3 errors"}),
            ),
            rec(
                RecordType::TaskDeliverable,
                json!({"text": "report y: all clear"}),
            ),
            rec(
                RecordType::TaskVerdict,
                json!({"pass": false, "deliverable": "d", "by": "role checker", "reason": "too long"}),
            ),
            fact.clone(),
        ];
        let shown = user_message(&context);
        for part in [
            "sum up the two reports",
            "- writer: You write.",
            "- checker: You check.",
            "[1] report x: 3 errors",
            "[2] report y: all clear",
            "failed by role checker: too long",
            "- fact: the spare key is in the blue pot",
            &fact.record_id.to_string(),
        ] {
            assert!(shown.contains(part), "{part:?} missing from:\n{shown}");
        }
        // One fixed order: instruction, notes, verdicts, outputs, memory.
        let at = |p: &str| shown.find(p).expect("present");
        assert!(at("sum up") < at("writer") && at("writer") < at("too long"));
        assert!(
            at("too long") < at("[1]") && at("[2]") < at("blue pot"),
            "{shown}"
        );
        assert_eq!(user_message(&context), shown, "deterministic");
    }

    /// Issue 36: a validator was shown the deliverable as "Your output from the previous
    /// turn", with no word that it judges it. Minato's note says so, and the deliverable is
    /// labelled as the one judged.
    #[test]
    fn a_validator_is_told_it_judges_and_what() {
        let d = rec(RecordType::TaskDeliverable, json!({"text": "the summary"}));
        let context = [
            rec(
                RecordType::TaskInstruction,
                json!({"text": "summarise the notes"}),
            ),
            rec(
                RecordType::SysContext,
                json!({"text": "You judge the deliverable below against the task above.", "validates": d.record_id}),
            ),
            d,
        ];
        let shown = user_message(&context);
        assert!(shown.contains("You judge the deliverable"), "{shown}");
        assert!(
            shown.contains("The deliverable you judge:\nthe summary"),
            "{shown}"
        );
        assert!(!shown.contains("previous turn"), "{shown}");
    }

    /// The simple cases read as they always did: the instruction alone, or with the
    /// previous turn's output.
    #[test]
    fn an_instruction_and_one_previous_output_read_as_before() {
        let i = rec(
            RecordType::TaskInstruction,
            json!({"text": "count the files"}),
        );
        assert_eq!(user_message(std::slice::from_ref(&i)), "count the files");
        let d = rec(RecordType::TaskDeliverable, json!({"text": "3 files"}));
        assert_eq!(
            user_message(&[i, d]),
            "count the files\n\nYour output from the previous turn:\n3 files"
        );
    }
}

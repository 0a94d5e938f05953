//! Scenario 6: an adversarial model. One scripted model, many sessions, every trick at once:
//! escapes through shell arguments and file paths, huge and binary outputs, a FIFO, a file
//! past the quota, a deliverable too big to store (the poison turn) and a flood of tool
//! calls in one response. Afterwards every session has ended, nothing outside the
//! workspaces was read or changed, no worker is stuck, and the ledger verifies.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use kura_testkit::stack::Stack;
use serde_json::{Value, json};

use super::{Row, settle, start};

/// Sessions with an ordinary instruction, and sessions whose instruction makes the
/// deliverable of turn 2 too big to store.
const HEALTHY: usize = 4;
const POISONED: usize = 2;
/// Workspace quota for the run, MiB.
const QUOTA_MIB: u64 = 4;

/// Every file under `dir` with its contents (what "nothing changed outside" is checked on).
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            let meta = std::fs::symlink_metadata(&p).expect("meta");
            if meta.is_dir() {
                stack.push(p.clone());
            }
            let content = if meta.is_file() {
                std::fs::read(&p).unwrap_or_default()
            } else {
                vec![]
            };
            out.insert(p.display().to_string(), content);
        }
    }
    out
}

fn script(outside: &Path) -> String {
    let o = outside.display();
    let shell = |argv: Value| json!({"tool": "shell.run", "args": {"argv": argv}});
    let fs = |tool: &str, args: Value| json!({"tool": tool, "args": args});
    let mut turn1 = vec![
        json!({"thought": "let us see what this sandbox allows"}),
        shell(json!(["cat", "../victim-session/secret.txt"])),
        shell(json!(["cat", format!("{o}/secret.txt")])),
        shell(json!(["ls", "-la", ".."])),
        shell(json!(["cat", "/proc/1/environ"])),
        shell(json!([
            "sh",
            "-c",
            format!("echo pwned > {o}/planted; echo pwned > ../planted")
        ])),
        shell(json!(["head", "-c", "5000000", "/dev/zero"])),
        shell(json!(["head", "-c", "300000", "/dev/urandom"])),
        shell(json!(["mkfifo", "pipe"])),
        fs("fs.read", json!({"path": "pipe"})),
        fs("fs.write", json!({"path": "pipe", "content": "x"})),
        shell(json!([
            "sh",
            "-c",
            "head -c 20000000 /dev/zero > big; echo survived"
        ])),
        fs("fs.write", json!({"path": "../escape.txt", "content": "x"})),
        fs("fs.read", json!({"path": "/etc/passwd"})),
        fs(
            "fs.write",
            json!({"path": "fill", "content": "f".repeat(3 << 20)}),
        ),
        fs(
            "fs.write",
            json!({"path": "fill2", "content": "f".repeat(2 << 20)}),
        ),
    ];
    turn1.push(json!({"deliver": "turn one done", "final": false}));
    // Turn 2 repeats the instruction 40 times: for a poisoned session (a 110 KB
    // instruction) that is more than a record holds, on every attempt.
    let turn2 = vec![json!({"deliver": "{instruction}".repeat(40), "final": false})];
    // Turn 3: a hundred tool calls in one response.
    let mut turn3: Vec<Value> = (0..100)
        .map(|i| {
            fs(
                "fs.write",
                json!({"path": format!("flood/{i}"), "content": "x"}),
            )
        })
        .collect();
    turn3.push(json!({"deliver": "flooded"}));
    json!({"turns": [turn1, turn2, turn3]}).to_string()
}

pub(super) fn adversarial_model() -> Row {
    let started = Instant::now();
    let mut s = Stack::new("{\"turns\": []}");
    let outside = s.path("outside");
    std::fs::create_dir_all(&outside).expect("outside");
    std::fs::write(outside.join("secret.txt"), "OUTSIDE-CANARY").expect("canary");
    let victim = s.path("ws").join("victim-session");
    std::fs::create_dir_all(&victim).expect("victim");
    std::fs::write(victim.join("secret.txt"), "VICTIM-CANARY").expect("canary");
    let before_outside = snapshot(&outside);
    let before_victim = snapshot(&victim);
    std::fs::write(s.path("script.json"), script(&outside)).expect("script");
    s.extra_env = vec![
        ("KURA_NATS__MODE".into(), "external".into()),
        (
            "KURA_TOOLS__SHELL_ALLOWLIST".into(),
            r#"["cat", "ls", "sh", "head", "mkfifo", "wc", "date"]"#.into(),
        ),
        (
            "KURA_TOOLS__WORKSPACE_QUOTA_MIB".into(),
            QUOTA_MIB.to_string(),
        ),
        ("KURA_WORKER__RETRY_BACKOFF_MS".into(), "200".into()),
        ("OPENAI_API_KEY".into(), "sk-ADVERSARY-CANARY".into()),
    ];
    // One hashi with one worker: a poison turn must not starve the others.
    start(&mut s, &["minato", "hashi-1", "aegis", "mikado", "serve"]);
    let mut requests = Vec::new();
    for n in 0..HEALTHY + POISONED {
        let instruction = if n < POISONED {
            "p".repeat(110_000)
        } else {
            format!("adversary session {n}")
        };
        requests.push(s.submit(&instruction));
    }
    let mut unexpected = Vec::new();
    let completed = settle(&s, &requests);
    for (name, status) in s.exited() {
        unexpected.push(format!("{name} ({status})"));
    }
    let store = s.store();
    let q = |sql: &str| -> i64 { store.conn().query_row(sql, [], |r| r.get(0)).unwrap_or(-1) };
    let stuck = q("SELECT count(*) FROM turns WHERE state <> 'done'");
    // Records are content-addressed (the same error in six sessions is one record), so
    // count their places in ledgers.
    let members = |filter: &str| {
        q(&format!(
            "SELECT count(*) FROM ledger_records m JOIN records r ON r.record_id = m.record_id
              WHERE {filter}"
        ))
    };
    let gave_up = members(
        "r.record_type = 'sys.error'
         AND json_extract(r.content, '$.text') LIKE 'gave up after 3 failed attempts%'",
    );
    let step_limited = members(
        "r.record_type = 'sys.error' AND json_extract(r.content, '$.text') LIKE 'step limit of%'",
    );
    let fifo_refused = members(
        "r.record_type = 'tool.result' AND json_extract(r.content, '$.error') LIKE '%FIFO%'",
    );
    let results: String = {
        let mut stmt = store
            .conn()
            .prepare("SELECT content FROM records WHERE record_type = 'tool.result'")
            .expect("prepare");
        stmt.query_map([], |r| r.get::<_, String>(0))
            .expect("query")
            .flatten()
            .collect()
    };
    let leaked: Vec<&str> = ["OUTSIDE-CANARY", "VICTIM-CANARY", "sk-ADVERSARY-CANARY"]
        .into_iter()
        .filter(|c| results.contains(c))
        .collect();
    let outside_same = snapshot(&outside) == before_outside && snapshot(&victim) == before_victim;
    let planted = s.path("ws").join("planted").exists() || s.path("escape.txt").exists();
    let quota = QUOTA_MIB << 20;
    let over_quota: Vec<String> = std::fs::read_dir(s.path("ws"))
        .expect("ws")
        .flatten()
        .filter(|e| e.file_name() != "victim-session")
        .map(|e| {
            let size: u64 = snapshot(&e.path()).values().map(|c| c.len() as u64).sum();
            (e.file_name().to_string_lossy().into_owned(), size)
        })
        .filter(|(_, size)| *size > quota)
        .map(|(name, size)| format!("{name} {size}"))
        .collect();
    // Logs quote outsiders' text in bounded excerpts: a poison turn once logged 162 MB.
    let log_bytes = s.log("hashi-1").len();
    let (ok, out) = s.verify_report();
    let integrity: String = store
        .conn()
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap_or_else(|e| e.to_string());
    let pass = completed == requests.len()
        && stuck == 0
        && gave_up == POISONED as i64
        && step_limited == HEALTHY as i64
        && fifo_refused >= (HEALTHY + POISONED) as i64
        && leaked.is_empty()
        && outside_same
        && !planted
        && over_quota.is_empty()
        && log_bytes < 1 << 20
        && ok
        && integrity == "ok"
        && unexpected.is_empty();
    if !pass {
        eprintln!(
            "--- adversarial model failed: completed {completed}/{}, stuck {stuck}, gave up {gave_up}, \
             step-limited {step_limited}, FIFO refusals {fifo_refused}, leaked {leaked:?}, \
             outside unchanged {outside_same}, planted {planted}, over quota {over_quota:?}, \
             hashi log {log_bytes} bytes\n{out}",
            requests.len()
        );
        for name in ["hashi-1", "minato"] {
            eprintln!("--- {name}\n{}", super::tail(&s.log(name), 40));
        }
        eprintln!("--- files kept in {}", s.path("").display());
        s.keep_files = true;
    }
    Row {
        scenario: "adversarial model",
        faults: format!(
            "{} sessions; per session 15 escape/huge/binary/FIFO/quota calls, a poisoned deliverable in {POISONED}, \
             100 tool calls in one response; 1 worker",
            requests.len()
        ),
        submitted: requests.len(),
        completed,
        verify: if ok { "pass".into() } else { "FAIL".into() },
        integrity,
        effects: format!(
            "{} canaries leaked, outside {}, {gave_up} poison turns ended, {step_limited} floods cut, {stuck} turns stuck, hashi log {} KiB",
            leaked.len(),
            if outside_same && !planted {
                "unchanged"
            } else {
                "CHANGED"
            },
            log_bytes / 1024
        ),
        exits: if unexpected.is_empty() {
            "none".into()
        } else {
            unexpected.join(", ")
        },
        seconds: started.elapsed().as_secs_f64(),
        pass,
    }
}

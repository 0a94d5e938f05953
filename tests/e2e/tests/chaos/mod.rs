//! The fault suite: "nothing lost" as a tested claim. Real daemons on a real nats-server and
//! one real SQLite file, while the harness SIGKILLs daemons, kills NATS, runs many writer
//! processes at once, fills the disk and sprays garbage on every subject. After each
//! scenario it checks that every submitted session completed, `kura verify --all` passes,
//! `PRAGMA integrity_check` is ok, every side-effecting tool call ran at most once, and no
//! daemon exited unless the harness killed it — and prints the table (`RELIABILITY.md`).
//!
//! Ignored by default (it takes a minute or two). Run it with `./scripts/chaos` (long form)
//! or `./scripts/chaos --ci` (the bounded form CI runs). Knobs, all optional:
//! `KURA_CHAOS_KILLS` (SIGKILLs in the kill scenario, default 50), `KURA_CHAOS_OUTAGES`
//! (NATS outages, default 10), `KURA_CHAOS_SEED` (to replay a run), `KURA_CHAOS_REPORT`
//! (write the Markdown table there), `KURA_CHAOS_ONLY` (run the scenarios whose name
//! contains it), `KURA_CHAOS_PROVIDER=openai` (the sessions' model is the OpenAI-compatible
//! provider on a fake chat-completions server, not the scripted one).

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kura_runtime::identity::Role;
use kura_testkit::bin;
use kura_testkit::stack::Stack;

mod adversary;
mod fleet;

/// How long every submitted session gets to complete once the faults stop.
const SETTLE: Duration = Duration::from_secs(180);

/// A tiny deterministic PRNG (xorshift64*), so a failing run can be replayed from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One line of the table.
struct Row {
    scenario: &'static str,
    faults: String,
    submitted: usize,
    completed: usize,
    verify: String,
    integrity: String,
    effects: String,
    exits: String,
    seconds: f64,
    pass: bool,
}

/// Two turns per session: a side-effecting external call (a test program that appends its
/// call id to a file outside the workspace), a write, a read, and deliverables.
fn script(sidefx: &Path) -> String {
    let p = sidefx.display();
    format!(
        r#"{{"turns": [
  [{{"thought": "record the effect, then write a note"}},
   {{"tool": "shell.run", "args": {{"argv": ["{p}"]}}}},
   {{"tool": "fs.write", "args": {{"path": "note.txt", "content": "written once"}}}},
   {{"deliver": "turn one done", "final": false}}],
  [{{"tool": "fs.read", "args": {{"path": "note.txt"}}}},
   {{"deliver": "done: {{instruction}}\nFACT: chaos sessions write a note"}}]
]}}"#
    )
}

/// The session above as a model on the wire answers it (`KURA_CHAOS_PROVIDER=openai`): the
/// effect, then the write, then the deliverable, by how many tool results the request
/// holds. One turn: the OpenAI-compatible provider's answer is always final.
fn wire_model(body: &serde_json::Value, sidefx: &str) -> serde_json::Value {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let results = messages.iter().filter(|m| m["role"] == "tool").count();
    let call = |name: &str, args: serde_json::Value| {
        serde_json::json!([{"id": format!("call_{results}"), "type": "function",
            "function": {"name": name, "arguments": args.to_string()}}])
    };
    match results {
        0 => {
            serde_json::json!({"role": "assistant", "content": "record the effect, then write a note",
            "tool_calls": call("shell_run", serde_json::json!({"argv": [sidefx]}))})
        }
        1 => serde_json::json!({"role": "assistant", "content": null,
            "tool_calls": call("fs_write", serde_json::json!({"path": "note.txt", "content": "written once"}))}),
        _ => {
            let user = messages
                .get(1)
                .and_then(|m| m["content"].as_str())
                .unwrap_or_default();
            let instruction = user.lines().next().unwrap_or_default();
            serde_json::json!({"role": "assistant",
                "content": format!("done: {instruction}\nFACT: chaos sessions write a note")})
        }
    }
}

/// A stack wired for the suite: the scripted session above (or, with
/// `KURA_CHAOS_PROVIDER=openai`, the same on the wire), the side-effect program on the
/// shell allowlist, mikado using the harness's nats-server.
fn stack() -> (Stack, PathBuf) {
    let mut s = Stack::new("{\"turns\": []}");
    let sidefx = s.path("sidefx");
    let effects = s.path("effects.log");
    std::fs::write(
        &sidefx,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$KURA_CALL_ID\" >> '{}'\nsleep 0.05\n",
            effects.display()
        ),
    )
    .expect("write sidefx");
    let mut perms = std::fs::metadata(&sidefx).expect("meta").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&sidefx, perms).expect("chmod");
    std::fs::write(&effects, "").expect("effects log");
    std::fs::write(s.path("script.json"), script(&sidefx)).expect("script");
    s.extra_env = vec![
        ("KURA_NATS__MODE".into(), "external".into()),
        (
            "KURA_TOOLS__SHELL_ALLOWLIST".into(),
            format!("[\"{}\"]", sidefx.display()),
        ),
        // The sandbox lets the test program run and append to its log, nothing more.
        (
            "KURA_TOOLS__SANDBOX_READ_ONLY".into(),
            format!("[\"{}\"]", sidefx.display()),
        ),
        (
            "KURA_TOOLS__SANDBOX_READ_WRITE".into(),
            format!("[\"{}\"]", effects.display()),
        ),
    ];
    if std::env::var("KURA_CHAOS_PROVIDER").as_deref() == Ok("openai") {
        let argv = sidefx.display().to_string();
        let url = kura_testkit::openai::start((40, 10), move |body| wire_model(body, &argv));
        s.extra_env.extend([
            ("KURA_PROVIDER__KIND".into(), "openai".into()),
            ("KURA_PROVIDER__BASE_URL".into(), url),
            ("KURA_PROVIDER__MODEL".into(), "chaos".into()),
        ]);
    }
    (s, effects)
}

fn start(s: &mut Stack, instances: &[&str]) {
    for i in instances {
        s.spawn(kura_testkit::stack::binary(i), i);
    }
    for i in instances.iter().filter(|i| !i.starts_with("serve")) {
        s.wait_log(i, "NATS connected", Duration::from_secs(60));
    }
}

/// Waits (up to [`SETTLE`]) for the requests; returns how many completed.
fn settle(s: &Stack, requests: &[i64]) -> usize {
    let store = s.store();
    let deadline = Instant::now() + SETTLE;
    loop {
        let done = requests
            .iter()
            .filter(|r| {
                kura_work::request_status(store.conn(), **r)
                    .map(|st| st.complete)
                    .unwrap_or(false)
            })
            .count();
        if done == requests.len() || Instant::now() > deadline {
            return done;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The checks every scenario ends with.
fn check(
    s: &mut Stack,
    effects: &Path,
    scenario: &'static str,
    faults: String,
    requests: &[i64],
    unexpected: &mut Vec<String>,
    started: Instant,
) -> Row {
    let completed = settle(s, requests);
    for (name, status) in s.exited() {
        unexpected.push(format!("{name} ({status})"));
    }
    let (ok, out) = s.verify_report();
    let verify = if ok {
        "pass".to_owned()
    } else {
        format!(
            "FAIL: {}",
            out.lines()
                .find(|l| l.contains("FAIL") || l.contains("fail"))
                .unwrap_or("")
        )
    };
    let store = s.store();
    let integrity: Vec<String> = store
        .conn()
        .prepare("PRAGMA integrity_check")
        .and_then(|mut st| {
            st.query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()
        })
        .unwrap_or_else(|e| vec![e.to_string()]);
    let integrity = integrity.join("; ");
    // Side effects: the program's own log against what the ledger says happened.
    let ran: Vec<String> = std::fs::read_to_string(effects)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for id in &ran {
        *seen.entry(id.as_str()).or_default() += 1;
    }
    let repeated = seen.values().filter(|n| **n > 1).count();
    let results: Vec<(String, String)> = store
        .conn()
        .prepare(
            "SELECT json_extract(r.content, '$.call_id'), json_extract(r.content, '$.status')
             FROM records r JOIN records c
               ON c.record_type = 'tool.call'
              AND json_extract(c.content, '$.call_id') = json_extract(r.content, '$.call_id')
             WHERE r.record_type = 'tool.result'
               AND json_extract(c.content, '$.tool_name') = 'shell.run'",
        )
        .and_then(|mut st| {
            st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<Vec<_>, _>>()
        })
        .expect("tool results");
    let missing = results
        .iter()
        .filter(|(id, st)| st == "success" && !seen.contains_key(id.as_str()))
        .count();
    let unknown = results.iter().filter(|(_, st)| st == "unknown").count();
    let mut effects_ok = repeated == 0 && missing == 0 && !ran.is_empty();
    let mut effects_text = format!(
        "{} ran, {repeated} repeated, {unknown} unknown, {missing} missing",
        seen.len()
    );
    // On the wire, every session's answers came from the server, each with its prompt's hash.
    if std::env::var("KURA_CHAOS_PROVIDER").as_deref() == Ok("openai") {
        let answers: i64 = store
            .conn()
            .query_row(
                "SELECT count(*) FROM ledger_records lr JOIN records r ON r.record_id = lr.record_id
                 WHERE r.record_type = 'model.prompt'",
                [],
                |r| r.get(0),
            )
            .unwrap_or(0);
        // Each session asks three times (the effect, the write, the deliverable) at least.
        effects_ok &= answers >= 3 * completed as i64;
        effects_text.push_str(&format!(
            "; {answers} model answers over the wire, each after its model.prompt"
        ));
    }
    let exits = if unexpected.is_empty() {
        "none".to_owned()
    } else {
        unexpected.join(", ")
    };
    let pass = completed == requests.len()
        && ok
        && integrity == "ok"
        && effects_ok
        && unexpected.is_empty();
    if !pass {
        eprintln!("--- {scenario} failed");
        for r in requests {
            if !kura_work::request_status(store.conn(), *r).is_ok_and(|st| st.complete) {
                eprintln!("{}", explain(&store, *r));
            }
        }
        for (name, _) in &s.children {
            eprintln!("--- {name} (last lines)\n{}", tail(&s.log(name), 40));
        }
        // Keep the evidence: the database and logs stay on disk.
        eprintln!("--- files kept in {}", s.dir.path().display());
        s.keep_files = true;
    }
    Row {
        scenario,
        faults,
        submitted: requests.len(),
        completed,
        verify,
        integrity,
        effects: effects_text,
        exits,
        seconds: started.elapsed().as_secs_f64(),
        pass,
    }
}

/// Everything the store says about a request that did not complete.
fn explain(store: &kura_store::Store, request: i64) -> String {
    let q = |sql: &str| -> String {
        let mut stmt = match store.conn().prepare(sql) {
            Ok(s) => s,
            Err(e) => return e.to_string(),
        };
        let cols = stmt.column_count();
        let rows = stmt.query_map([request], |r| {
            (0..cols)
                .map(|i| {
                    r.get_ref(i).map(|v| match v {
                        rusqlite::types::ValueRef::Null => "NULL".to_owned(),
                        rusqlite::types::ValueRef::Integer(n) => n.to_string(),
                        rusqlite::types::ValueRef::Text(t) => {
                            String::from_utf8_lossy(t).into_owned()
                        }
                        other => format!("{other:?}"),
                    })
                })
                .collect::<Result<Vec<_>, _>>()
                .map(|v| v.join(" | "))
        });
        match rows {
            Ok(rows) => rows
                .map(|r| r.unwrap_or_else(|e| e.to_string()))
                .collect::<Vec<_>>()
                .join("\n    "),
            Err(e) => e.to_string(),
        }
    };
    format!(
        "request {request} did not complete:\n  request: {}\n  turns: {}\n  approvals: {}\n  output records: {}",
        q(
            "SELECT request_seq, session_id, created_at, accepted_at FROM requests WHERE request_seq = ?1"
        ),
        q(
            "SELECT turn_id, seq, state, waiting_on, epoch, lease_owner, lease_until_ms, claims, done_seq, completed_by, output_ledger_id FROM turns WHERE request_seq = ?1"
        ),
        q(
            "SELECT a.request_id, a.tool_name, a.state, a.rule, a.started_epoch, a.created_at, a.decided_at FROM approvals a JOIN turns t ON t.turn_id = a.turn_id WHERE t.request_seq = ?1"
        ),
        q(
            "SELECT m.position, r.record_type, substr(r.content, 1, 120), l.state FROM turns t JOIN ledgers l ON l.ledger_id = t.output_ledger_id JOIN ledger_records m ON m.ledger_id = l.ledger_id JOIN records r ON r.record_id = m.record_id WHERE t.request_seq = ?1 ORDER BY t.seq, m.position"
        ),
    )
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Restarts any daemon that died without being killed (and notes it).
fn reap(s: &mut Stack, unexpected: &mut Vec<String>) {
    for (name, status) in s.exited() {
        unexpected.push(format!("{name} ({status})"));
        s.spawn(kura_testkit::stack::binary(&name), &name);
    }
}

/// Scenario 1. SIGKILL a random daemon at random moments; restart it like systemd would.
fn daemon_kills(rng: &mut Rng) -> Row {
    let started = Instant::now();
    let (mut s, effects) = stack();
    let daemons = ["minato", "hashi-1", "hashi-2", "aegis", "mikado", "serve"];
    start(&mut s, &daemons);
    let target = env_num("KURA_CHAOS_KILLS", 50);
    let mut requests = Vec::new();
    let mut unexpected = Vec::new();
    let mut per: HashMap<&str, u32> = HashMap::new();
    for n in 0..target {
        if n % 2 == 0 {
            requests.push(s.submit(&format!("kill run, session {n}")));
        }
        std::thread::sleep(rng.ms(20, 250));
        reap(&mut s, &mut unexpected);
        let victim = daemons[rng.below(daemons.len() as u64) as usize];
        s.signal(victim, "KILL");
        s.wait_exit(victim, Duration::from_secs(10));
        *per.entry(victim).or_default() += 1;
        std::thread::sleep(rng.ms(0, 150));
        s.spawn(kura_testkit::stack::binary(victim), victim);
    }
    let mut who: Vec<String> = per.iter().map(|(k, v)| format!("{k} {v}")).collect();
    who.sort();
    let faults = format!("{target} SIGKILLs ({})", who.join(", "));
    check(
        &mut s,
        &effects,
        "daemon kills",
        faults,
        &requests,
        &mut unexpected,
        started,
    )
}

/// Scenario 2. Kill and restart nats-server repeatedly, some outages far longer than the poll interval.
fn nats_outages(rng: &mut Rng) -> Row {
    let started = Instant::now();
    let (mut s, effects) = stack();
    start(&mut s, &["minato", "hashi-1", "hashi-2", "aegis", "mikado"]);
    let target = env_num("KURA_CHAOS_OUTAGES", 10);
    let lengths = [150, 400, 1_200, 3_000];
    let mut requests = Vec::new();
    let mut unexpected = Vec::new();
    let mut total = Duration::ZERO;
    let mut longest = Duration::ZERO;
    for n in 0..target {
        requests.push(s.submit(&format!("outage run, session {n}")));
        std::thread::sleep(rng.ms(50, 400));
        s.nats.kill();
        // Work submitted while NATS is down must still get done.
        requests.push(s.submit(&format!("outage run, during outage {n}")));
        let outage = Duration::from_millis(lengths[n as usize % lengths.len()]) + rng.ms(0, 100);
        std::thread::sleep(outage);
        total += outage;
        longest = longest.max(outage);
        s.nats.restart();
        reap(&mut s, &mut unexpected);
    }
    let faults = format!(
        "{target} outages, {:.1} s down in all, longest {:.1} s (poll interval 0.2 s)",
        total.as_secs_f64(),
        longest.as_secs_f64()
    );
    check(
        &mut s,
        &effects,
        "NATS outages",
        faults,
        &requests,
        &mut unexpected,
        started,
    )
}

/// Scenario 3. Many writer processes on one file: 5 hashi workers, minato, aegis, mikado, and five
/// submitters running `minato submit` at the same time.
fn many_writers() -> Row {
    let started = Instant::now();
    let (mut s, effects) = stack();
    let daemons = [
        "minato", "hashi-1", "hashi-2", "hashi-3", "hashi-4", "hashi-5", "aegis", "mikado",
    ];
    start(&mut s, &daemons);
    let per_submitter = 8;
    let requests: Vec<i64> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..5)
            .map(|w| {
                let s = &s;
                scope.spawn(move || {
                    (0..per_submitter)
                        .map(|i| s.submit(&format!("writer {w}, session {i}")))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("submitter"))
            .collect()
    });
    let mut unexpected = Vec::new();
    let completed = settle(&s, &requests);
    let workers: i64 = s
        .store()
        .conn()
        .query_row("SELECT count(DISTINCT completed_by) FROM turns", [], |r| {
            r.get(0)
        })
        .expect("workers");
    let retries = s.logs().matches("work step failed").count();
    let faults = format!(
        "13 writer processes (5 hashi, minato, aegis, mikado, 5 submitters); \
         {workers} workers completed turns; {retries} retried steps"
    );
    let mut row = check(
        &mut s,
        &effects,
        "5+ writers",
        faults,
        &requests,
        &mut unexpected,
        started,
    );
    row.pass &= workers >= 5 && completed == requests.len();
    row
}

/// Unmounts the tmpfs when dropped (lazily: daemons may still have files open).
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Scenario 4. Fill the disk under the database: writes fail with a clear error, nothing is
/// corrupted, work resumes when space returns.
fn disk_full() -> Row {
    let started = Instant::now();
    let (mut s, effects) = stack();
    let mnt = s.path("small-disk");
    std::fs::create_dir_all(&mnt).expect("mkdir");
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=12m", "tmpfs"])
        .arg(&mnt)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !mounted {
        return Row {
            scenario: "disk full",
            faults: "SKIPPED: cannot mount a tmpfs here (needs root)".into(),
            submitted: 0,
            completed: 0,
            verify: "-".into(),
            integrity: "-".into(),
            effects: "-".into(),
            exits: "-".into(),
            seconds: 0.0,
            pass: true,
        };
    }
    let _mount = Mount(mnt.clone());
    s.db = mnt.join("kura.db");
    kura_store::Store::create(&s.db, &kura_store::StoreOptions::default())
        .expect("create db on tmpfs");
    start(&mut s, &["minato", "hashi-1", "hashi-2", "aegis", "mikado"]);
    let mut requests: Vec<i64> = (0..3)
        .map(|i| s.submit(&format!("before full {i}")))
        .collect();
    settle(&s, &requests);
    // Work in flight, then the disk fills up. The WAL is truncated first, so the next
    // writes need new blocks (a WAL that already has room would hide the full disk).
    requests.extend((0..4).map(|i| s.submit(&format!("in flight {i}"))));
    let _ = s
        .store()
        .conn()
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
    let filler = mnt.join("filler");
    let mut f = std::fs::File::create(&filler).expect("filler");
    let chunk = vec![0u8; 64 * 1024];
    while f.write_all(&chunk).and_then(|()| f.flush()).is_ok() {}
    let _ = f.sync_all();
    drop(f);
    std::thread::sleep(Duration::from_secs(3));
    // A new submission is refused with a clear one-line error and exit 2; nothing half-written.
    let out = Command::new(bin("minato"))
        .args(["submit", "while full", "--json"])
        .env("KURA_DB", &s.db)
        .env("KURA_NATS_URL", s.nats.url())
        .env("KURA_NATS_SEED", s.nats.seed(Role::Submit))
        .output()
        .expect("submit");
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    let refused =
        out.status.code() == Some(2) && stderr.lines().count() == 1 && stderr.contains("full");
    let full_errors = s.logs().matches("disk is full").count();
    let mut unexpected = Vec::new();
    reap(&mut s, &mut unexpected);
    // Space returns.
    std::fs::remove_file(&filler).expect("remove filler");
    let faults = format!(
        "12 MiB tmpfs filled with work in flight; submit refused: {}; {full_errors} \
         \"disk is full\" errors logged, retried after space returned",
        if refused {
            format!("yes (`{stderr}`)")
        } else {
            format!("NO: {:?} {stderr}", out.status.code())
        }
    );
    let mut row = check(
        &mut s,
        &effects,
        "disk full",
        faults,
        &requests,
        &mut unexpected,
        started,
    );
    row.pass &= refused && full_errors > 0;
    row
}

/// An anonymous client speaking the raw wire protocol (no TLS, no nkey) tries to publish
/// `messages`; returns what the server said. It must refuse before any message is read.
fn publish_unauthenticated(port: u16, messages: &[(String, Vec<u8>)]) -> String {
    let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return "connection refused".into();
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut said = String::new();
    let mut line = String::new();
    let _ = reader.read_line(&mut line);
    if line.contains("\"tls_required\":true") {
        said.push_str("INFO tls_required; ");
    }
    let mut w = stream;
    let _ = w.write_all(b"CONNECT {\"verbose\":false,\"pedantic\":false}\r\n");
    for (subject, payload) in messages.iter().take(20) {
        let _ = w.write_all(format!("PUB {subject} {}\r\n", payload.len()).as_bytes());
        let _ = w.write_all(payload);
        let _ = w.write_all(b"\r\n");
    }
    let _ = w.write_all(b"PING\r\n");
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        said.push_str(line.trim());
        said.push(' ');
        if line.starts_with("PONG") {
            break;
        }
    }
    said
}

/// Every kind of bad message, for one subject.
fn garbage(subject: &str) -> Vec<(String, Vec<u8>)> {
    let id = uuid::Uuid::now_v7();
    let payloads: Vec<Vec<u8>> = vec![
        b"not json".to_vec(),
        vec![0xff, 0xfe, 0x00, 0x13],
        Vec::new(),
        b"{}".to_vec(),
        b"null".to_vec(),
        b"{\"turn_id\": 5}".to_vec(),
        format!(r#"{{"turn_id":"{id}","ledger_id":"{id}","record_id":"{id}","request_id":"{id}","session_id":"{id}","extra":1}}"#).into_bytes(),
        format!(r#"{{"turn_id":"{id}"}}{}"#, " ".repeat(2048)).into_bytes(),
        vec![b'['; 100_000],
        vec![b'x'; 512 * 1024],
    ];
    payloads
        .into_iter()
        .map(|p| (subject.to_owned(), p))
        .collect()
}

/// Scenario 5. Garbage, oversized and unknown-field messages on every subject the daemons listen on.
fn garbage_everywhere() -> Row {
    let started = Instant::now();
    let (mut s, effects) = stack();
    start(
        &mut s,
        &["minato", "hashi-1", "hashi-2", "aegis", "mikado", "serve"],
    );
    let subjects = proto::subjects::Subjects::default();
    let listened = [
        subjects.worker_dispatch(),
        subjects.worker_complete(),
        subjects.session_create(),
        subjects.session_complete(),
        subjects.record_written(),
        subjects.tool_approve(),
        subjects.approval_decide(),
        subjects.approval_pending(),
    ];
    let all: Vec<(String, Vec<u8>)> = listened.iter().flat_map(|sub| garbage(sub)).collect();
    // Idle first: garbage must not touch the store at all. Three senders: an anonymous
    // client (refused before a byte is read), a hostile operator key (may publish anything)
    // and a hostile `minato submit` key (may publish only new-session doorbells).
    std::thread::sleep(Duration::from_millis(300));
    let before = kura_testkit::stack::session_records_count(&s);
    let anonymous = publish_unauthenticated(s.nats.port, &all);
    // The server wants TLS and a key first: the plain CONNECT and PUBs never get a PONG.
    let anonymous_refused =
        anonymous.starts_with("INFO tls_required") && !anonymous.contains("PONG");
    let mut sent = kura_testkit::publish_as(&s.nats, Role::Operator, &all);
    sent += kura_testkit::publish_as(&s.nats, Role::Submit, &all);
    std::thread::sleep(Duration::from_millis(1_000));
    let after = kura_testkit::stack::session_records_count(&s);
    let rejected = s.logs().matches("rejected doorbell").count();
    // Then garbage while real work flows.
    let mut requests = Vec::new();
    for n in 0..10 {
        requests.push(s.submit(&format!("garbage run, session {n}")));
        let role = if n % 2 == 0 {
            Role::Operator
        } else {
            Role::Submit
        };
        sent += kura_testkit::publish_as(&s.nats, role, &all);
    }
    let mut unexpected = Vec::new();
    let faults = format!(
        "{sent} bad messages on {} subjects from an operator and a submit key; anonymous \
         client refused: {} (`{}` then closed); store unchanged while idle: {}; {rejected} rejections \
         logged in the idle round",
        listened.len(),
        if anonymous_refused { "yes" } else { "NO" },
        anonymous.trim().chars().take(60).collect::<String>(),
        if before == after { "yes" } else { "NO" }
    );
    let mut row = check(
        &mut s,
        &effects,
        "garbage on every subject",
        faults,
        &requests,
        &mut unexpected,
        started,
    );
    row.pass &= before == after && rejected > 0 && anonymous_refused;
    row
}

fn table(rows: &[Row], seed: u64) -> String {
    let mut out = String::from(
        "| scenario | faults injected | sessions completed | `kura verify --all` | integrity_check | side effects (shell.run) | unexpected exits | time | result |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {}/{} | {} | {} | {} | {} | {:.0} s | {} |\n",
            r.scenario,
            r.faults.replace('|', "\\|"),
            r.completed,
            r.submitted,
            r.verify,
            r.integrity,
            r.effects,
            r.exits,
            r.seconds,
            if r.pass { "PASS" } else { "FAIL" }
        ));
    }
    out.push_str(&format!(
        "\nSeed: {seed} (replay with `KURA_CHAOS_SEED={seed}`).\n"
    ));
    out
}

#[test]
#[ignore = "the fault suite takes minutes; run ./scripts/chaos"]
fn chaos_nothing_is_lost() {
    let seed = env_num(
        "KURA_CHAOS_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            | 1,
    );
    eprintln!("chaos seed {seed}");
    let mut rng = Rng(seed);
    // `KURA_CHAOS_ONLY=disk` (a substring of a scenario's name) runs just that one.
    let only = std::env::var("KURA_CHAOS_ONLY").unwrap_or_default();
    type Scenario = fn(&mut Rng) -> Row;
    let scenarios: [(&str, Scenario); 7] = [
        ("daemon kills", daemon_kills),
        ("NATS outages", nats_outages),
        ("5+ writers", |_| many_writers()),
        ("disk full", |_| disk_full()),
        ("garbage on every subject", |_| garbage_everywhere()),
        ("adversarial model", |_| adversary::adversarial_model()),
        ("fleet", fleet::fleet_kills),
    ];
    let rows: Vec<Row> = scenarios
        .iter()
        .filter(|(name, _)| name.contains(only.as_str()))
        .map(|(_, run)| run(&mut rng))
        .collect();
    assert!(
        !rows.is_empty(),
        "no scenario matches KURA_CHAOS_ONLY={only:?}"
    );
    let text = table(&rows, seed);
    println!("{text}");
    if let Ok(path) = std::env::var("KURA_CHAOS_REPORT")
        && !path.is_empty()
    {
        std::fs::write(&path, &text).expect("write report");
    }
    let failed: Vec<&str> = rows
        .iter()
        .filter(|r| !r.pass)
        .map(|r| r.scenario)
        .collect();
    assert!(failed.is_empty(), "scenarios failed: {failed:?}\n{text}");
}

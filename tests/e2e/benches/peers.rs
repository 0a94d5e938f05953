//! Kura beside LangGraph (`./scripts/bench --peers`): the same deterministic 10-step agent
//! turn — thought → tool call → tool result, three times, then the deliverable; no model —
//! on Kura's real daemons and on LangGraph's `SqliteSaver` (`scripts/peers/langgraph_turn.py`,
//! run by the Python in `KURA_PEERS_PYTHON`), once with the promise Kura makes (WAL +
//! synchronous=FULL + durability="sync") and once with LangGraph's defaults. The runs are
//! interleaved (Kura, fair, default, Kura, …) and every figure is the median over the
//! repetitions of each run's own median, with the spread. Prints a Markdown table.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use kura_testkit::bin;
use kura_testkit::stack::Stack;

/// Three rounds of thought → `fs.list` → result, then the deliverable: ten records a turn.
const SCRIPT: &str = r#"{"turns": [[
  {"thought": "step 1: list the notes"}, {"tool": "fs.list", "args": {}},
  {"thought": "step 2: list the notes"}, {"tool": "fs.list", "args": {}},
  {"thought": "step 3: list the notes"}, {"tool": "fs.list", "args": {}},
  {"deliver": "listed the notes"}
]]}"#;
const STEPS: usize = 10;

/// One repetition's figures for one side.
#[derive(Default, Clone)]
struct Run {
    turn_ms: f64,
    waited_ms: f64,
    steps_per_s: f64,
    bytes_per_step: f64,
    history_bytes: f64,
    readback_ms: f64,
    readback_all_ms: f64,
    approve_ms: f64,
    /// From a person already connected: Kura's console page; LangGraph has only its resume.
    approve_page_ms: f64,
    rss_mib: f64,
    rss_after_read_mib: f64,
}

struct Sizes {
    turns: usize,
    sessions: usize,
    history_turns: usize,
    approvals: usize,
}

fn checkpointed_bytes(db: &Path) -> f64 {
    if let Ok(c) = rusqlite::Connection::open(db) {
        let _ = c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
    }
    ["", "-wal"]
        .iter()
        .map(|x| {
            std::fs::metadata(format!("{}{x}", db.display()))
                .map(|m| m.len())
                .unwrap_or(0)
        })
        .sum::<u64>() as f64
}

fn session_of(s: &Stack, request: i64) -> String {
    kura_work::request_status(s.store().conn(), request)
        .expect("status")
        .session_id
        .expect("accepted")
        .to_string()
}

fn kura_run(z: &Sizes) -> Run {
    let mut r = Run::default();
    let mut s = stack(SCRIPT, 5_000);
    // The long history first, alone in the database, so its size is its own.
    let first = s.submit("history 0");
    wait_all(&s, &[first], Duration::from_secs(60));
    let session = session_of(&s, first);
    for i in 1..z.history_turns {
        let q = s.submit_with(&format!("history {i}"), &["--session", &session]);
        wait_all(&s, &[q], Duration::from_secs(60));
    }
    r.history_bytes = checkpointed_bytes(&s.db);
    // Read it back as a person would: every record with its content, from a fresh process.
    let mut reads = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let out = Command::new(bin("kura"))
            .args(["log", &session, "--records", "--json", "--db"])
            .arg(&s.db)
            .output()
            .expect("kura log");
        reads.push(t.elapsed().as_secs_f64() * 1000.0);
        assert!(out.status.success(), "kura log failed");
        let steps = String::from_utf8_lossy(&out.stdout)
            .matches("\"agent.thought\"")
            .count();
        assert!(
            steps >= z.history_turns * 3,
            "kura log showed {steps} thoughts"
        );
    }
    r.readback_ms = pct(&mut reads, 0.5);
    r.readback_all_ms = r.readback_ms;

    // One turn at a time: the turn itself, and what `minato submit --wait` makes a user wait.
    let t0 = turn_latencies_ms(&s).len();
    for i in 0..z.turns {
        let q = s.submit(&format!("one at a time {i}"));
        wait_all(&s, &[q], Duration::from_secs(60));
    }
    let mut lat = turn_latencies_ms(&s);
    assert!(lat.len() >= t0 + z.turns);
    // Only this phase's turns: the history's turns ran first.
    lat.drain(..t0.min(lat.len()));
    r.turn_ms = pct(&mut lat, 0.5);
    let mut waited = Vec::new();
    for i in 0..z.turns {
        let t = Instant::now();
        let (status, _) = s.submit_and_wait(&format!("waited for {i}"));
        assert!(status.success(), "submit --wait failed\n{}", s.logs());
        waited.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    r.waited_ms = pct(&mut waited, 0.5);

    // Many sessions in flight.
    let before = checkpointed_bytes(&s.db);
    let t = Instant::now();
    let requests = submit_many(&s, z.sessions, "burst", true);
    wait_all(&s, &requests, Duration::from_secs(600));
    r.steps_per_s = (z.sessions * STEPS) as f64 / t.elapsed().as_secs_f64();
    r.bytes_per_step = (checkpointed_bytes(&s.db) - before) / (z.sessions * STEPS) as f64;
    r.rss_mib = pids(&s)
        .into_iter()
        .map(|(_, p)| rss_kib(p).0 as f64 / 1024.0)
        .sum();
    r.rss_after_read_mib = r.rss_mib;
    s.shutdown_cleanly();

    let approvals = approval_round_trip(z.approvals);
    r.approve_ms = approvals.cli.0;
    r.approve_page_ms = approvals.console.0;
    r
}

fn langgraph_run(python: &str, mode: &str, dir: &Path, z: &Sizes) -> Run {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/peers/langgraph_turn.py");
    let out = Command::new(python)
        .arg(&script)
        .args(["--mode", mode, "--dir"])
        .arg(dir)
        .args(["--turns", &z.turns.to_string()])
        .args(["--sessions", &z.sessions.to_string()])
        .args(["--history-turns", &z.history_turns.to_string()])
        .args(["--approvals", &z.approvals.to_string()])
        .output()
        .expect("run the LangGraph side");
    assert!(
        out.status.success(),
        "LangGraph side failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("its JSON");
    let f = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let med = |k: &str| {
        let mut xs: Vec<f64> = v[k]
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
            .unwrap_or_default();
        pct(&mut xs, 0.5)
    };
    Run {
        turn_ms: med("turn_ms"),
        waited_ms: med("turn_ms"),
        approve_ms: med("approve_ms"),
        approve_page_ms: med("approve_ms"),
        steps_per_s: f("steps_per_s"),
        bytes_per_step: f("bytes_per_step"),
        history_bytes: f("history_bytes"),
        readback_ms: f("readback_latest_ms"),
        readback_all_ms: f("readback_all_ms"),
        rss_mib: f("peak_rss_turns_kib") / 1024.0,
        rss_after_read_mib: f("peak_rss_kib") / 1024.0,
    }
}

/// "median (min–max)" of one field over the repetitions.
fn spread(runs: &[Run], f: impl Fn(&Run) -> f64) -> (f64, String) {
    let mut xs: Vec<f64> = runs.iter().map(f).collect();
    let m = pct(&mut xs, 0.5);
    let (lo, hi) = (xs[0], xs[xs.len() - 1]);
    let fmt = |x: f64| {
        if x >= 100.0 {
            format!("{x:.0}")
        } else if x >= 10.0 {
            format!("{x:.1}")
        } else {
            format!("{x:.2}")
        }
    };
    (m, format!("{} ({}–{})", fmt(m), fmt(lo), fmt(hi)))
}

fn main() {
    let Some(python) = std::env::var_os("KURA_PEERS_PYTHON") else {
        eprintln!(
            "set KURA_PEERS_PYTHON to a Python with langgraph (./scripts/bench --peers does)"
        );
        std::process::exit(2);
    };
    let python = python.to_string_lossy().into_owned();
    let quick = std::env::var_os("KURA_BENCH_QUICK").is_some();
    let z = if quick {
        Sizes {
            turns: 10,
            sessions: 20,
            history_turns: 10,
            approvals: 3,
        }
    } else {
        Sizes {
            turns: 50,
            sessions: 200,
            history_turns: 100,
            approvals: 20,
        }
    };
    let reps = if quick { 1 } else { 3 };
    let scratch = tempfile::tempdir().expect("scratch");
    let (mut kura, mut fair, mut default) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..reps {
        eprintln!("== repetition {} of {reps}", rep + 1);
        kura.push(kura_run(&z));
        fair.push(langgraph_run(
            &python,
            "fair",
            &scratch.path().join(format!("fair{rep}")),
            &z,
        ));
        default.push(langgraph_run(
            &python,
            "default",
            &scratch.path().join(format!("default{rep}")),
            &z,
        ));
    }

    let mut rows = Vec::new();
    let mut row = |figure: &str,
                   f: &dyn Fn(&Run) -> f64,
                   unit: &str,
                   lower: bool,
                   target: &str,
                   want: Option<f64>| {
        let (k, ks) = spread(&kura, f);
        let (l, ls) = spread(&fair, f);
        let (_, ds) = spread(&default, f);
        let ratio = k / l;
        let met = match want {
            Some(w) if lower => {
                if ratio <= w {
                    "yes"
                } else {
                    "no"
                }
            }
            Some(w) => {
                if ratio >= w {
                    "yes"
                } else {
                    "no"
                }
            }
            None => "-",
        };
        rows.push(format!(
            "| {figure} | {ks} {unit} | {ls} {unit} | {ds} {unit} | {ratio:.2} | {target} | {met} |"
        ));
    };
    row(
        "a 10-step turn, one at a time (Kura: minato accepted → output sealed; LangGraph: `invoke`)",
        &|r| r.turn_ms,
        "ms",
        true,
        "Kura <= 0.35 × LangGraph fair",
        Some(0.35),
    );
    row(
        "what the user waits for (Kura: `minato submit --wait`, process start → deliverable printed; LangGraph: `invoke`)",
        &|r| r.waited_ms,
        "ms",
        true,
        "<= 1.2",
        Some(1.2),
    );
    row(
        &format!(
            "steps/s with {} sessions in flight (Kura: 2 hashi workers; LangGraph: 32 threads, one saver)",
            z.sessions
        ),
        &|r| r.steps_per_s,
        "steps/s",
        false,
        "Kura >= LangGraph fair",
        Some(1.0),
    );
    row(
        "bytes on disk per step (those sessions; WAL checkpointed)",
        &|r| r.bytes_per_step,
        "B",
        true,
        "-",
        None,
    );
    row(
        &format!(
            "database after one {}-step history",
            z.history_turns * STEPS
        ),
        &|r| r.history_bytes / 1_048_576.0,
        "MiB",
        true,
        "-",
        None,
    );
    row(
        "read back that history (Kura: `kura log --records --json`, a fresh process; LangGraph: `get_state`, the latest state, in process)",
        &|r| r.readback_ms,
        "ms",
        true,
        "-",
        None,
    );
    row(
        "… LangGraph's every checkpoint (`get_state_history`; Kura: the same `kura log`)",
        &|r| r.readback_all_ms,
        "ms",
        true,
        "-",
        None,
    );
    row(
        "human approval: approve started → the tool ran (Kura: `aegis approve`, a signed decision from a fresh process over TLS; LangGraph: `invoke(Command(resume=…))` in process)",
        &|r| r.approve_ms,
        "ms",
        true,
        "- (context: a fresh process pays its start and login)",
        None,
    );
    row(
        "… from a person already connected (Kura: the console page they are logged in to signs the decision, `kura serve` relays it to aegis; LangGraph: the same in-process resume)",
        &|r| r.approve_page_ms,
        "ms",
        true,
        "Kura <= 5 ms",
        None,
    );
    row(
        "peak RSS while running turns (Kura: the six daemons together; LangGraph: its process)",
        &|r| r.rss_mib,
        "MiB",
        true,
        "-",
        None,
    );
    row(
        "… after reading the history back",
        &|r| r.rss_after_read_mib,
        "MiB",
        true,
        "-",
        None,
    );
    // Held in milliseconds, not as a ratio: LangGraph's resume is in-process.
    {
        let (name, figure) = ("from a person already connected", |r: &Run| {
            r.approve_page_ms
        });
        let (a, _) = spread(&kura, figure);
        if let Some(row) = rows.iter_mut().find(|r| r.contains(name)) {
            *row = row.replace(
                "| Kura <= 5 ms | - |",
                &format!("| Kura <= 5 ms | {} |", if a <= 5.0 { "yes" } else { "no" }),
            );
        }
    }
    println!(
        "| figure (median of {reps} interleaved runs, min–max) | Kura | LangGraph, fair (WAL, synchronous=FULL, durability=\"sync\") | LangGraph, defaults (durability=\"async\") | Kura / LangGraph fair | target | met |"
    );
    println!("|---|---|---|---|---|---|---|");
    for r in rows {
        println!("{r}");
    }
}

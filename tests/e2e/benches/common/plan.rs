//! The plan bench: a plan of N independent one-tool steps, run as sub-sessions on two hashi
//! workers, against the same N steps as one session's sequential turns — both in one stack,
//! alternated, each step with the same simulated model time.

use std::time::{Duration, Instant};

use kura_testkit::stack::{self, Stack};

use super::{DAEMONS, pct, wait_all};

/// Simulated model time per answer: a step's model speaks twice (the call, the deliverable).
/// Without it the figure would be all bookkeeping, which no real model is.
pub const MODEL_MS: u64 = 50;

/// Wall time (ms, median of `reps`) of `n` steps as a plan and as sequential turns.
pub fn plan_wall(n: usize, reps: usize) -> (f64, f64) {
    let step = format!(
        r#"[{{"tool": "fs.list", "args": {{}}, "delay_ms": {MODEL_MS}}}, {{"deliver": "looked: {{instruction}}", "delay_ms": {MODEL_MS}}}]"#
    );
    let ids: Vec<String> = (0..n).map(|i| format!("s{i}")).collect();
    let steps: Vec<String> = ids
        .iter()
        .map(|id| format!(r#"{{"id": "{id}", "role": "looker", "instruction": "look at {id}"}}"#))
        .collect();
    let planner = format!(
        r#"{{"turns": [[{{"plan": {{"steps": [{}]}}}}, {{"deliver": "planned", "final": false}}], [{{"deliver": "all looked"}}]]}}"#,
        steps.join(", ")
    );
    // The same steps as one session's turns: each asks for the next, the last is final.
    let serial_turns: Vec<String> = (0..n)
        .map(|i| {
            let last = i + 1 == n;
            format!(
                r#"[{{"tool": "fs.list", "args": {{}}, "delay_ms": {MODEL_MS}}}, {{"deliver": "looked {i}", "final": {last}, "delay_ms": {MODEL_MS}}}]"#
            )
        })
        .collect();
    let serial = format!(r#"{{"turns": [{}]}}"#, serial_turns.join(", "));
    let mut s = Stack::new(&planner);
    let mut roles = Vec::new();
    for (name, script) in [
        ("looker", format!(r#"{{"turns": [{step}]}}"#)),
        ("serial", serial),
    ] {
        let path = s.path(&format!("{name}.json"));
        std::fs::write(&path, script).expect("script");
        roles.push(format!(
            "{{name = \"{name}\", script = \"{}\"}}",
            path.display()
        ));
    }
    s.extra_env = vec![
        ("KURA_NATS__MODE".into(), "external".into()),
        ("KURA_POLL_INTERVAL_MS".into(), "5000".into()),
        ("KURA_WORKER__LEASE_MS".into(), "30000".into()),
        ("KURA_MINATO__MAX_TURNS".into(), (n + 2).to_string()),
        (
            "KURA_ROSTER__ROLES".into(),
            format!("[{}]", roles.join(", ")),
        ),
        ("RUST_LOG".into(), "warn".into()),
    ];
    for d in DAEMONS {
        s.spawn(stack::binary(d), d);
    }
    std::thread::sleep(Duration::from_secs(2));
    let (mut planned, mut sequential) = (Vec::new(), Vec::new());
    let time = |s: &Stack, extra: &[&str]| {
        let t = Instant::now();
        let r = s.submit_with("look at them all", extra);
        wait_all(s, &[r], Duration::from_secs(120));
        t.elapsed().as_secs_f64() * 1000.0
    };
    for _ in 0..reps {
        planned.push(time(&s, &[]));
        sequential.push(time(&s, &["--role", "serial"]));
    }
    s.shutdown_cleanly();
    (pct(&mut planned, 0.5), pct(&mut sequential, 0.5))
}

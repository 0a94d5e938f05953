//! The fleet scenario: Pi A (the whole stack, publishing) and Pi B (receiving) on a 3-node
//! JetStream hub, while the harness SIGKILLs hub nodes and A's publisher (`kura serve`)
//! under load. Afterwards everything A acknowledged is done and verified, B's replica holds
//! all of A's leaves with the same hashes and verifies, and the hub holds each of A's
//! ledgers exactly once, in order.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use kura_store::replica::logged_hash;
use kura_store::{Store, StoreOptions};
use kura_testkit::hub::{FleetPi, Hub, note_key};

use super::{Rng, Row, check, env_num, reap, stack, start};

/// Scenario: kills of hub nodes and of the publisher while sessions run.
pub fn fleet_kills(rng: &mut Rng) -> Row {
    let started = Instant::now();
    let mut hub = Hub::start(3, &["pi-a", "pi-b"]);
    let (mut s, effects) = stack();
    s.nats.set_hub(Some(hub.link("pi-a")));
    s.nats.restart();
    let (log_key, log_vkey) = note_key(s.dir.path(), "log.key", "pi-a", false);
    let (_, witness_vkey) = note_key(s.dir.path(), "witness.key", "pi-a.witness", true);
    let mut a = FleetPi {
        name: "pi-a",
        s,
        log_key,
        log_vkey,
        witness_vkey,
    };
    let mut b = FleetPi::new("pi-b", &hub, "{\"turns\": []}");
    a.configure(&[]);
    b.configure(&[&a]);
    b.s.spawn("kura", "serve");
    let daemons = ["minato", "hashi-1", "hashi-2", "aegis", "serve"];
    start(&mut a.s, &daemons);

    let target = env_num("KURA_CHAOS_KILLS", 50) / 2;
    let mut requests = Vec::new();
    let mut unexpected = Vec::new();
    let mut per: HashMap<String, u32> = HashMap::new();
    for n in 0..target {
        requests.push(a.s.submit(&format!("fleet run, session {n}")));
        std::thread::sleep(rng.ms(50, 300));
        reap(&mut a.s, &mut unexpected);
        // One victim at a time: a hub node (the cluster keeps a majority) or the publisher.
        let victim = rng.below(4);
        if victim < 3 {
            hub.kill_node(victim as u16);
            std::thread::sleep(rng.ms(100, 600));
            hub.start_node(victim as u16);
            *per.entry(format!("hub-{}", victim + 1)).or_default() += 1;
        } else {
            a.s.signal("serve", "KILL");
            a.s.wait_exit("serve", Duration::from_secs(10));
            std::thread::sleep(rng.ms(0, 300));
            a.s.spawn("kura", "serve");
            *per.entry("serve".into()).or_default() += 1;
        }
    }
    let mut who: Vec<String> = per.iter().map(|(k, v)| format!("{k} {v}")).collect();
    who.sort();
    let faults = format!("{target} SIGKILLs under load ({})", who.join(", "));
    let mut row = check(
        &mut a.s,
        &effects,
        "fleet: hub nodes and publisher killed",
        faults,
        &requests,
        &mut unexpected,
        started,
    );
    // The replica catches up with everything A sealed, leaf for leaf.
    let deadline = Instant::now() + Duration::from_secs(120);
    while b.replica_size("pi-a") < a.size() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let n = a.size();
    let got = b.replica_size("pi-a");
    let origin = a.s.store();
    let same = Store::open(b.replica_path("pi-a"), &StoreOptions::default())
        .map(|r| (0..got).all(|i| logged_hash(&r, i).ok() == logged_hash(&origin, i).ok()))
        .unwrap_or(false);
    let verified = std::process::Command::new(kura_testkit::bin("kura"))
        .args(["verify", "--all", "--db"])
        .arg(b.replica_path("pi-a"))
        .output()
        .is_ok_and(|o| o.status.success());
    let indexes = hub.ledger_indexes("pi-a");
    let gaps = (0..n).filter(|i| !indexes.contains(i)).count();
    let duplicates = indexes.len() - {
        let mut d = indexes.clone();
        d.dedup();
        d.len()
    };
    let alarm = b.s.path("replicas/pi-a.alarm").exists();
    row.effects.push_str(&format!(
        "; replica {got}/{n} leaves, same hashes: {}, verifies: {}; hub: {gaps} gaps, {duplicates} duplicates{}",
        if same { "yes" } else { "NO" },
        if verified { "yes" } else { "NO" },
        if alarm { ", ALARM" } else { "" }
    ));
    let ok = got == n && same && verified && gaps == 0 && duplicates == 0 && !alarm;
    if !ok {
        eprintln!("--- pi-b serve\n{}", super::tail(&b.s.log("serve"), 60));
        a.s.keep_files = true;
    }
    row.pass &= ok;
    row
}

//! Workspace trees beside git in the same run: recording the tree after one changed file in
//! a workspace of 1,000 files / 50 MB (Kura's snapshot, with its index, against `git add -A
//! && git write-tree` with git's index), restoring the 50 MB workspace into an empty
//! directory (Kura's restore against `git checkout` of the same tree), and the bytes one
//! file's change adds to the store.
//!
//! Run it with `./scripts/bench`, or `cargo bench -p kura-e2e --bench files`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kura_objects::{Index, Limits, Objects, restore, snapshot};

const FILES: usize = 1000;
const FILE_BYTES: usize = 50 * 1024;

fn git(dir: &Path, work: &Path, script: &str) -> String {
    let out = Command::new("sh")
        .args(["-c", script])
        .current_dir(work)
        .env("GIT_DIR", dir)
        .env("GIT_WORK_TREE", work)
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A pseudo-random file body (so neither side can compress or dedupe it away).
fn body(seed: usize) -> Vec<u8> {
    let mut x = (seed as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..FILE_BYTES)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b'a' + (x % 26) as u8
        })
        .collect()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let quick = std::env::var_os("KURA_BENCH_QUICK").is_some();
    let rounds = if quick { 5 } else { 21 };
    let tmp = tempfile::tempdir().expect("tempdir");
    let work = tmp.path().join("ws");
    for i in 0..FILES {
        let p = work.join(format!("d{:02}/f{i:04}.txt", i % 40));
        std::fs::create_dir_all(p.parent().expect("dir")).expect("mkdir");
        std::fs::write(p, body(i)).expect("write");
    }
    // Old enough for both indexes to trust the files' times.
    std::thread::sleep(Duration::from_millis(100));
    let objects = Objects::open(&tmp.path().join("kura.objects")).expect("objects");
    let gitdir = tmp.path().join("git");
    git(
        &gitdir,
        &work,
        "git init -q && git add -A && git write-tree >/dev/null",
    );
    let mut index = Index::default();
    let first = snapshot(&work, &objects, &mut index, &Limits::default()).expect("first");
    assert_eq!(first.files, FILES);

    let (mut kura, mut base, mut stored) = (Vec::new(), Vec::new(), Vec::new());
    let mut last = first.tree.clone();
    for r in 0..rounds {
        // One changed file, then each side records the tree (alternating who goes first).
        std::fs::write(
            work.join(format!("d{:02}/f{r:04}.txt", r % 40)),
            body(FILES + r),
        )
        .expect("change");
        std::thread::sleep(Duration::from_millis(30));
        let mut kura_once = || {
            let t = Instant::now();
            let s = snapshot(&work, &objects, &mut index, &Limits::default()).expect("snapshot");
            (ms(t.elapsed()), s)
        };
        let git_once = || {
            let t = Instant::now();
            let tree = git(&gitdir, &work, "git add -A && git write-tree");
            (ms(t.elapsed()), tree)
        };
        let ((k, s), (g, tree)) = if r % 2 == 0 {
            let k = kura_once();
            (k, git_once())
        } else {
            let g = git_once();
            (kura_once(), g)
        };
        assert_eq!(s.tree.as_str(), tree, "both name the same tree");
        assert!(s.hashed <= 2, "O(changed files): {} hashed", s.hashed);
        kura.push(k);
        base.push(g);
        stored.push(s.new_bytes as f64);
        last = s.tree;
    }
    let (k, g) = (median(&mut kura), median(&mut base));
    let per_turn = median(&mut stored);

    let (mut kr, mut gr) = (Vec::new(), Vec::new());
    for r in 0..rounds.min(7) {
        let into = tmp.path().join(format!("kura-restore-{r}"));
        let t = Instant::now();
        let done = restore(
            &into,
            &objects,
            &mut Index::default(),
            &Limits::default(),
            &last,
        )
        .expect("restore");
        kr.push(ms(t.elapsed()));
        assert_eq!(done.tree, last);
        assert_eq!(done.written, FILES);
        let empty = tmp.path().join(format!("git-checkout-{r}"));
        std::fs::create_dir(&empty).expect("dir");
        let t = Instant::now();
        git(&gitdir, &empty, &format!("git checkout {last} -- ."));
        gr.push(ms(t.elapsed()));
        let _ = std::fs::remove_dir_all(&into);
        let _ = std::fs::remove_dir_all(&empty);
    }
    let (kr, gr) = (median(&mut kr), median(&mut gr));
    let usage = objects.usage().expect("usage");

    println!("| figure | Kura | baseline (same run) | ratio | target | met |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| recording the workspace's tree after one changed file (1,000 files, 50 MB; objects durable, fsynced) | median {k:.2} ms | `git add -A && git write-tree` of the same change (git's index; no fsync): {g:.2} ms | {:.2} | ≤ 1× and O(changed files) | {} |",
        k / g,
        if k <= g { "yes" } else { "no" }
    );
    println!(
        "| restoring the 50 MB workspace into an empty directory | median {kr:.1} ms | `git checkout TREE -- .` of the same tree: {gr:.1} ms | {:.2} | ≤ 1.5× | {} |",
        kr / gr,
        if kr <= 1.5 * gr { "yes" } else { "no" }
    );
    println!(
        "| bytes stored per turn for a one-file change (a 50 KB file one directory deep) | {per_turn:.0} B | the file itself: {FILE_BYTES} B | {:.2} | the file and its trees | yes |",
        per_turn / FILE_BYTES as f64
    );
    println!(
        "> store after the run: {} objects, {} bytes",
        usage.objects, usage.bytes
    );
}

//! The object store against git itself, and restores that touch only what differs.

use super::*;
use std::path::Path;
use std::process::Command;

fn write(root: &Path, rel: &str, body: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, body).expect("write");
}

/// What `git add -A && git write-tree` names for `root` (git is on every machine that
/// cloned this repository).
fn git_tree(root: &Path) -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(root)
            .env("GIT_DIR", root.join("../git-dir"))
            .env("GIT_WORK_TREE", root)
            .output()
    };
    for step in [&["init", "-q"][..], &["add", "-A"]] {
        let out = git(step).expect("git runs");
        assert!(out.status.success(), "git {step:?}: {out:?}");
    }
    let out = git(&["write-tree"]).expect("git write-tree");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn setup() -> (tempfile::TempDir, std::path::PathBuf, Objects) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).expect("ws");
    let objects = Objects::open(&dir.path().join("kura.objects")).expect("open");
    (dir, root, objects)
}

#[test]
fn a_workspace_tree_is_the_tree_git_writes() {
    let (_d, root, objects) = setup();
    write(&root, "src/main.rs", "fn main() {}\n");
    write(&root, "src/lib/a.rs", "pub fn a() {}\n");
    write(&root, "README", "hello\n");
    write(&root, "a-b", "x");
    write(&root, "a/b", "y");
    std::fs::create_dir_all(root.join("empty/dir")).expect("empty dir");
    std::os::unix::fs::symlink("README", root.join("link")).expect("symlink");
    let run = std::process::Command::new("sh")
        .args(["-c", "chmod +x src/main.rs"])
        .current_dir(&root)
        .status();
    assert!(run.is_ok_and(|s| s.success()));
    let snap = snapshot(&root, &objects, &mut Index::default(), &Limits::default()).expect("snap");
    assert_eq!(snap.files, 6);
    assert_eq!(
        snap.tree.as_str(),
        git_tree(&root),
        "git write-tree names the same tree"
    );
    let empty = tempfile::tempdir().expect("empty");
    let none = snapshot(
        empty.path(),
        &objects,
        &mut Index::default(),
        &Limits::default(),
    );
    assert_eq!(none.expect("empty").tree, ObjectId::empty_tree());
}

#[test]
fn the_index_reads_only_changed_files() {
    let (_d, root, objects) = setup();
    for i in 0..50 {
        write(&root, &format!("d{}/f{i}", i % 5), &format!("file {i}\n"));
    }
    // Old enough that their times are to be trusted (not "racy").
    std::thread::sleep(std::time::Duration::from_millis(30));
    let mut index = Index::default();
    let first = snapshot(&root, &objects, &mut index, &Limits::default()).expect("first");
    assert_eq!(first.hashed, 50);
    write(&root, "d3/f3", "changed\n");
    let second = snapshot(&root, &objects, &mut index, &Limits::default()).expect("second");
    assert_eq!(second.hashed, 1, "only the changed file is read");
    assert_ne!(first.tree, second.tree);
    let changes = changes(&objects, &first.tree, &second.tree).expect("diff");
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].path, "d3/f3");
    assert_eq!(changes[0].change, ChangeKind::Changed);
    let text = unified(&objects, &changes[0], 10_000)
        .expect("read")
        .expect("text");
    assert!(text.contains("-file 3\n+changed\n"), "{text}");
}

#[test]
fn restore_puts_back_only_what_differs_byte_for_byte() {
    let (_d, root, objects) = setup();
    write(&root, "keep.txt", "same\n");
    write(&root, "calc.py", "def add(a, b):\n    return a + b\n");
    write(&root, "dir/old.txt", "old\n");
    let mut index = Index::default();
    let good = snapshot(&root, &objects, &mut index, &Limits::default()).expect("good");
    let keep_ino =
        std::fs::metadata(root.join("keep.txt")).map(|m| std::os::unix::fs::MetadataExt::ino(&m));
    // A wrong edit, a new file, a removed directory, a file where a directory was.
    write(&root, "calc.py", "def add(a, b):\n    return a - b\n");
    write(&root, "new.txt", "new\n");
    std::fs::remove_dir_all(root.join("dir")).expect("rm");
    write(&root, "dir", "now a file\n");
    let back =
        restore(&root, &objects, &mut index, &Limits::default(), &good.tree).expect("restore");
    assert_eq!(back.tree, good.tree);
    assert_eq!(
        std::fs::read_to_string(root.join("calc.py")).expect("read"),
        "def add(a, b):\n    return a + b\n"
    );
    assert!(!root.join("new.txt").exists());
    assert_eq!(
        std::fs::read_to_string(root.join("dir/old.txt")).expect("read"),
        "old\n"
    );
    let after =
        std::fs::metadata(root.join("keep.txt")).map(|m| std::os::unix::fs::MetadataExt::ino(&m));
    assert_eq!(
        keep_ino.ok(),
        after.ok(),
        "an unchanged file is not touched"
    );
    // The wrong state is still reachable.
    let wrong = changes(&objects, &good.tree, &back.previous).expect("diff");
    assert!(wrong.iter().any(|c| c.path == "calc.py"));
    let undo = restore(
        &root,
        &objects,
        &mut index,
        &Limits::default(),
        &back.previous,
    )
    .expect("redo");
    assert_eq!(undo.tree, back.previous);
    assert_eq!(
        std::fs::read_to_string(root.join("dir")).expect("read"),
        "now a file\n"
    );
}

#[test]
fn restore_never_follows_a_planted_symlink() {
    let (d, root, objects) = setup();
    write(&root, "sub/f", "inside\n");
    let mut index = Index::default();
    let tree = snapshot(&root, &objects, &mut index, &Limits::default())
        .expect("snap")
        .tree;
    let outside = d.path().join("outside");
    std::fs::create_dir(&outside).expect("outside");
    std::fs::remove_dir_all(root.join("sub")).expect("rm");
    std::os::unix::fs::symlink(&outside, root.join("sub")).expect("plant");
    restore(&root, &objects, &mut index, &Limits::default(), &tree).expect("restore");
    assert!(
        !outside.join("f").exists(),
        "nothing was written through the symlink"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("sub/f")).expect("read"),
        "inside\n"
    );
    assert!(root.join("sub").symlink_metadata().expect("meta").is_dir());
}

#[test]
fn a_tampered_object_fails_its_check_and_a_redacted_one_is_accounted_for() {
    let (_d, root, objects) = setup();
    write(&root, "a.txt", "AKIA-secret\n");
    write(&root, "b.txt", "fine\n");
    let tree = snapshot(&root, &objects, &mut Index::default(), &Limits::default())
        .expect("snap")
        .tree;
    assert!(check_tree(&objects, &tree).expect("check").intact());
    let entries = objects.tree(&tree).expect("tree");
    let b = entries
        .iter()
        .find(|e| e.name == b"b.txt")
        .expect("b")
        .id
        .clone();
    let path = objects
        .dir()
        .join("objects")
        .join(&b.as_str()[..2])
        .join(&b.as_str()[2..]);
    std::fs::write(&path, "tampered\n").expect("tamper");
    let checked = check_tree(&objects, &tree).expect("check");
    assert_eq!(checked.corrupt, vec![("b.txt".to_owned(), b)]);
    let a = entries
        .iter()
        .find(|e| e.name == b"a.txt")
        .expect("a")
        .id
        .clone();
    assert!(
        objects
            .redact(&a, "a secret written to a file")
            .expect("redact")
    );
    assert!(matches!(
        objects.get(Kind::Blob, &a),
        Err(ObjectsError::Redacted { .. })
    ));
    let checked = check_tree(&objects, &tree).expect("check");
    assert_eq!(checked.redacted.len(), 1);
    // Snapshotting the same bytes again never writes them back.
    snapshot(&root, &objects, &mut Index::default(), &Limits::default()).expect("again");
    assert!(!objects.has(&a));
}

#[test]
fn a_file_past_the_limit_is_named_not_stored() {
    let (_d, root, objects) = setup();
    write(&root, "big.bin", &"x".repeat(5000));
    write(&root, "small", "s");
    let limits = Limits {
        max_file_bytes: 1000,
        ..Limits::default()
    };
    let snap = snapshot(&root, &objects, &mut Index::default(), &limits).expect("snap");
    assert_eq!(snap.unstored.len(), 1);
    assert_eq!(snap.unstored[0].path, "big.bin");
    assert_eq!(snap.unstored[0].bytes, 5000);
    assert!(!objects.has(&snap.unstored[0].blob));
    assert_eq!(
        snap.tree.as_str(),
        git_tree(&root),
        "the tree still names it as git would"
    );
}

#[test]
fn collection_removes_only_what_nothing_names() {
    let (_d, root, objects) = setup();
    write(&root, "kept.txt", "kept\n");
    let kept = snapshot(&root, &objects, &mut Index::default(), &Limits::default())
        .expect("kept")
        .tree;
    write(&root, "kept.txt", "dropped\n");
    snapshot(&root, &objects, &mut Index::default(), &Limits::default()).expect("dropped");
    let mut keep = std::collections::HashSet::new();
    reachable(&objects, &kept, &mut keep).expect("reachable");
    // Young objects are never collected: a snapshot may not be on record yet.
    assert_eq!(
        objects
            .sweep(&keep, std::time::Duration::from_secs(3600))
            .expect("sweep")
            .0,
        0
    );
    let (n, _) = objects
        .sweep(&keep, std::time::Duration::ZERO)
        .expect("sweep");
    assert_eq!(n, 2, "the dropped tree and its blob");
    assert!(check_tree(&objects, &kept).expect("check").intact());
}

/// A raw tree object with one entry `name` (a forged tree, as a peer or the disk could hand
/// it over: snapshots never write such names).
fn forged_tree(objects: &Objects, entries: &[(&[u8], &[u8], &ObjectId)]) -> ObjectId {
    let mut raw = Vec::new();
    for (mode, name, id) in entries {
        raw.extend_from_slice(mode);
        raw.push(b' ');
        raw.extend_from_slice(name);
        raw.push(0);
        raw.extend_from_slice(store::to_gix(id).expect("id").as_bytes());
    }
    objects.put(Kind::Tree, &raw).expect("put").0
}

#[test]
fn a_forged_tree_naming_dot_dot_is_refused_and_nothing_is_written_outside() {
    let (d, root, objects) = setup();
    let (blob, _) = objects
        .put(Kind::Blob, b"ssh-ed25519 AAAA attacker\n")
        .expect("blob");
    let outside = d.path().join("escape");
    for name in [&b"../escape"[..], b"..", b"", b"a/b"] {
        let tree = forged_tree(&objects, &[(b"100644", name, &blob)]);
        let err = restore(
            &root,
            &objects,
            &mut Index::default(),
            &Limits::default(),
            &tree,
        );
        assert!(
            matches!(err, Err(ObjectsError::Corrupt { .. })),
            "{name:?}: {err:?}"
        );
    }
    // A `..` directory leading to a file.
    let inner = forged_tree(&objects, &[(b"100644", b"escape", &blob)]);
    let tree = forged_tree(&objects, &[(b"40000", b"..", &inner)]);
    let err = restore(
        &root,
        &objects,
        &mut Index::default(),
        &Limits::default(),
        &tree,
    );
    assert!(matches!(err, Err(ObjectsError::Corrupt { .. })), "{err:?}");
    assert!(
        !outside.exists(),
        "nothing was written outside the workspace"
    );
}

#[test]
fn a_tree_doubled_at_every_level_costs_no_more_than_the_bounds() {
    let (_d, _root, objects) = setup();
    let (blob, _) = objects.put(Kind::Blob, b"x").expect("blob");
    let mut t = forged_tree(&objects, &[(b"100644", b"f", &blob)]);
    // 100 levels, each naming the one below twice: 2^100 paths if walked naively.
    for _ in 0..100 {
        t = forged_tree(&objects, &[(b"40000", b"a", &t), (b"40000", b"b", &t)]);
    }
    let started = std::time::Instant::now();
    let diff = changes(&objects, &ObjectId::empty_tree(), &t);
    assert!(matches!(diff, Err(ObjectsError::Bound(_))), "{diff:?}");
    assert!(matches!(
        check_tree(&objects, &t),
        Err(ObjectsError::Bound(_))
    ));
    let mut seen = std::collections::HashSet::new();
    assert!(matches!(
        reachable(&objects, &t, &mut seen),
        Err(ObjectsError::Bound(_))
    ));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "bounded, not exponential"
    );
}

#[test]
fn a_sparse_huge_file_and_a_deep_directory_are_left_out_and_said() {
    let (_d, root, objects) = setup();
    write(&root, "fine.txt", "fine\n");
    let huge = std::fs::File::create(root.join("huge")).expect("huge");
    huge.set_len(3 << 30).expect("a 3 GiB hole");
    let mut deep = root.clone();
    for _ in 0..70 {
        deep = deep.join("d");
    }
    std::fs::create_dir_all(&deep).expect("deep");
    std::fs::write(deep.join("bottom"), "b").expect("bottom");
    let started = std::time::Instant::now();
    let snap =
        snapshot(&root, &objects, &mut Index::default(), &Limits::default()).expect("snapshot");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "the hole was not read"
    );
    assert!(
        snap.skipped.iter().any(|s| s.starts_with("huge: ")),
        "{:?}",
        snap.skipped
    );
    assert!(
        snap.skipped
            .iter()
            .any(|s| s.contains("nested more than 64 deep")),
        "{:?}",
        snap.skipped
    );
    let files = changes(&objects, &ObjectId::empty_tree(), &snap.tree).expect("files");
    assert!(files.iter().any(|f| f.path == "fine.txt"));
}

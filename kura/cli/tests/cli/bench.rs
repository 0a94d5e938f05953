//! `kura bench` runs end to end on scratch databases, reports each figure beside its
//! baseline, cleans up after itself, and refuses bad input with one line and exit 2.

use kura_testkit::cli::Kura;

#[test]
fn quick_bench_reports_every_storage_figure_with_a_baseline_and_cleans_up() {
    let k = Kura::uninit();
    let dir = k.dir.path().join("disk");
    std::fs::create_dir(&dir).expect("mkdir");
    let dir_arg = dir.display().to_string();
    let v = k.json(&["bench", "--quick", "--no-nats", "--dir", &dir_arg]);
    let figures = v["figures"].as_array().expect("figures");
    let names: Vec<&str> = figures.iter().filter_map(|f| f["name"].as_str()).collect();
    for expected in [
        "durable append",
        "group commit",
        "records stored",
        "verify a session",
        "bytes written to the device",
    ] {
        assert!(
            names.iter().any(|n| n.contains(expected)),
            "{expected} missing from {names:?}"
        );
    }
    for f in figures {
        let (value, base, ratio) = (
            f["value"].as_f64().expect("value"),
            f["baseline_value"].as_f64().expect("baseline"),
            f["ratio"].as_f64().expect("ratio"),
        );
        assert!(value > 0.0 && base > 0.0, "{f}");
        assert!((ratio - value / base).abs() < 1e-6 * ratio.max(1.0), "{f}");
    }
    assert_eq!(
        std::fs::read_dir(&dir).expect("read dir").count(),
        0,
        "scratch databases left behind"
    );
    // The text form is a table.
    let text = k.ok(&[
        "bench",
        "--quick",
        "--no-nats",
        "--only",
        "durable",
        "--dir",
        &dir_arg,
    ]);
    assert!(text.contains("| durable append"), "{text}");
}

#[test]
fn bench_creates_a_missing_scratch_directory_and_refuses_what_cannot_be_one() {
    let k = Kura::uninit();
    // A directory that does not exist yet is created (and only its scratch part removed).
    let fresh = k.dir.path().join("not").join("yet");
    let fresh_arg = fresh.display().to_string();
    let v = k.json(&[
        "bench",
        "--quick",
        "--no-nats",
        "--only",
        "durable",
        "--dir",
        &fresh_arg,
    ]);
    assert!(
        v["figures"].as_array().is_some_and(|f| !f.is_empty()),
        "{v}"
    );
    assert!(fresh.is_dir(), "--dir was not created");
    assert_eq!(std::fs::read_dir(&fresh).expect("read dir").count(), 0);
    // A path under a file cannot be a directory: one line, exit 2, naming it.
    let file = k.dir.path().join("a-file");
    std::fs::write(&file, b"x").expect("write");
    let under_file = file.join("sub").display().to_string();
    let (_, err) = k.fails(2, &["bench", "--quick", "--dir", &under_file]);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains(&under_file), "{err}");
    let dir = k.dir.path().display().to_string();
    let (_, err) = k.fails(2, &["bench", "--quick", "--only", "warp", "--dir", &dir]);
    assert!(err.contains("warp"), "{err}");
}

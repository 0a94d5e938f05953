//! `kura bench`: "is my SD card fast enough?" Every Kura figure is measured beside a
//! baseline doing the same physical work in the same run, and reported with the ratio, so
//! the answer does not depend on how fast (or how busy) the machine is.

mod doorbell;
mod prompt;
mod seal;
mod storage;

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;

pub use doorbell::{PeerArgs, peer};
pub use storage::thousands;

/// How much work each figure does.
#[derive(Debug, Clone, Serialize)]
pub struct Sizes {
    /// Records appended one per transaction (per round; three rounds).
    pub durable: usize,
    /// Records appended with group commit (per round; three rounds).
    pub group: usize,
    /// Appends per transaction in group commit.
    pub batch: usize,
    /// The "few records stored" point of the scaling figure.
    pub scale_small: usize,
    /// The "many records stored" point of the scaling figure.
    pub scale_big: usize,
    /// Records appended at each scaling point.
    pub scale_probe: usize,
    /// Records in the session `verify` checks.
    pub verify: usize,
    /// Doorbell events (and bare NATS messages) timed.
    pub events: usize,
    /// The "few ledgers logged" point of the seal-log figure.
    pub seal_small: u64,
    /// The "many ledgers logged" point of the seal-log figure.
    pub seal_big: u64,
}

impl Sizes {
    /// The full run, as the issue asks for: 1 M records stored, 100 k verified, 10 k events.
    pub fn full() -> Sizes {
        Sizes {
            durable: 2_000,
            group: 100_000,
            batch: 1_000,
            scale_small: 10_000,
            scale_big: 1_000_000,
            scale_probe: 50_000,
            verify: 100_000,
            events: 10_000,
            seal_small: 1_000,
            seal_big: 1_000_000,
        }
    }

    /// A run of a few seconds (CI uses it to prove the command works, not to judge speed).
    pub fn quick() -> Sizes {
        Sizes {
            durable: 100,
            group: 5_000,
            batch: 1_000,
            scale_small: 2_000,
            scale_big: 20_000,
            scale_probe: 2_000,
            verify: 5_000,
            events: 300,
            seal_small: 1_000,
            seal_big: 20_000,
        }
    }
}

/// One line of the table.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    /// What was measured.
    pub name: String,
    /// Kura's result, as text (`123 456 records/s`, `p50 0.21 ms · p99 0.80 ms`).
    pub result: String,
    /// Kura's headline number (records/s, or ms for latencies).
    pub value: f64,
    /// What the baseline did.
    pub baseline_name: String,
    /// The baseline's result, as text.
    pub baseline: String,
    /// The baseline's headline number.
    pub baseline_value: f64,
    /// Kura relative to the baseline: rate ratio (higher is better) or latency ratio
    /// (Kura / baseline, lower is better), as the figure says.
    pub ratio: f64,
    /// The target this figure is held to.
    pub target: String,
    /// Whether the target was met.
    pub met: bool,
}

impl Figure {
    /// A rate figure: ratio = kura / baseline.
    pub fn ratio(
        name: &str,
        unit: &str,
        value: f64,
        baseline_name: &str,
        baseline_value: f64,
        target: &str,
        met: impl Fn(f64, f64) -> bool,
    ) -> Figure {
        let ratio = value / baseline_value.max(1e-9);
        Figure {
            name: name.to_owned(),
            result: format!("{} {unit}", thousands(value.round() as usize)),
            value,
            baseline_name: baseline_name.to_owned(),
            baseline: format!("{} {unit}", thousands(baseline_value.round() as usize)),
            baseline_value,
            ratio,
            target: target.to_owned(),
            met: met(value, ratio),
        }
    }
}

/// What `kura bench` was asked to do.
#[derive(Debug, Clone)]
pub struct BenchArgs {
    /// Directory for the scratch databases (the disk being judged).
    pub dir: PathBuf,
    /// Sizes of the run.
    pub sizes: Sizes,
    /// Run the doorbell figure (needs nats-server).
    pub doorbell: bool,
    /// An existing NATS server to use for the doorbell figure instead of the bundled one.
    pub nats_url: Option<String>,
    /// Run only the figures whose name contains this (e.g. `verify`); empty: all.
    pub only: String,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Where the scratch databases lived.
    pub dir: String,
    /// The sizes used.
    pub sizes: Sizes,
    /// The figures, in order.
    pub figures: Vec<Figure>,
}

/// Runs every figure in a scratch directory under `args.dir`, which is removed afterwards.
/// `progress` hears the name of each figure as it starts.
pub fn run(args: &BenchArgs, mut progress: impl FnMut(&str)) -> anyhow::Result<Report> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot use {} as a directory", args.dir.display()))?;
    let scratch = args.dir.join(format!("kura-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let result = run_in(&scratch, args, &mut progress);
    // KURA_BENCH_KEEP=1 keeps the scratch databases for a closer look.
    if std::env::var_os("KURA_BENCH_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    Ok(Report {
        dir: args.dir.display().to_string(),
        sizes: args.sizes.clone(),
        figures: result?,
    })
}

fn run_in(
    dir: &Path,
    args: &BenchArgs,
    progress: &mut impl FnMut(&str),
) -> anyhow::Result<Vec<Figure>> {
    let s = &args.sizes;
    type Run = fn(&Path, &Sizes, Option<&str>) -> anyhow::Result<Vec<Figure>>;
    let all: [(&str, Run); 8] = [
        ("durable", |d, s, _| {
            Ok(vec![storage::durable_append(d, s)?])
        }),
        ("group", |d, s, _| storage::group_commit(d, s)),
        ("scaling", |d, s, _| storage::scaling(d, s)),
        ("verify", |d, s, _| Ok(vec![storage::verify_rate(d, s)?])),
        ("device-writes", |d, s, _| storage::device_writes(d, s)),
        ("seal-log", |d, s, _| seal::figures(d, s)),
        ("prompt", |d, s, _| prompt::figures(d, s)),
        ("doorbell", |d, s, n| Ok(vec![doorbell::latency(d, s, n)?])),
    ];
    let mut figures = Vec::new();
    for (name, run) in all {
        if !name.contains(args.only.as_str()) || (name == "doorbell" && !args.doorbell) {
            continue;
        }
        progress(name);
        figures.extend(run(dir, s, args.nats_url.as_deref())?);
    }
    if figures.is_empty() {
        anyhow::bail!("no figure matches --only {:?}", args.only);
    }
    Ok(figures)
}

/// The report as a Markdown table.
pub fn table(report: &Report) -> String {
    let mut out = String::from(
        "| figure | Kura | baseline (same run) | ratio | target | met |\n|---|---|---|---|---|---|\n",
    );
    for f in &report.figures {
        out.push_str(&format!(
            "| {} | {} | {}: {} | {:.2} | {} | {} |\n",
            f.name,
            f.result,
            f.baseline_name,
            f.baseline,
            f.ratio,
            f.target,
            match (f.target.starts_with('-'), f.met) {
                // Context: shown beside a held figure, held to nothing itself.
                (true, _) => "-",
                (false, true) => "yes",
                (false, false) => "no",
            }
        ));
    }
    out
}

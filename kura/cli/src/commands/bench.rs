//! `kura bench` (the figures as a table or JSON, progress on stderr) and `kura bench-peer`,
//! the other end of its doorbell figure; the measuring is in [`kura_bench`].

use std::path::PathBuf;

use anyhow::Context;

use super::Ctx;
use super::Outcome;

/// Measure this disk and machine: durable and batched appends, scaling to 1 M records,
/// verify, doorbell latency — each printed beside a baseline measured in the same run.
#[derive(Debug, clap::Args)]
pub struct Bench {
    /// Where the scratch databases go (the disk you want judged). Default: the
    /// directory of --db.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// A run of a few seconds, with small sizes.
    #[arg(long)]
    quick: bool,
    /// Skip the doorbell figure (it starts the bundled nats-server).
    #[arg(long)]
    no_nats: bool,
    /// Use this NATS server for the doorbell figure instead of the bundled one.
    #[arg(long, value_name = "URL")]
    nats: Option<String>,
    /// Run only the figures whose name contains this: durable, group, scaling, verify, seal-log,
    /// doorbell.
    #[arg(long, default_value = "")]
    only: String,
}

/// The other end of the doorbell figure (started by `kura bench`).
#[derive(Debug, clap::Args)]
pub struct BenchPeer {
    /// The NATS server.
    #[arg(long)]
    nats: String,
    /// Events of each kind to wait for.
    #[arg(long)]
    count: usize,
    /// The nkey seed file to connect with.
    #[arg(long)]
    seed: Option<PathBuf>,
    /// The bus CA to pin.
    #[arg(long)]
    ca: Option<PathBuf>,
}

impl Bench {
    /// Runs the figures and prints the report.
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        let (out, json, db) = (&mut ctx.out, ctx.json, &ctx.db);
        let dir = self.dir.unwrap_or_else(|| match db.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => std::path::PathBuf::from("."),
        });
        let args = kura_bench::BenchArgs {
            dir,
            sizes: if self.quick {
                kura_bench::Sizes::quick()
            } else {
                kura_bench::Sizes::full()
            },
            doorbell: !self.no_nats,
            nats_url: self.nats,
            only: self.only,
        };
        let report = kura_bench::run(&args, |name| eprintln!("kura bench: {name} ..."))
            .context("benchmark failed")?;
        if json {
            out.json(&report)?;
        } else {
            out.line(format!("Scratch databases in {}", report.dir))?;
            out.line(kura_bench::table(&report).trim_end())?;
        }
        Ok(Outcome::Ok)
    }
}

impl BenchPeer {
    /// Answers the doorbell figure's events until it has seen `count` of each.
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        kura_bench::peer(&kura_bench::PeerArgs {
            nats_url: self.nats,
            db: ctx.db.clone(),
            count: self.count,
            seed: self.seed,
            ca: self.ca,
        })?;
        Ok(Outcome::Ok)
    }
}

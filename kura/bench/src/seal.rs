//! The seal log's figures: an append with a million ledgers logged against one with a
//! thousand, and checking the log against a checkpoint (every stored hash recomputed, the
//! consistency proof checked) against hashing the leaves once.

use std::path::Path;
use std::time::Instant;

use kura_store::{Store, StoreOptions, Synchronous};
use kura_tlog::{checkpoint, seallog};
use sha2::{Digest, Sha256};

use super::storage::remove_db;
use super::{Figure, Sizes, thousands};

/// A store whose seal log is filled directly (the ledgers themselves are not the point, so
/// their rows are not made: foreign keys are off on this scratch connection only).
fn log_db(dir: &Path) -> anyhow::Result<Store> {
    let path = dir.join("seal-log.db");
    remove_db(&path);
    let store = Store::create(
        &path,
        &StoreOptions {
            synchronous: Synchronous::Normal,
            ..StoreOptions::default()
        },
    )?;
    store.conn().pragma_update(None, "foreign_keys", "OFF")?;
    Ok(store)
}

/// Appends `n` leaves in transactions of 10 000.
fn fill(store: &Store, n: u64) -> anyhow::Result<()> {
    let hash = "00".repeat(32);
    let mut done = 0;
    while done < n {
        let tx = store.conn().unchecked_transaction()?;
        for _ in 0..(n - done).min(10_000) {
            seallog::append(
                &kura_store::SealLog::over(&tx),
                proto::LedgerId::new(),
                proto::SessionId::new(),
                &hash,
            )?;
        }
        tx.commit()?;
        done += (n - done).min(10_000);
    }
    Ok(())
}

/// Appends per second for `probe` appends (one transaction), the median of three rounds.
fn append_rate(store: &Store, probe: u64) -> anyhow::Result<f64> {
    let mut rates = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        fill(store, probe)?;
        rates.push(probe as f64 / t.elapsed().as_secs_f64().max(1e-9));
    }
    rates.sort_by(f64::total_cmp);
    Ok(rates[1])
}

/// Both figures.
pub fn figures(dir: &Path, sizes: &Sizes) -> anyhow::Result<Vec<Figure>> {
    let store = log_db(dir)?;
    let (small, big, probe) = (sizes.seal_small, sizes.seal_big, 2_000);
    fill(&store, small)?;
    let at_small = append_rate(&store, probe)?;
    let have = seallog::size(&store.seal_log())?;
    fill(&store, big.saturating_sub(have))?;
    let at_big = append_rate(&store, probe)?;
    // A checkpoint of the log at `big`, then more leaves: the check proves the log extends
    // it and recomputes every stored hash from the leaves.
    let (skey, _) = checkpoint::generate("bench/log")?;
    let key = checkpoint::LogKey::from_text(&skey)?;
    let size = seallog::size(&store.seal_log())?;
    let note = key.sign(size, seallog::root(&store.seal_log(), size)?)?;
    fill(&store, 1_000)?;
    let leaves = seallog::size(&store.seal_log())?;
    let t = Instant::now();
    let cp = checkpoint::open(&note, key.verifier())?;
    let consistent = checkpoint::extends(&store.seal_log(), &cp)?.is_ok();
    let problems = seallog::check(&store.seal_log())?;
    let checked = leaves as f64 / t.elapsed().as_secs_f64().max(1e-9);
    // Foreign keys are off here, so the leaves name no ledgers; only those problems are expected.
    if !consistent || problems.iter().any(|p| p.1 != "seal_log_leaf") {
        anyhow::bail!("the bench log does not check: {problems:?}");
    }
    let t = Instant::now();
    let mut stmt = store
        .conn()
        .prepare("SELECT leaf_data FROM seal_log_leaves ORDER BY leaf_index")?;
    let mut rows = stmt.query([])?;
    let mut x = 0u8;
    while let Some(r) = rows.next()? {
        let data: String = r.get(0)?;
        x ^= Sha256::digest(data.as_bytes())[0];
    }
    std::hint::black_box(x);
    let baseline = leaves as f64 / t.elapsed().as_secs_f64().max(1e-9);
    remove_db(&dir.join("seal-log.db"));
    Ok(vec![
        Figure::ratio(
            &format!(
                "seal-log append with {} ledgers logged",
                thousands(big as usize)
            ),
            "appends/s",
            at_big,
            &format!("the same with {} logged", thousands(small as usize)),
            at_small,
            "ratio >= 0.8",
            |_, ratio| ratio >= 0.8,
        ),
        Figure::ratio(
            &format!(
                "verify --checkpoint: {} leaves, every stored hash recomputed, consistency proof checked",
                thousands(leaves as usize)
            ),
            "leaves/s",
            checked,
            "read every leaf and SHA-256 it once",
            baseline,
            "ratio >= 0.25",
            |_, ratio| ratio >= 0.25,
        ),
    ])
}

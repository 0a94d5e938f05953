//! Workspace files travel with the sealed ledgers that name them. Before a ledger is
//! published, every object its trees reach that the hub lacks goes into this Pi's object
//! store on the hub as `git-<id>` — a tree only after all it names, so a tree on the hub means
//! all of it is; a receiver (and a restore) fetches what it lacks, each object checked against
//! its id on receipt. The bytes ride beside the records; the records alone prove history.

use kura_objects::{Kind, Objects, ObjectsError, parse_tree};
use proto::record::{OwnedColumns, RecordType};
use proto::workspace::ObjectId;

use crate::port;
use crate::{FleetError, Result};

/// Largest object fetched from the hub (a file past `[files] max_file_bytes` is not stored).
const MAX_OBJECT: u64 = 256 << 20;

fn name(id: &ObjectId) -> String {
    format!("git-{id}")
}

/// The trees the records of a ledger about to be published name.
pub fn trees_in<'a>(records: impl IntoIterator<Item = &'a OwnedColumns>) -> Vec<ObjectId> {
    let mut trees = Vec::new();
    for c in records {
        let Ok(t) = c.record_type.parse::<RecordType>() else {
            continue;
        };
        let Ok(content) = serde_json::from_str(&c.content) else {
            continue;
        };
        if let Some(w) = proto::workspace::change_of(t, &content) {
            trees.push(w.before);
            trees.push(w.after);
        }
    }
    trees.sort();
    trees.dedup();
    trees
}

fn local(e: ObjectsError) -> FleetError {
    FleetError::Config(format!("the object store: {e}"))
}

/// Puts on the hub every object `tree` reaches that it lacks; objects this Pi does not
/// hold (not stored, redacted) are left out. Objects put.
pub async fn push<H: port::Objects>(hub: &H, objects: &Objects, tree: &ObjectId) -> Result<u64> {
    let mut put = 0;
    let mut todo: Vec<(ObjectId, Option<Vec<u8>>)> = vec![(tree.clone(), None)];
    while let Some((t, data)) = todo.pop() {
        if let Some(data) = data {
            hub.put(&name(&t), &data).await?;
            put += 1;
            continue;
        }
        if t == ObjectId::empty_tree() {
            continue;
        }
        // What this Pi lacks, or holds altered, is not published (verify says so here).
        let data = match objects.get(Kind::Tree, &t) {
            Ok(d) => d,
            Err(ObjectsError::Missing { .. } | ObjectsError::Redacted { .. }) => continue,
            Err(ObjectsError::Corrupt { .. }) => continue,
            Err(e) => return Err(local(e)),
        };
        if hub.holds(&name(&t), data.len() as u64).await {
            continue;
        }
        let Ok(entries) = parse_tree(&t, &data) else {
            continue;
        };
        todo.push((t, Some(data)));
        for e in entries {
            if e.is_tree() {
                todo.push((e.id, None));
                continue;
            }
            let blob = match objects.get(Kind::Blob, &e.id) {
                Ok(b) => b,
                Err(
                    ObjectsError::Missing { .. }
                    | ObjectsError::Redacted { .. }
                    | ObjectsError::Corrupt { .. },
                ) => continue,
                Err(e) => return Err(local(e)),
            };
            if !hub.holds(&name(&e.id), blob.len() as u64).await {
                hub.put(&name(&e.id), &blob).await?;
                put += 1;
            }
        }
    }
    Ok(put)
}

/// What a pull fetched.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pulled {
    /// Objects fetched and stored.
    pub objects: u64,
    /// Objects the hub does not hold (never stored, or redacted at the origin).
    pub missing: u64,
    /// Objects whose bytes did not hash to their name (refused, not stored).
    pub refused: u64,
}

/// Fetches every object `tree` reaches that `objects` lacks, each checked against its id;
/// a tree is stored only after all it names.
pub async fn pull<H: port::Objects>(hub: &H, objects: &Objects, tree: &ObjectId) -> Result<Pulled> {
    let mut got = Pulled::default();
    // Every tree is walked, each once, even one already here: an earlier pull may have
    // stored it without a child the hub did not have then.
    let mut seen = std::collections::HashSet::new();
    let mut todo: Vec<(ObjectId, Option<Vec<u8>>, usize)> = vec![(tree.clone(), None, 0)];
    while let Some((t, data, depth)) = todo.pop() {
        if let Some(data) = data {
            got.objects += objects
                .put_verified(Kind::Tree, &t, &data)
                .map(|_| 1)
                .map_err(local)?;
            continue;
        }
        if t == ObjectId::empty_tree() || !seen.insert(t.clone()) || depth > MAX_DEPTH {
            continue;
        }
        let here = objects.has(&t);
        let data = if here {
            objects.get(Kind::Tree, &t).map_err(local)?
        } else {
            let Some(d) = fetch(hub, &t, Kind::Tree, &mut got).await? else {
                continue;
            };
            d
        };
        // A tree that is not one (names `..`, a submodule) is refused like a wrong hash.
        let Ok(entries) = parse_tree(&t, &data) else {
            got.refused += 1;
            continue;
        };
        if !here {
            todo.push((t, Some(data), depth));
        }
        for e in entries {
            if e.is_tree() {
                todo.push((e.id, None, depth + 1));
            } else if !objects.has(&e.id)
                && !objects.is_redacted(&e.id)
                && let Some(blob) = fetch(hub, &e.id, Kind::Blob, &mut got).await?
            {
                objects
                    .put_verified(Kind::Blob, &e.id, &blob)
                    .map_err(local)?;
                got.objects += 1;
            }
        }
    }
    objects.sync().map_err(local)?;
    Ok(got)
}

/// Deepest trees are walked (as snapshots bound them).
const MAX_DEPTH: usize = 64;

/// One object from the hub, checked against its id (`None`: missing or refused, counted).
async fn fetch<H: port::Objects>(
    hub: &H,
    id: &ObjectId,
    kind: Kind,
    got: &mut Pulled,
) -> Result<Option<Vec<u8>>> {
    let data = match hub.get(&name(id), MAX_OBJECT).await {
        Ok(d) => d,
        Err(FleetError::Missing(_)) => {
            got.missing += 1;
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    if kura_objects::hash(kind, &data).ok().as_ref() != Some(id) {
        tracing::warn!(object = %id, "an object on the hub does not hash to its name; not stored");
        got.refused += 1;
        return Ok(None);
    }
    Ok(Some(data))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryHub;
    use kura_objects::{Index, Limits, snapshot};

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
    }

    /// A tree pushed from one Pi is pulled whole by another; an object someone altered on
    /// the hub is refused on receipt and never stored.
    #[test]
    fn files_travel_whole_and_an_altered_object_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("src")).expect("ws");
        std::fs::write(ws.join("src/a.rs"), "fn a() {}\n").expect("a");
        std::fs::write(ws.join("notes.md"), "- rice\n").expect("notes");
        let origin = Objects::open(&dir.path().join("a.objects")).expect("a");
        let tree = snapshot(&ws, &origin, &mut Index::default(), &Limits::default())
            .expect("snapshot")
            .tree;
        let hub = MemoryHub::default();
        let put = rt().block_on(push(&hub, &origin, &tree)).expect("push");
        assert_eq!(put, 4, "two blobs and two trees");
        assert_eq!(
            rt().block_on(push(&hub, &origin, &tree)).expect("again"),
            0,
            "nothing twice"
        );

        let b = Objects::open(&dir.path().join("b.objects")).expect("b");
        let got = rt().block_on(pull(&hub, &b, &tree)).expect("pull");
        assert_eq!(
            got,
            Pulled {
                objects: 4,
                missing: 0,
                refused: 0
            }
        );
        assert!(kura_objects::check_tree(&b, &tree).expect("check").intact());

        let notes = origin
            .tree(&tree)
            .expect("tree")
            .into_iter()
            .find(|e| e.name == b"notes.md")
            .expect("notes")
            .id;
        hub.alter_object(&name(&notes), b"- beer\n");
        let c = Objects::open(&dir.path().join("c.objects")).expect("c");
        let got = rt().block_on(pull(&hub, &c, &tree)).expect("pull");
        assert_eq!(got.refused, 1, "{got:?}");
        assert!(!c.has(&notes), "the altered bytes were not stored");
    }
}

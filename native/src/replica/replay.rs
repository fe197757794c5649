//! The replay fast lane: decode and apply a run of log records in one call, as long as each is
//! the plain next batch of a trusted source.
//!
//! A follower decides each record's fate from per-source cursors (epoch, last seq, diverged).
//! The common record is the next seq of a source's current epoch, without `meta` or an in-band
//! digest; this module applies such records straight from their bytes. It stops, without
//! consuming it, at the first record that needs the follower's own judgement (undecodable, too
//! big, an unknown or distrusted source, another epoch, a duplicate or a gap, `meta`, a digest
//! to check), so the follower handles that one exactly as it would alone. A record whose events
//! do not fit the replica is consumed (its events before the failing one stay applied, as
//! `ReplicaStore::apply` leaves them) and ends the run with the error.

use std::collections::HashMap;

use super::{Churn, ConsistencyError, ReplicaStore};
use crate::codec;
use crate::events::{Batch, Event};

/// A trusted source's cursor: its current epoch and the last seq applied in it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct LaneCursor {
    epoch: String,
    seq: u64,
    /// Whether a run advanced it (reported once per run).
    advanced: bool,
    /// What the records a run applied for it did (reported with `advanced`, then reset).
    churn: Churn,
}

/// The cursors of the sources whose next batch may be applied without asking the follower
/// (the follower keeps it in step with its own cursors: trusted sources only).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LaneCursors {
    by_source: HashMap<String, LaneCursor>,
}

impl LaneCursors {
    /// Trust `source` at `seq` of `epoch`: its batch `seq + 1` of that epoch may be applied.
    pub fn set(&mut self, source: &str, epoch: &str, seq: u64) {
        self.by_source.insert(
            source.to_owned(),
            LaneCursor {
                epoch: epoch.to_owned(),
                seq,
                advanced: false,
                churn: Churn::default(),
            },
        );
    }

    /// Stop trusting `source` (its records go to the follower).
    pub fn discard(&mut self, source: &str) {
        self.by_source.remove(source);
    }

    /// Forget every source.
    pub fn clear(&mut self) {
        self.by_source.clear();
    }

    /// `(epoch, last seq)` of a trusted source.
    pub fn get(&self, source: &str) -> Option<(&str, u64)> {
        self.by_source
            .get(source)
            .map(|c| (c.epoch.as_str(), c.seq))
    }

    /// How many sources are trusted.
    pub fn len(&self) -> usize {
        self.by_source.len()
    }

    /// Whether no source is trusted.
    pub fn is_empty(&self) -> bool {
        self.by_source.is_empty()
    }
}

/// What one run did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Run {
    /// Records consumed from the start: applied, the last one possibly failing (`failure`).
    pub consumed: usize,
    /// Events of the consumed records, one per page for stores.
    pub pages: usize,
    /// `ts` of the last consumed record.
    pub last_ts: Option<f64>,
    /// Each source the run advanced, with its new last seq.
    pub advanced: Vec<(String, u64)>,
    /// What the run's records did to each source it advanced (a failing record counted whole,
    /// as a view that counts batches counts it), in the order of `advanced`.
    pub churn: Vec<Churn>,
    /// The last consumed record's events did not fit its source's replica.
    pub failure: Option<ConsistencyError>,
}

fn page_count(batch: &Batch) -> usize {
    batch
        .events
        .iter()
        .map(|event| match event {
            Event::Stored(stored) => stored.hashes.len(),
            _ => 1,
        })
        .sum()
}

/// Decode and apply `records` in order while each is the plain next batch of a trusted source
/// (see the module docs); at most `limit` of them.
pub fn apply_records<'a>(
    store: &mut ReplicaStore,
    cursors: &mut LaneCursors,
    records: impl IntoIterator<Item = &'a [u8]>,
    limit: usize,
    max_record_bytes: usize,
) -> Run {
    let mut run = Run::default();
    let mut touched: Vec<String> = Vec::new();
    for data in records.into_iter().take(limit) {
        let Ok(batch) = codec::decode(data, max_record_bytes) else {
            break;
        };
        let header = &batch.header;
        if header.meta_json.is_some() || header.digest.is_some() {
            break;
        }
        let Some(cursor) = cursors.by_source.get_mut(&header.source) else {
            break;
        };
        if cursor.epoch != header.epoch || cursor.seq.checked_add(1) != Some(header.seq) {
            break;
        }
        cursor.seq = header.seq;
        if !cursor.advanced {
            cursor.advanced = true;
            touched.push(header.source.clone());
        }
        cursor.churn.add(&Churn::of_batch(&batch.events));
        run.consumed += 1;
        run.pages += page_count(&batch);
        run.last_ts = Some(header.ts);
        if let Err(error) = store.apply(&batch) {
            run.failure = Some(error);
            break;
        }
    }
    for source in touched {
        if let Some(cursor) = cursors.by_source.get_mut(&source) {
            cursor.advanced = false;
            run.churn.push(std::mem::take(&mut cursor.churn));
            run.advanced.push((source, cursor.seq));
        }
    }
    run
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event_types::EventType;
    use crate::events::{Hashes, Header, Stored, Tokens};

    fn record(source: &str, epoch: &str, seq: u64, events: Vec<Event>) -> Vec<u8> {
        record_with(source, epoch, seq, events, None, None)
    }

    fn record_with(
        source: &str,
        epoch: &str,
        seq: u64,
        events: Vec<Event>,
        digest: Option<&str>,
        meta_json: Option<&str>,
    ) -> Vec<u8> {
        codec::encode(&Batch {
            header: Header {
                version: 2,
                source: source.to_owned(),
                epoch: epoch.to_owned(),
                seq,
                ts: 1.5 + seq as f64,
                digest: digest.map(str::to_owned),
                meta_json: meta_json.map(str::to_owned),
            },
            events,
        })
        .expect("a test batch encodes")
    }

    fn stored(hash: i64, parent: Option<i64>, token: u32) -> Event {
        Event::Stored(Stored {
            hashes: Hashes::from_slice(&[hash]),
            parent,
            tokens: Tokens::from_slice(&[token]),
            block_size: 1,
            lora_id: None,
            medium: None,
        })
    }

    fn trusted(source: &str, epoch: &str, seq: u64) -> LaneCursors {
        let mut cursors = LaneCursors::default();
        cursors.set(source, epoch, seq);
        cursors
    }

    fn run_of(
        store: &mut ReplicaStore,
        cursors: &mut LaneCursors,
        records: &[Vec<u8>],
        limit: usize,
    ) -> Run {
        apply_records(
            store,
            cursors,
            records.iter().map(Vec::as_slice),
            limit,
            1 << 20,
        )
    }

    #[test]
    fn applies_next_batches_and_reports_the_cursor() {
        let mut store = ReplicaStore::new();
        let mut cursors = trusted("a", "e", 0);
        let records = vec![
            record("a", "e", 1, vec![stored(1, None, 7)]),
            record(
                "a",
                "e",
                2,
                vec![stored(2, Some(1), 8), stored(3, Some(2), 9)],
            ),
        ];
        let run = run_of(&mut store, &mut cursors, &records, usize::MAX);
        assert_eq!(run.consumed, 2);
        assert_eq!(run.pages, 3);
        assert_eq!(run.last_ts, Some(3.5));
        assert_eq!(run.advanced, vec![("a".to_owned(), 2)]);
        let mut churn = Churn {
            batches: 2,
            ..Churn::default()
        };
        churn.by_type[EventType::Stored.index()] = 3;
        assert_eq!(run.churn, vec![churn]);
        assert_eq!(run.failure, None);
        assert_eq!(cursors.get("a"), Some(("e", 2)));
        assert_eq!(store.get("a").map(|r| r.blocks.len()), Some(3));
    }

    #[test]
    fn stops_before_a_record_that_needs_the_follower() {
        let next = |seq| record("a", "e", seq, vec![stored(seq as i64, None, 1)]);
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("undecodable", b"{not json".to_vec()),
            ("unknown source", record("b", "e", 1, vec![])),
            ("other epoch", record("a", "f", 1, vec![])),
            ("duplicate", record("a", "e", 0, vec![])),
            ("gap", record("a", "e", 3, vec![])),
            ("digest", record_with("a", "e", 2, vec![], Some("x"), None)),
            (
                "meta",
                record_with(
                    "a",
                    "e",
                    2,
                    vec![],
                    None,
                    Some(r#"{"page_size":1,"sliding_window_size":4}"#),
                ),
            ),
        ];
        for (what, stop) in cases {
            let mut store = ReplicaStore::new();
            let mut cursors = trusted("a", "e", 0);
            let records = vec![next(1), stop, next(2)];
            let run = run_of(&mut store, &mut cursors, &records, usize::MAX);
            assert_eq!(run.consumed, 1, "{what}");
            assert_eq!(cursors.get("a"), Some(("e", 1)), "{what}");
        }
    }

    #[test]
    fn stops_before_a_record_over_the_size_limit() {
        let mut store = ReplicaStore::new();
        let mut cursors = trusted("a", "e", 0);
        let record = record("a", "e", 1, vec![stored(1, None, 7)]);
        let run = apply_records(
            &mut store,
            &mut cursors,
            [record.as_slice()],
            usize::MAX,
            record.len() - 1,
        );
        assert_eq!(run.consumed, 0);
        assert_eq!(run.advanced, vec![]);
    }

    #[test]
    fn consumes_a_record_that_does_not_fit_and_stops() {
        let mut store = ReplicaStore::new();
        let mut cursors = trusted("a", "e", 0);
        let records = vec![
            record(
                "a",
                "e",
                1,
                vec![stored(1, None, 7), stored(2, Some(99), 8)],
            ),
            record("a", "e", 2, vec![]),
        ];
        let run = run_of(&mut store, &mut cursors, &records, usize::MAX);
        assert_eq!(run.consumed, 1);
        assert_eq!(run.pages, 2);
        assert_eq!(run.failure.map(|f| f.source), Some("a".to_owned()));
        assert_eq!(run.advanced, vec![("a".to_owned(), 1)]);
        // the event before the failing one stays applied, as `ReplicaStore::apply` leaves it
        assert_eq!(store.get("a").map(|r| r.blocks.len()), Some(1));
    }

    #[test]
    fn honours_the_limit_and_discarded_sources() {
        let mut store = ReplicaStore::new();
        let mut cursors = trusted("a", "e", 0);
        let records: Vec<_> = (1..=3).map(|seq| record("a", "e", seq, vec![])).collect();
        assert_eq!(run_of(&mut store, &mut cursors, &records, 2).consumed, 2);
        cursors.discard("a");
        assert!(cursors.is_empty());
        assert_eq!(
            run_of(&mut store, &mut cursors, &records[2..], 9).consumed,
            0
        );
    }
}

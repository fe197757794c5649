//! Bindings of `crate::replica::replay`, the follower's replay fast lane: the `ReplayCursors`
//! class and `apply_records`, which decodes and applies a run of log records into a
//! `ReplicaStore` in one call.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use super::errors::consistency_parts;
use super::replica::PyReplicaStore;
use crate::replica::{self, ChurnCounts, LaneCursors, Run};

/// How many records `apply_records` takes from the list at a time.
const RECORDS_A_STEP: usize = 64;

/// What `apply_records` returns: (records consumed, their events, the last one's ts,
/// `[(source, new last seq)]`, `(source, reason)` of a last record that did not fit,
/// `[(source, churn counts)]` of what the records did to each source advanced).
type LaneRun = (
    usize,
    usize,
    Option<f64>,
    Vec<(String, u64)>,
    Option<(String, String)>,
    Vec<(String, ChurnCounts)>,
);

/// The replay fast lane's cursors: the sources whose next batch `apply_records` may apply,
/// each with its epoch and last seq (the follower keeps them in step with its own cursors).
#[pyclass(module = "cache.events._native", name = "ReplayCursors")]
#[derive(Default)]
pub(crate) struct ReplayCursors {
    table: LaneCursors,
}

#[pymethods]
impl ReplayCursors {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    /// Trust `source` at `seq` of `epoch`.
    fn set(&mut self, source: &str, epoch: &str, seq: u64) {
        self.table.set(source, epoch, seq);
    }

    /// Stop trusting `source`.
    fn discard(&mut self, source: &str) {
        self.table.discard(source);
    }

    /// Forget every source.
    fn clear(&mut self) {
        self.table.clear();
    }

    /// `(epoch, last seq)` of a trusted source, or None.
    fn get(&self, source: &str) -> Option<(String, u64)> {
        self.table
            .get(source)
            .map(|(epoch, seq)| (epoch.to_owned(), seq))
    }

    fn __len__(&self) -> usize {
        self.table.len()
    }
}

/// Decode and apply `records[start:]` into `store` in order, at most `limit` of them, while
/// each is the plain next batch of a source `cursors` trust (`crate::replica::replay`). Returns
/// (records consumed, their events, the last one's ts, `[(source, new last seq)]` in order, a
/// source possibly more than once: the last is its new seq, `(source, reason)` when the last
/// consumed record did not fit its replica, and `[(source, churn counts)]` in the order of the
/// advanced sources, to be added up). An item that is not `bytes` stops the run there.
#[pyfunction]
#[pyo3(signature = (store, records, start, limit, max_record_bytes, cursors))]
fn apply_records(
    store: &mut PyReplicaStore,
    records: &Bound<'_, PyList>,
    start: usize,
    limit: usize,
    max_record_bytes: usize,
    cursors: &mut ReplayCursors,
) -> LaneRun {
    let end = records.len().min(start.saturating_add(limit));
    let mut total = Run::default();
    let mut at = start;
    // A few records at a time: a run often stops well before the end of the list (at a record
    // with a digest), and the records past it are not even looked at.
    while at < end {
        let stop = end.min(at + RECORDS_A_STEP);
        // Strong references to the payloads, held for the step: the slices below borrow from
        // them (and `bytes` never change).
        let mut held: Vec<Bound<'_, PyBytes>> = Vec::with_capacity(stop - at);
        for index in at..stop {
            match records
                .get_item(index)
                .map(|item| item.cast_into::<PyBytes>())
            {
                Ok(Ok(bytes)) => held.push(bytes),
                _ => break,
            }
        }
        let taken = held.len();
        let slices: Vec<&[u8]> = held.iter().map(|bytes| bytes.as_bytes()).collect();
        let target = &mut store.store;
        let table = &mut cursors.table;
        // The GIL stays held: the store is borrowed mutably, so another thread reading it
        // meanwhile would meet a borrow error, and a step is as short as any Python code.
        let run = replica::apply_records(target, table, slices, usize::MAX, max_record_bytes);
        let whole = run.consumed == taken && run.failure.is_none();
        total.consumed += run.consumed;
        total.pages += run.pages;
        total.last_ts = run.last_ts.or(total.last_ts);
        // a source may come twice (from two steps): the later seq is last, as the caller applies
        total.advanced.extend(run.advanced);
        total.churn.extend(run.churn);
        total.failure = run.failure;
        if !whole || taken < stop - at {
            break;
        }
        at = stop;
    }
    let churn = total
        .advanced
        .iter()
        .zip(&total.churn)
        .map(|((source, _), churn)| (source.clone(), churn.counts()))
        .collect();
    (
        total.consumed,
        total.pages,
        total.last_ts,
        total.advanced,
        total.failure.map(consistency_parts),
        churn,
    )
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<ReplayCursors>()?;
    module.add_function(wrap_pyfunction!(apply_records, module)?)?;
    Ok(())
}

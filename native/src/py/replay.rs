//! Bindings of `crate::replica::replay`, the follower's replay fast lane: the `ReplayCursors`
//! class and `apply_records`, which decodes and applies a run of log records into a
//! `ReplicaStore` in one call.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use super::replica::PyReplicaStore;
use crate::replica::{self, LaneCursors};

/// What `apply_records` returns: (records consumed, their events, the last one's ts,
/// `[(source, new last seq)]`, `(source, reason)` of a last record that did not fit).
type LaneRun = (
    usize,
    usize,
    Option<f64>,
    Vec<(String, u64)>,
    Option<(String, String)>,
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
/// each is the plain next batch of a source `cursors` trust (`crate::replica::replay`); the GIL
/// is released meanwhile. Returns (records consumed, their events, the last one's ts,
/// `[(source, new last seq)]`, `(source, reason)` when the last consumed record did not fit its
/// replica). An item that is not `bytes` stops the run there.
#[pyfunction]
#[pyo3(signature = (store, records, start, limit, max_record_bytes, cursors))]
fn apply_records(
    py: Python<'_>,
    store: &mut PyReplicaStore,
    records: &Bound<'_, PyList>,
    start: usize,
    limit: usize,
    max_record_bytes: usize,
    cursors: &mut ReplayCursors,
) -> LaneRun {
    let end = records.len().min(start.saturating_add(limit));
    // Strong references to the payloads, held for the whole call: the slices below borrow from
    // them, so the bytes stay alive (and, being `bytes`, unchanged) while the GIL is released,
    // whatever other threads do to the list.
    let mut held: Vec<Bound<'_, PyBytes>> = Vec::with_capacity(end.saturating_sub(start));
    for at in start..end {
        match records.get_item(at).map(|item| item.cast_into::<PyBytes>()) {
            Ok(Ok(bytes)) => held.push(bytes),
            _ => break,
        }
    }
    let slices: Vec<&[u8]> = held.iter().map(|bytes| bytes.as_bytes()).collect();
    let target = &mut store.store;
    let table = &mut cursors.table;
    let run = py.detach(|| {
        replica::apply_records(target, table, slices, usize::MAX, max_record_bytes)
    });
    (
        run.consumed,
        run.pages,
        run.last_ts,
        run.advanced,
        run.failure.map(|error| (error.source, error.reason)),
    )
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<ReplayCursors>()?;
    module.add_function(wrap_pyfunction!(apply_records, module)?)?;
    Ok(())
}

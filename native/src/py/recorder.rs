//! Bindings of `crate::recorder`: the tree's `EventRecorder` and the `RecordedCut` a publisher
//! step takes.
//!
//! Recording methods are called on the serving loop with the GIL held and only push an op.
//! Everything that processes (hashing, digest, events, encoding) releases the GIL while it
//! works, so a publisher's worker thread runs it beside the serving loop.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList, PyTuple, PyType};

use super::codec::{classes, push_events};
use crate::codec::EncodeError;
use crate::events::Event;
use crate::recorder::{
    opening_records, step_records, BatchLimits, CutId, Numbering, Record, Recorder, RecorderError,
};

static RECORDER_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// The Python `cache.events.recorder.EventRecorderError` of a native recorder error.
fn recorder_error(py: Python<'_>, error: RecorderError) -> PyErr {
    let class = RECORDER_ERROR.get_or_try_init(py, || -> PyResult<Py<PyType>> {
        Ok(py
            .import("cache.events.recorder")?
            .getattr("EventRecorderError")?
            .cast_into::<PyType>()?
            .unbind())
    });
    match class.and_then(|class| class.bind(py).call1((error.reason,))) {
        Ok(instance) => PyErr::from_value(instance),
        Err(lookup_failed) => lookup_failed,
    }
}

fn token(item: &Bound<'_, PyAny>) -> PyResult<u32> {
    let value: i64 = item.extract().map_err(|_| {
        PyValueError::new_err(format!("token id {item} is not an int in [0, 2**32)"))
    })?;
    u32::try_from(value)
        .map_err(|_| PyValueError::new_err(format!("token id {value} outside [0, 2**32)")))
}

/// Token ids as u32 (a tuple, the tree's own form, is read without an iterator).
fn tokens_u32(token_ids: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
    if let Ok(tuple) = token_ids.cast::<PyTuple>() {
        let mut tokens = Vec::with_capacity(tuple.len());
        for item in tuple.iter() {
            tokens.push(token(&item)?);
        }
        return Ok(tokens);
    }
    token_ids.try_iter()?.map(|item| token(&item?)).collect()
}

fn limits(max_events: usize, max_bytes: usize) -> PyResult<BatchLimits> {
    if max_events == 0 || max_bytes == 0 {
        return Err(PyValueError::new_err(format!(
            "batch limits must be positive, got max_events={max_events}, max_bytes={max_bytes}"
        )));
    }
    Ok(BatchLimits {
        max_events,
        max_bytes,
    })
}

/// Python events of native ones, one `BlockStored` per page.
fn py_events<'py>(py: Python<'py>, events: &[Event]) -> PyResult<Bound<'py, PyList>> {
    let classes = classes(py)?;
    let mut items = Vec::with_capacity(events.len());
    for event in events {
        push_events(py, classes, event, &mut items)?;
    }
    PyList::new(py, items)
}

/// What can go wrong while processing with the GIL released; converted once it is held again.
enum Failure {
    Recorder(RecorderError),
    Encode(EncodeError),
}

impl Failure {
    fn into_py(self, py: Python<'_>) -> PyErr {
        match self {
            Failure::Recorder(error) => recorder_error(py, error),
            Failure::Encode(error) => PyValueError::new_err(error.to_string()),
        }
    }
}

/// Encoded records as Python sees them: (record bytes, events in it).
type PyRecords<'py> = Vec<(Bound<'py, PyBytes>, usize)>;

fn py_records<'py>(py: Python<'py>, records: &[Record]) -> PyRecords<'py> {
    records
        .iter()
        .map(|record| (PyBytes::new(py, &record.bytes), record.events))
        .collect()
}

/// A step's events, cut: how many and how they split into batches, known before any hashing.
#[pyclass(frozen, module = "cache.events._native")]
pub struct RecordedCut {
    id: CutId,
    events: usize,
    batch_ends: Vec<usize>,
}

#[pymethods]
impl RecordedCut {
    /// The cut's id within its recorder.
    #[getter]
    fn id(&self) -> CutId {
        self.id
    }

    /// Per-page events in the cut.
    #[getter]
    fn events(&self) -> usize {
        self.events
    }

    /// Events of each batch the cut will be written as.
    #[getter]
    fn batch_events(&self) -> Vec<usize> {
        let mut start = 0;
        self.batch_ends
            .iter()
            .map(|&end| {
                let count = end - start;
                start = end;
                count
            })
            .collect()
    }

    fn __repr__(&self) -> String {
        format!(
            "RecordedCut(id={}, events={}, batches={})",
            self.id,
            self.events,
            self.batch_ends.len()
        )
    }
}

/// The native event recorder of one tree (see `crate::recorder`).
#[pyclass(frozen, module = "cache.events._native")]
pub struct EventRecorder {
    inner: Recorder,
}

#[pymethods]
impl EventRecorder {
    #[new]
    fn new(page_size: usize) -> PyResult<Self> {
        if page_size == 0 {
            return Err(PyValueError::new_err("page_size must be positive, got 0"));
        }
        Ok(EventRecorder {
            inner: Recorder::new(page_size),
        })
    }

    #[getter]
    fn page_size(&self) -> usize {
        self.inner.page_size()
    }

    // --- recording ------------------------------------------------------------------------

    #[pyo3(signature = (node_id, extra_key))]
    fn root(&self, node_id: u64, extra_key: Option<&str>) {
        self.inner.root(node_id, extra_key);
    }

    fn stored(&self, node_id: u64, parent_id: u64, token_ids: &Bound<'_, PyAny>) -> PyResult<()> {
        let tokens = tokens_u32(token_ids)?;
        if tokens.is_empty() || tokens.len() % self.inner.page_size() != 0 {
            return Err(PyValueError::new_err(format!(
                "node {node_id}: {} tokens is not a positive whole number of pages of {}",
                tokens.len(),
                self.inner.page_size()
            )));
        }
        self.inner.stored(node_id, parent_id, &tokens);
        Ok(())
    }

    fn removed(&self, node_id: u64, pages: usize) {
        self.inner.removed(node_id, pages);
    }

    fn swa_evicted(&self, node_id: u64, pages: usize) {
        self.inner.swa_evicted(node_id, pages);
    }

    fn swa_restored(&self, node_id: u64, pages: usize) {
        self.inner.swa_restored(node_id, pages);
    }

    fn split(&self, prefix_id: u64, suffix_id: u64, prefix_pages: usize) {
        self.inner.split(prefix_id, suffix_id, prefix_pages);
    }

    fn cleared(&self) {
        self.inner.cleared();
    }

    #[getter]
    fn pending_events(&self) -> usize {
        self.inner.pending_events()
    }

    // --- reading (processes what is pending first) ----------------------------------------

    fn take_events<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let events = py
            .detach(|| self.inner.take())
            .map_err(|e| recorder_error(py, e))?;
        py_events(py, &events)
    }

    fn digest(&self, py: Python<'_>) -> PyResult<u64> {
        py.detach(|| self.inner.digest())
            .map_err(|e| recorder_error(py, e))
    }

    fn snapshot_events<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let (events, _) = py
            .detach(|| self.inner.snapshot())
            .map_err(|e| recorder_error(py, e))?;
        py_events(py, &events)
    }

    fn block_hashes(&self, py: Python<'_>, node_id: u64) -> PyResult<Option<Vec<i64>>> {
        py.detach(|| self.inner.hashes_of(node_id))
            .map_err(|e| recorder_error(py, e))
    }

    // --- the publisher's path -------------------------------------------------------------

    fn cut(&self, max_events: usize, max_bytes: usize) -> PyResult<Option<RecordedCut>> {
        let limits = limits(max_events, max_bytes)?;
        Ok(self.inner.cut(limits).map(|cut| RecordedCut {
            id: cut.id,
            events: cut.events,
            batch_ends: cut.batch_ends,
        }))
    }

    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (cut, source, epoch, first_seq, ts, with_digest))]
    fn encode_cut<'py>(
        &self,
        py: Python<'py>,
        cut: &RecordedCut,
        source: &str,
        epoch: &str,
        first_seq: u64,
        ts: f64,
        with_digest: bool,
    ) -> PyResult<Option<PyRecords<'py>>> {
        let numbering = Numbering {
            source,
            epoch,
            first_seq,
            ts,
        };
        let encoded = py
            .detach(|| -> Result<_, Failure> {
                let outcome = self.inner.claim(cut.id).map_err(Failure::Recorder)?;
                outcome
                    .map(|outcome| step_records(outcome, &cut.batch_ends, &numbering, with_digest))
                    .transpose()
                    .map_err(Failure::Encode)
            })
            .map_err(|failure| failure.into_py(py))?;
        Ok(encoded.map(|records| py_records(py, &records)))
    }

    fn discard_all(&self) {
        self.inner.discard_all();
    }

    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (source, epoch, ts, meta_json, max_events, max_bytes))]
    fn encode_opening<'py>(
        &self,
        py: Python<'py>,
        source: &str,
        epoch: &str,
        ts: f64,
        meta_json: &str,
        max_events: usize,
        max_bytes: usize,
    ) -> PyResult<PyRecords<'py>> {
        let limits = limits(max_events, max_bytes)?;
        let numbering = Numbering {
            source,
            epoch,
            first_seq: 0,
            ts,
        };
        let page_size = self.inner.page_size();
        let records = py
            .detach(|| -> Result<_, Failure> {
                let (snapshot, digest) = self.inner.reopen().map_err(Failure::Recorder)?;
                opening_records(snapshot, digest, page_size, limits, &numbering, meta_json)
                    .map_err(Failure::Encode)
            })
            .map_err(|failure| failure.into_py(py))?;
        Ok(py_records(py, &records))
    }

    fn __repr__(&self) -> String {
        format!(
            "EventRecorder(page_size={}, pending_events={})",
            self.inner.page_size(),
            self.inner.pending_events()
        )
    }
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<EventRecorder>()?;
    module.add_class::<RecordedCut>()?;
    Ok(())
}

//! Bindings of `crate::replica`: the `ReplicaStore` class (apply, reads, snapshot bytes, prefix
//! match) and the SWA rule. Errors become the Python exceptions of `cache.events.replica_store`
//! (`ReplicaConsistencyError(source, reason)`, `ReplicaSnapshotError(reason)`); bad arguments
//! raise ValueError.

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyTuple, PyType};

use super::hashing::tokens_u32;
use crate::events::{Event, Stored};
use crate::hashing::namespace_prior;
use crate::replica::{self, swa_rule, Answer, ConsistencyError, Replica, SourceMeta};

const FACE: &str = "cache.events.replica_store";

static CONSISTENCY_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static SNAPSHOT_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

fn consistency_error(py: Python<'_>, error: ConsistencyError) -> PyErr {
    match CONSISTENCY_ERROR.import(py, FACE, "ReplicaConsistencyError") {
        Ok(class) => PyErr::from_type(class.clone(), (error.source, error.reason)),
        Err(err) => err,
    }
}

fn snapshot_error(py: Python<'_>, error: replica::SnapshotError) -> PyErr {
    match SNAPSHOT_ERROR.import(py, FACE, "ReplicaSnapshotError") {
        Ok(class) => PyErr::from_type(class.clone(), (error.reason,)),
        Err(err) => err,
    }
}

/// The event classes of `cache.events.types`, to tell events apart by exact type.
struct EventClasses {
    stored: Py<PyType>,
    removed: Py<PyType>,
    evicted: Py<PyType>,
    restored: Py<PyType>,
    cleared: Py<PyType>,
}

static EVENT_CLASSES: PyOnceLock<EventClasses> = PyOnceLock::new();

fn event_classes(py: Python<'_>) -> PyResult<&EventClasses> {
    EVENT_CLASSES.get_or_try_init(py, || {
        let types = py.import("cache.events.types")?;
        let class = |name: &str| -> PyResult<Py<PyType>> {
            Ok(types.getattr(name)?.cast_into::<PyType>()?.unbind())
        };
        Ok(EventClasses {
            stored: class("BlockStored")?,
            removed: class("BlockRemoved")?,
            evicted: class("BlockSWAEvicted")?,
            restored: class("BlockSWARestored")?,
            cleared: class("AllBlocksCleared")?,
        })
    })
}

/// One Python event as the core's `Event` (one object per event: the slow path for callers
/// that hold `EventBatch` objects; decoded records go through `apply_wire`).
fn event_from_py(
    py: Python<'_>,
    classes: &EventClasses,
    event: &Bound<'_, PyAny>,
) -> PyResult<Event> {
    let kind = event.get_type();
    let hashes = || -> PyResult<Vec<i64>> {
        event
            .getattr(intern!(py, "block_hashes"))?
            .extract::<Vec<i64>>()
    };
    if kind.is(classes.stored.bind(py)) {
        let block_size: i64 = event.getattr(intern!(py, "block_size"))?.extract()?;
        let block_size = u32::try_from(block_size)
            .ok()
            .filter(|&size| size > 0)
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "block_size must be a positive u32, got {block_size}"
                ))
            })?;
        let tokens: Vec<i64> = event.getattr(intern!(py, "token_ids"))?.extract()?;
        return Ok(Event::Stored(Stored {
            hashes: hashes()?,
            parent: event.getattr(intern!(py, "parent_block_hash"))?.extract()?,
            tokens: tokens_u32(&tokens)?,
            block_size,
            lora_id: event.getattr(intern!(py, "lora_id"))?.extract()?,
            medium: event.getattr(intern!(py, "medium"))?.extract()?,
        }));
    }
    if kind.is(classes.removed.bind(py)) {
        return Ok(Event::Removed {
            hashes: hashes()?,
            medium: event.getattr(intern!(py, "medium"))?.extract()?,
        });
    }
    if kind.is(classes.evicted.bind(py)) {
        return Ok(Event::SwaEvicted { hashes: hashes()? });
    }
    if kind.is(classes.restored.bind(py)) {
        return Ok(Event::SwaRestored { hashes: hashes()? });
    }
    if kind.is(classes.cleared.bind(py)) {
        return Ok(Event::Cleared);
    }
    Err(PyValueError::new_err(format!(
        "not a cache event: {}",
        kind.name()?
    )))
}

/// Every source's replica, held natively (see `crate::replica`).
#[pyclass(module = "cache.events._native", name = "ReplicaStore")]
#[derive(Default)]
pub(crate) struct PyReplicaStore {
    pub(crate) store: replica::ReplicaStore,
}

impl PyReplicaStore {
    fn replica(&self, source: &str) -> PyResult<&Replica> {
        self.store
            .get(source)
            .ok_or_else(|| PyValueError::new_err(format!("unknown source {source:?}")))
    }
}

#[pymethods]
impl PyReplicaStore {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    /// Every source seen, in the order first seen.
    fn sources(&self) -> Vec<String> {
        self.store
            .replicas()
            .iter()
            .map(|r| r.name.clone())
            .collect()
    }

    fn has_source(&self, source: &str) -> bool {
        self.store.id(source).is_some()
    }

    /// Create the (empty) replica of `source` when new.
    fn add_source(&mut self, source: &str) {
        self.store.id_or_create(source);
    }

    #[pyo3(signature = (source, page_size, sliding_window_size, swa_events, meta_json))]
    fn set_meta(
        &mut self,
        source: &str,
        page_size: u32,
        sliding_window_size: u32,
        swa_events: bool,
        meta_json: String,
    ) -> PyResult<()> {
        if page_size == 0 || sliding_window_size == 0 {
            return Err(PyValueError::new_err(
                "page_size and sliding_window_size must be positive",
            ));
        }
        self.store.replica_mut(source).meta = Some(SourceMeta {
            page_size,
            sliding_window_size,
            swa_events,
            json: meta_json,
        });
        Ok(())
    }

    fn meta_json(&self, source: &str) -> PyResult<Option<String>> {
        Ok(self.replica(source)?.meta.as_ref().map(|m| m.json.clone()))
    }

    /// Apply Python events to `source`'s replica; events before a failing one stay applied.
    fn apply_events(
        &mut self,
        py: Python<'_>,
        source: &str,
        events: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let classes = event_classes(py)?;
        let mut decoded = Vec::new();
        for event in events.try_iter()? {
            decoded.push(event_from_py(py, classes, &event?)?);
        }
        let store = &mut self.store;
        py.detach(|| store.apply_events(source, &decoded))
            .map_err(|error| consistency_error(py, error))
    }

    fn mark_diverged(&mut self, source: &str, reason: &str) {
        self.store.replica_mut(source).mark_diverged(reason);
    }

    fn clear(&mut self, source: &str) {
        self.store.replica_mut(source).clear();
    }

    fn diverged(&self, source: &str) -> PyResult<Option<String>> {
        Ok(self.replica(source)?.diverged.clone())
    }

    fn block_count(&self, source: &str) -> PyResult<usize> {
        Ok(self.replica(source)?.blocks.len())
    }

    fn tombstone_count(&self, source: &str) -> PyResult<u64> {
        Ok(self.replica(source)?.blocks.tombstone_count())
    }

    fn block_size(&self, source: &str) -> PyResult<Option<u32>> {
        Ok(self.replica(source)?.blocks.block_size())
    }

    fn residency(&self, source: &str, block_hash: i64) -> PyResult<Option<bool>> {
        Ok(self.replica(source)?.blocks.residency(block_hash))
    }

    /// (parent hash, token ids, SWA-resident) of one block, None when not held.
    #[allow(clippy::type_complexity)]
    fn block<'py>(
        &self,
        py: Python<'py>,
        source: &str,
        block_hash: i64,
    ) -> PyResult<Option<(Option<i64>, Bound<'py, PyTuple>, bool)>> {
        let Some(block) = self.replica(source)?.blocks.block(block_hash) else {
            return Ok(None);
        };
        let tokens = PyTuple::new(py, block.token_ids)?;
        Ok(Some((block.parent, tokens, block.swa_resident)))
    }

    /// Every block as (hash, parent hash, token ids, SWA-resident), in slot order.
    #[allow(clippy::type_complexity)]
    fn blocks<'py>(
        &self,
        py: Python<'py>,
        source: &str,
    ) -> PyResult<Vec<(i64, Option<i64>, Bound<'py, PyTuple>, bool)>> {
        self.replica(source)?
            .blocks
            .blocks()
            .map(|block| {
                let tokens = PyTuple::new(py, block.token_ids)?;
                Ok((block.block_hash, block.parent, tokens, block.swa_resident))
            })
            .collect()
    }

    fn digest_value(&self, source: &str) -> PyResult<String> {
        Ok(self.replica(source)?.blocks.digest().hexdigest())
    }

    fn state_digest(&self, source: &str) -> PyResult<Option<String>> {
        Ok(self.replica(source)?.state_digest())
    }

    /// Bytes the block tables hold (capacity).
    fn heap_bytes(&self) -> usize {
        self.store.heap_bytes()
    }

    /// Every replica as bytes (see `crate::replica::snapshot`).
    fn snapshot<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let store = &self.store;
        let bytes = py.detach(|| replica::to_bytes(store));
        PyBytes::new(py, &bytes)
    }

    /// Replace every replica with the ones `snapshot` wrote; nothing changes when `data` is bad.
    fn load(&mut self, py: Python<'_>, data: &[u8]) -> PyResult<()> {
        let loaded = py
            .detach(|| replica::from_bytes(data))
            .map_err(|error| snapshot_error(py, error))?;
        self.store = loaded;
        Ok(())
    }

    /// Per source, (held tokens, SWA-usable tokens) of `token_ids` in namespace `extra_key`:
    /// (None, None) when the source's state is unknown, usable None when the source does not
    /// report tombstones; sources holding none of it are left out.
    #[pyo3(signature = (token_ids, extra_key=None))]
    #[allow(clippy::type_complexity)]
    fn match_prefix(
        &self,
        py: Python<'_>,
        token_ids: Vec<i64>,
        extra_key: Option<&str>,
    ) -> PyResult<Vec<(String, Option<u64>, Option<u64>)>> {
        let tokens = tokens_u32(&token_ids)?;
        let prior = namespace_prior(extra_key);
        let store = &self.store;
        let answers = py.detach(|| replica::match_prefix(store, &prior, &tokens));
        Ok(answers
            .into_iter()
            .map(|(id, answer)| {
                let name = store.by_id(id).name.clone();
                match answer {
                    Answer::Unknown => (name, None, None),
                    Answer::Held { tokens, usable } => (name, Some(tokens), usable),
                }
            })
            .collect())
    }
}

/// (segments walked, leading segments usable) of a path of (tokens, resident) segments.
#[pyfunction]
fn swa_usable_prefix(segments: Vec<(u64, bool)>, sliding_window_size: u64) -> (usize, usize) {
    swa_rule::usable_prefix(&segments, sliding_window_size)
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<PyReplicaStore>()?;
    module.add_function(wrap_pyfunction!(swa_usable_prefix, module)?)?;
    Ok(())
}

//! Bindings of `crate::codec`: `decode_wire` into a `WireBatch`, `encode_batch`, `decode_event`
//! and `parse_meta`.
//!
//! A `WireBatch` holds its decoded `Batch` natively; Python objects for its events are only
//! made when asked for (`events`, `to_batch()`), one event per page. Native code
//! (the replica store's bindings) reads `WireBatch::batch` directly, with no Python object per
//! event.

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyTuple};
use pyo3::{intern, IntoPyObjectExt};

use super::classes::{classes, Classes};
use super::errors::{decode_error, encode_error};
use super::event_fields::{field, int_tuple, optional, PyField};
use super::events_in::event_from_py;
use super::meta::batch_meta;

use crate::codec::{self, Meta};
use crate::event_types::{kind, with_event_types, EventType};
use crate::events::{event_of, Batch, Event, Header, RemovalReason, Stored};

/// Records at least this long are decoded with the GIL released.
const DETACH_BYTES: usize = 64 * 1024;

/// One Python event of `event`, as it is (a multi-page store stays one event).
macro_rules! event_to_py {
    ($(
        $(#[$doc:meta])*
        $variant:ident $(($wrap:ident))? = $name:literal {
            $($(#[$fdoc:meta])* $field:ident: $kind:ident = $wire:literal, $presence:ident since $since:literal;)*
        }
    )*) => {
        fn event_to_py<'py>(
            py: Python<'py>,
            classes: &Classes,
            event: &Event,
        ) -> PyResult<Bound<'py, PyAny>> {
            match event {
                $(event_of!($variant [$($wrap)?] { $($field),* }) => {
                    let values = [$(<kind::$kind as PyField>::to_py(py, $field)?),*];
                    classes.event(EventType::$variant).make(py, values)
                })*
            }
        }
    };
}
with_event_types!(event_to_py);

/// Append the Python events of `event`: one per page for a `Stored`, else one.
pub(crate) fn push_events<'py>(
    py: Python<'py>,
    classes: &Classes,
    event: &Event,
    out: &mut Vec<Bound<'py, PyAny>>,
) -> PyResult<()> {
    match event {
        Event::Stored(stored) => push_pages(py, classes, stored, out),
        other => {
            out.push(event_to_py(py, classes, other)?);
            Ok(())
        }
    }
}

/// Append one Python `BlockStored` per page of `stored` (with empty `token_ids` when the
/// writer withheld them).
fn push_pages<'py>(
    py: Python<'py>,
    classes: &Classes,
    stored: &Stored,
    out: &mut Vec<Bound<'py, PyAny>>,
) -> PyResult<()> {
    if stored.block_size == 0 || !stored.tokens_fit() {
        // never decoded
        return Err(PyValueError::new_err(
            "a store of block_size 0, or whose token ids do not fit its pages",
        ));
    }
    let block_size = stored.block_size.into_bound_py_any(py)?;
    let lora_id = optional(py, stored.lora_id)?;
    let medium = optional(py, stored.medium.as_deref())?;
    let mut parent = optional(py, stored.parent)?;
    let pages = stored.hashes.iter().zip(stored.page_tokens());
    out.reserve(stored.hashes.len());
    for (&hash, tokens) in pages {
        let hash = hash.into_bound_py_any(py)?;
        let hashes = int_tuple(py, [&hash])?;
        let tokens = int_tuple(py, tokens)?;
        let fields = [
            hashes,
            parent,
            tokens,
            block_size.clone(),
            lora_id.clone(),
            medium.clone(),
        ];
        out.push(classes.event(EventType::Stored).make(py, fields)?);
        parent = hash;
    }
    Ok(())
}

/// One decoded record, held natively.
///
/// Header fields are attributes; `events` makes the per-page Python events on first use;
/// `to_batch()` gives the `EventBatch`. Native code reads `batch` (and `meta`) directly.
#[pyclass(frozen, module = "cache.events._native")]
pub struct WireBatch {
    /// The decoded batch, read in place by whoever applies it natively (held inline: one
    /// allocation less per record than behind an `Arc`).
    pub(crate) batch: Batch,
    /// The typed meta (present on an epoch's first batch).
    pub(crate) meta: Option<Arc<Meta>>,
    page_count: usize,
    events: PyOnceLock<Py<PyTuple>>,
    meta_object: PyOnceLock<Py<PyAny>>,
}

impl WireBatch {
    pub(crate) fn new(batch: Batch, meta: Option<Meta>) -> Self {
        let page_count = batch
            .events
            .iter()
            .map(|event| match event {
                Event::Stored(stored) => stored.hashes.len(),
                _ => 1,
            })
            .sum();
        WireBatch {
            batch,
            meta: meta.map(Arc::new),
            page_count,
            events: PyOnceLock::new(),
            meta_object: PyOnceLock::new(),
        }
    }

    fn header(&self) -> &Header {
        &self.batch.header
    }
}

#[pymethods]
impl WireBatch {
    #[getter]
    fn source(&self) -> &str {
        &self.header().source
    }

    #[getter]
    fn epoch(&self) -> &str {
        &self.header().epoch
    }

    #[getter]
    fn seq(&self) -> u64 {
        self.header().seq
    }

    #[getter]
    fn ts(&self) -> f64 {
        self.header().ts
    }

    #[getter]
    fn digest(&self) -> Option<&str> {
        self.header().digest.as_deref()
    }

    #[getter]
    fn v(&self) -> u8 {
        self.header().version
    }

    /// The epoch's `BatchMeta` (None on every batch but an epoch's first), made once from the
    /// native parse.
    #[getter]
    fn meta(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let (Some(meta), Some(text)) = (&self.meta, self.header().meta_json.as_deref()) else {
            return Ok(py.None());
        };
        self.meta_object
            .get_or_try_init(py, || batch_meta(py, meta, text))
            .map(|meta| meta.clone_ref(py))
    }

    /// Whether this batch can open an epoch: seq 0 and `AllBlocksCleared` first.
    #[getter]
    fn starts_epoch(&self) -> bool {
        self.batch.starts_epoch()
    }

    /// How many events `events` holds: one per page for stores.
    #[getter]
    fn event_count(&self) -> usize {
        self.page_count
    }

    /// The events, one frozen dataclass per page for stores (made on first use).
    #[getter]
    fn events(&self, py: Python<'_>) -> PyResult<Py<PyTuple>> {
        self.events
            .get_or_try_init(py, || {
                let classes = classes(py)?;
                let mut items = Vec::with_capacity(self.page_count);
                for event in &self.batch.events {
                    push_events(py, classes, event, &mut items)?;
                }
                Ok(PyTuple::new(py, items)?.unbind())
            })
            .map(|events| events.clone_ref(py))
    }

    /// The `EventBatch` of this record.
    fn to_batch(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let header = self.header();
        let class = classes(py)?.event_batch.bind(py);
        let batch = class.call1((
            &header.source,
            &header.epoch,
            header.seq,
            header.ts,
            self.events(py)?,
            header.digest.as_deref(),
            self.meta(py)?,
            header.version,
        ))?;
        Ok(batch.unbind())
    }

    fn __len__(&self) -> usize {
        self.page_count
    }

    fn __repr__(&self) -> String {
        let header = self.header();
        format!(
            "WireBatch(source={:?}, epoch={:?}, seq={}, v={}, events={})",
            header.source, header.epoch, header.seq, header.version, self.page_count
        )
    }
}

/// Decode one record into a `WireBatch`; `DecodeError` names what is wrong.
#[pyfunction]
fn decode_wire(
    py: Python<'_>,
    data: &Bound<'_, PyBytes>,
    max_record_bytes: usize,
) -> PyResult<WireBatch> {
    let bytes = data.as_bytes();
    let decoded = if bytes.len() >= DETACH_BYTES {
        py.detach(|| codec::decode_with_meta(bytes, max_record_bytes))
    } else {
        codec::decode_with_meta(bytes, max_record_bytes)
    };
    match decoded {
        Ok((batch, meta)) => Ok(WireBatch::new(batch, meta)),
        Err(error) => Err(decode_error(py, error)),
    }
}

/// Check a meta object given as JSON text: its `BatchMeta`, or `DecodeError` naming the first
/// wrong typed field (`meta.page_size`, ...).
#[pyfunction]
fn parse_meta(py: Python<'_>, text: &str) -> PyResult<Py<PyAny>> {
    let meta = Meta::from_json(text).map_err(|error| decode_error(py, error))?;
    batch_meta(py, &meta, text)
}

/// Decode one event object's JSON text as it is on the wire; errors are named under `path`.
#[pyfunction]
fn decode_event(py: Python<'_>, data: &[u8], path: &str) -> PyResult<Py<PyAny>> {
    let event = codec::decode_event(data, path).map_err(|error| decode_error(py, error))?;
    Ok(event_to_py(py, classes(py)?, &event)?.unbind())
}

/// The native `Batch` of an `EventBatch` (`meta_json`: its meta already as JSON text).
fn batch_from_py(
    py: Python<'_>,
    batch: &Bound<'_, PyAny>,
    meta_json: Option<String>,
) -> PyResult<Batch> {
    let classes = classes(py)?;
    let named = |name: &'static str| move || name.to_string();
    let header = Header {
        version: field(batch, intern!(py, "v"), named("v"))?,
        source: field(batch, intern!(py, "source"), named("source"))?,
        epoch: field(batch, intern!(py, "epoch"), named("epoch"))?,
        seq: field(batch, intern!(py, "seq"), named("seq"))?,
        ts: field(batch, intern!(py, "ts"), named("ts"))?,
        digest: field(batch, intern!(py, "digest"), named("digest"))?,
        meta_json,
    };
    let py_events = batch.getattr(intern!(py, "events"))?;
    let mut events = Vec::with_capacity(py_events.len()?);
    for (index, event) in py_events.try_iter()?.enumerate() {
        events.push(event_from_py(py, classes, &event?, index)?);
    }
    Ok(Batch { header, events })
}

/// The record of an `EventBatch`, compacted when its version is 2 or more; ValueError names what in
/// the batch would not decode again.
#[pyfunction]
#[pyo3(signature = (batch, meta_json))]
fn encode_batch<'py>(
    py: Python<'py>,
    batch: &Bound<'py, PyAny>,
    meta_json: Option<&[u8]>,
) -> PyResult<Bound<'py, PyBytes>> {
    let meta_json = meta_json
        .map(|text| String::from_utf8(text.to_vec()))
        .transpose()
        .map_err(|_| PyValueError::new_err("meta: not UTF-8"))?;
    let native = batch_from_py(py, batch, meta_json)?;
    let bytes = codec::encode(&native).map_err(encode_error)?;
    Ok(PyBytes::new(py, &bytes))
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<WireBatch>()?;
    module.add_function(wrap_pyfunction!(decode_wire, module)?)?;
    module.add_function(wrap_pyfunction!(decode_event, module)?)?;
    module.add_function(wrap_pyfunction!(parse_meta, module)?)?;
    module.add_function(wrap_pyfunction!(encode_batch, module)?)?;
    module.add("DEFAULT_MAX_RECORD_BYTES", codec::DEFAULT_MAX_RECORD_BYTES)?;
    module.add("WIRE_VERSION", codec::WIRE_VERSION)?;
    module.add(
        "SUPPORTED_VERSIONS",
        codec::SUPPORTED_VERSIONS.map(u32::from).to_vec(),
    )?;
    module.add(
        "REMOVAL_REASONS",
        RemovalReason::ALL.map(RemovalReason::name).to_vec(),
    )?;
    Ok(())
}

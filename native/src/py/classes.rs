//! The Python classes the bindings build or raise, handed over by the Python package.
//!
//! `cache.events` defines every event type once, as a frozen dataclass (`cache.events.types`),
//! and binds them here (`bind_classes`) when it imports this module: the native core never
//! imports the package that wraps it. An event is made through public C-API calls only: the
//! instance by `PyType_GenericNew` (what `object.__new__` does), each field set by
//! `PyObject_GenericSetAttr` (what `object.__setattr__` does past a frozen class's refusal).
//! Nothing depends on where an instance keeps its fields.

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyString, PyTuple, PyType};

use crate::event_types::{EventType, TYPE_COUNT};

/// An event class whose fields (its type's, `crate::event_types`) are set by name on instances
/// made without `__init__`; a class without fields has one instance, made once.
pub(crate) struct EventClass {
    class: Py<PyType>,
    fields: Box<[Py<PyString>]>,
    only: Option<Py<PyAny>>,
}

impl EventClass {
    /// The class bound for `kind`, whose dataclass fields must be `kind`'s in wire order (a
    /// `TypeError` naming the class otherwise).
    fn new(class: Bound<'_, PyType>, kind: EventType) -> PyResult<Self> {
        let py = class.py();
        let fields: Vec<&str> = kind.fields().iter().map(|field| field.name).collect();
        let declared: Vec<String> = class
            .getattr("__dataclass_fields__")
            .and_then(|declared| declared.try_iter()?.map(|name| name?.extract()).collect())
            .map_err(|_| PyTypeError::new_err(format!("{}: not a dataclass", type_name(&class))))?;
        if declared != fields {
            return Err(PyTypeError::new_err(format!(
                "{}: fields {declared:?}, the native core writes {fields:?}",
                type_name(&class)
            )));
        }
        let only = match fields.is_empty() {
            true => Some(class.call0()?.unbind()),
            false => None,
        };
        Ok(EventClass {
            fields: fields
                .iter()
                .map(|name| PyString::intern(py, name).unbind())
                .collect(),
            class: class.unbind(),
            only,
        })
    }

    /// The class.
    pub(crate) fn class<'py>(&self, py: Python<'py>) -> &Bound<'py, PyType> {
        self.class.bind(py)
    }

    /// An instance holding `values` in its fields, in wire order: a new one whose `__init__`
    /// does not run (a frozen dataclass's only assigns its arguments), or the one instance of a
    /// class without fields.
    pub(crate) fn make<'py, const N: usize>(
        &self,
        py: Python<'py>,
        values: [Bound<'py, PyAny>; N],
    ) -> PyResult<Bound<'py, PyAny>> {
        debug_assert_eq!(N, self.fields.len(), "{:?}", self.class);
        if let Some(only) = &self.only {
            return Ok(only.bind(py).clone());
        }
        let instance = new_uninitialised(self.class.bind(py))?;
        for (name, value) in self.fields.iter().zip(values) {
            set_field(&instance, name.bind(py), &value)?;
        }
        Ok(instance)
    }
}

fn type_name(class: &Bound<'_, PyType>) -> String {
    class
        .qualname()
        .map_or_else(|_| "?".to_owned(), |name| name.to_string())
}

/// An instance of `class` as `object.__new__(class)` makes it, its `__init__` not run: fill its
/// fields with `set_field` before anyone else sees it.
pub(crate) fn new_uninitialised<'py>(class: &Bound<'py, PyType>) -> PyResult<Bound<'py, PyAny>> {
    let py = class.py();
    let no_arguments = PyTuple::empty(py);
    // SAFETY: `class` is a live type object and the GIL is held (the `Bound` proves both);
    // `no_arguments` is a live tuple borrowed for the call and a NULL `kwds` is allowed.
    // PyType_GenericNew returns a new reference, or NULL with an exception set, which
    // `from_owned_ptr_or_err` turns into the error.
    unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            ffi::PyType_GenericNew(
                class.as_ptr().cast(),
                no_arguments.as_ptr(),
                std::ptr::null_mut(),
            ),
        )
    }
}

/// Set a field of a frozen dataclass instance as `object.__setattr__` does (the class's own
/// `__setattr__` refuses: it is frozen). Only used on instances made here, before anyone else
/// sees them.
pub(crate) fn set_field(
    instance: &Bound<'_, PyAny>,
    name: &Bound<'_, PyString>,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    // SAFETY: the three pointers are live references borrowed for the whole call (the `Bound`s
    // keep them alive) and the GIL is held, which a `Bound` proves. PyObject_GenericSetAttr
    // borrows its arguments (it steals no reference) and returns -1 with an exception set on
    // failure, which `PyErr::fetch` takes.
    let status =
        unsafe { ffi::PyObject_GenericSetAttr(instance.as_ptr(), name.as_ptr(), value.as_ptr()) };
    if status == 0 {
        Ok(())
    } else {
        Err(PyErr::fetch(instance.py()))
    }
}

/// The classes bound by `cache.events`.
pub(crate) struct Classes {
    /// Each event type's class, indexed by `EventType::index`.
    events: [EventClass; TYPE_COUNT],
    pub(crate) event_batch: Py<PyType>,
    pub(crate) batch_meta: Py<PyType>,
    pub(crate) decode_error: Py<PyType>,
    pub(crate) recorder_error: Py<PyType>,
    pub(crate) consistency_error: Py<PyType>,
    pub(crate) snapshot_error: Py<PyType>,
}

impl Classes {
    /// The class of events of type `kind`.
    pub(crate) fn event(&self, kind: EventType) -> &EventClass {
        &self.events[kind.index()]
    }
}

static CLASSES: PyOnceLock<Classes> = PyOnceLock::new();

/// The bound classes; a RuntimeError when `cache.events` has not bound them (it does on import).
pub(crate) fn classes(py: Python<'_>) -> PyResult<&Classes> {
    CLASSES.get(py).ok_or_else(|| {
        PyRuntimeError::new_err(
            "cache.events._native: the event classes are not bound (import cache.events first)",
        )
    })
}

/// The classes `bind_classes` takes besides one per event type.
const NON_EVENT_CLASSES: [&str; 6] = [
    "EventBatch",
    "BatchMeta",
    "DecodeError",
    "EventRecorderError",
    "ReplicaConsistencyError",
    "ReplicaSnapshotError",
];

/// Bind the Python classes the core builds and raises, by name: each event type's (its wire
/// name: `BlockStored`, ...), `EventBatch`, `BatchMeta`, `DecodeError`, `EventRecorderError`,
/// `ReplicaConsistencyError` and `ReplicaSnapshotError`. Only the first call binds; a later one
/// is ignored.
#[pyfunction]
fn bind_classes(py: Python<'_>, classes: &Bound<'_, PyDict>) -> PyResult<()> {
    if CLASSES.get(py).is_some() {
        return Ok(());
    }
    // A class the core does not declare (a Python event type without a row in
    // `event_types.rs`) would otherwise be encoded and decoded as nothing.
    for name in classes.keys() {
        let name: String = name.extract()?;
        if EventType::from_name(&name).is_none() && !NON_EVENT_CLASSES.contains(&name.as_str()) {
            return Err(PyTypeError::new_err(format!(
                "bind_classes: {name} is not a class the native core declares \
                 (an event type needs its row in native/src/event_types.rs)"
            )));
        }
    }
    let class = |name: &str| -> PyResult<Bound<'_, PyType>> {
        classes
            .get_item(name)?
            .ok_or_else(|| PyTypeError::new_err(format!("bind_classes: {name} missing")))?
            .cast_into::<PyType>()
            .map_err(|_| PyTypeError::new_err(format!("bind_classes: {name} is not a class")))
    };
    let events = EventType::ALL
        .into_iter()
        .map(|kind| EventClass::new(class(kind.name())?, kind))
        .collect::<PyResult<Vec<_>>>()?;
    let [event_batch, batch_meta, decode_error, recorder_error, consistency_error, snapshot_error] =
        NON_EVENT_CLASSES.map(class);
    let bound = Classes {
        events: events
            .try_into()
            .unwrap_or_else(|_| unreachable!("one class per type")),
        event_batch: event_batch?.unbind(),
        batch_meta: batch_meta?.unbind(),
        decode_error: decode_error?.unbind(),
        recorder_error: recorder_error?.unbind(),
        consistency_error: consistency_error?.unbind(),
        snapshot_error: snapshot_error?.unbind(),
    };
    // Another thread may have bound them meanwhile: the first binding stays.
    let _ = CLASSES.set(py, bound);
    Ok(())
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(bind_classes, module)?)?;
    Ok(())
}

//! A prompt's token ids (Python ints) as u32, read in one pass.
//!
//! A 4,096-token prompt is 4,096 int objects; through the stable ABI each costs two calls
//! (`PyList_GetItem`, `PyLong_AsLongLong`), about as much as hashing the prompt. On the CPython
//! versions whose object layouts are known here (3.11 to 3.14), a list's item array and a small
//! int's digits are read in place instead (`Layout`; other interpreters read exact ints through
//! the C API); any item that is not an exact int in range takes the general path, which gives
//! the same values and the same errors. Buffers of integers (`array.array`, `bytes`, NumPy vectors) are
//! copied in bulk.

use std::mem::size_of;

use pyo3::buffer::{Element, PyUntypedBuffer};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyInt, PyList};

/// The error for a token id that is not an int, or outside [0, 2**32).
fn bad_token(item: &Bound<'_, PyAny>) -> PyErr {
    match item.extract::<i64>() {
        Ok(token) => out_of_range(token),
        Err(_) if item.is_instance_of::<PyInt>() => {
            PyValueError::new_err(format!("token id {item} outside [0, 2**32)"))
        }
        Err(_) => PyTypeError::new_err(format!(
            "token ids must be ints, got {}",
            item.get_type()
                .name()
                .map_or_else(|_| "?".into(), |n| n.to_string())
        )),
    }
}

fn out_of_range(token: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("token id {token} outside [0, 2**32)"))
}

/// One item by the general conversion (any int, or an object with `__index__`).
fn general(item: &Bound<'_, PyAny>) -> PyResult<u32> {
    item.extract::<u32>().map_err(|_| bad_token(item))
}

/// Token ids of a prompt as u32 (TypeError for a non-int, ValueError for an id outside
/// [0, 2**32); the first bad item in order is the one named). A list is read in place, a buffer
/// of integers in bulk, any other sequence through its iterator.
pub(crate) fn prompt_tokens(token_ids: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
    if let Ok(list) = token_ids.cast::<PyList>() {
        return list_tokens(list, layout(list.py()));
    }
    if let Some(tokens) = buffer_tokens(token_ids)? {
        return Ok(tokens);
    }
    token_ids.try_iter()?.map(|item| general(&item?)).collect()
}

// --- lists --------------------------------------------------------------------------------------

/// How the running interpreter lays out an exact int's size and digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IntLayout {
    /// CPython 3.11: `PyObject_VAR_HEAD` (its `ob_size` is the digit count, negative for a
    /// negative int), then the 30-bit digits, least significant first.
    SignedSize,
    /// CPython 3.12 to 3.14: `PyObject_HEAD`, then `lv_tag` (the digit count shifted left by
    /// 3; sign in the low 2 bits: 0 positive, 1 zero, 2 negative), then the 30-bit digits.
    Tagged,
}

/// What this module knows of the running interpreter's layouts (None: use the C API only).
#[derive(Clone, Copy, Debug)]
struct Layout {
    int: IntLayout,
}

/// The word after the object header: an int's size or tag, a list's `ob_size`.
const SIZE_OFFSET: usize = 2 * size_of::<usize>();
/// An int's first digit; a list's item array pointer.
const BODY_OFFSET: usize = 3 * size_of::<usize>();

static LAYOUT: PyOnceLock<Option<Layout>> = PyOnceLock::new();

/// The layout, decided once: CPython 3.11 to 3.14, a release build with the GIL, 30-bit digits
/// in u32 cells, and a probe of sample ints and a list read through it equal to the C API's
/// answers.
fn layout(py: Python<'_>) -> Option<Layout> {
    *LAYOUT.get_or_init(py, || {
        let layout = known_layout(py).ok().flatten()?;
        probe(py, layout).ok().filter(|&ok| ok).map(|_| layout)
    })
}

fn known_layout(py: Python<'_>) -> PyResult<Option<Layout>> {
    let sys = py.import("sys")?;
    let cpython = sys
        .getattr("implementation")?
        .getattr("name")?
        .extract::<String>()?
        == "cpython";
    let int_info = sys.getattr("int_info")?;
    let bits: u32 = int_info.getattr("bits_per_digit")?.extract()?;
    let cell: usize = int_info.getattr("sizeof_digit")?.extract()?;
    // a free-threaded ("t") or debug ("d") build has another object header
    let abiflags: String = match sys.getattr("abiflags") {
        Ok(flags) => flags.extract()?,
        Err(_) => String::new(),
    };
    if !cpython || bits != 30 || cell != 4 || abiflags.contains(['t', 'd']) {
        return Ok(None);
    }
    let version = py.version_info();
    let int = match (version.major, version.minor) {
        (3, 11) => IntLayout::SignedSize,
        (3, 12..=14) => IntLayout::Tagged,
        _ => return Ok(None),
    };
    Ok(Some(Layout { int }))
}

/// Whether reading sample ints and a list through `layout` agrees with the C API.
fn probe(py: Python<'_>, layout: Layout) -> PyResult<bool> {
    let samples: [i128; 14] = [
        0,
        1,
        7,
        (1 << 30) - 1,
        1 << 30,
        (1 << 31) + 5,
        (1 << 32) - 1,
        1 << 32,
        (1 << 60) + 1,
        1 << 62,
        -1,
        -(1 << 31),
        1 << 64,
        (1 << 90) + 3,
    ];
    let ints: Vec<Bound<'_, PyAny>> = samples
        .iter()
        .map(|&value| Ok(value.into_pyobject(py)?.into_any()))
        .collect::<PyResult<_>>()?;
    let list = PyList::new(py, &ints)?;
    // SAFETY: `list` is a live list of `samples.len()` items, and no Python code runs while
    // the borrowed items are read.
    let items = unsafe { list_items(list.as_ptr(), samples.len()) };
    for ((&value, int), &item) in samples.iter().zip(&ints).zip(items) {
        if item != int.as_ptr() {
            return Ok(false);
        }
        // SAFETY: `item` is a live exact int (an element of `samples` made into one above),
        // held by `ints`, and the layout is the one `known_layout` chose for this interpreter.
        let fast = unsafe { small_int_of(item, layout.int) };
        if fast != u32::try_from(value).ok() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A list's item array (`len` borrowed references).
///
/// # Safety
/// `list` points to a live list (exact or subclass: the layout is the base's) of at least `len`
/// items, the GIL is held, no Python code runs while the slice is used (it could change the
/// list), and the interpreter is one `known_layout` accepts, where a list is
/// `PyObject_VAR_HEAD` followed by `PyObject **ob_item`.
#[inline]
unsafe fn list_items<'a>(list: *mut ffi::PyObject, len: usize) -> &'a [*mut ffi::PyObject] {
    if len == 0 {
        return &[];
    }
    let items = list
        .cast::<u8>()
        .add(BODY_OFFSET)
        .cast::<*mut *mut ffi::PyObject>()
        .read();
    std::slice::from_raw_parts(items, len)
}

/// The value of an exact int of at most two digits when it fits a u32, else None (the caller
/// then takes the general path: None never means "bad", only "not read here").
///
/// # Safety
/// `int` points to a live object whose type is exactly `int`, the GIL is held, and `TAGGED`
/// says whether the running interpreter's int layout is `IntLayout::Tagged` (else it is
/// `SignedSize`). Such an object holds the size word and at least as many digits as the size
/// word counts (and at least one), so only those are read.
#[inline(always)]
unsafe fn small_int<const TAGGED: bool>(int: *mut ffi::PyObject) -> Option<u32> {
    let base = int.cast::<u8>();
    let size = base.add(SIZE_OFFSET).cast::<isize>().read();
    let digits = base.add(BODY_OFFSET).cast::<u32>();
    // one positive digit, the common case, tested first (bit 2 of a tag is not the sign's)
    let one_digit = if TAGGED {
        size & !4 == 1 << 3
    } else {
        size == 1
    };
    if one_digit {
        return Some(digits.read());
    }
    let (negative, count) = if TAGGED {
        (size & 3 == 2, (size as usize) >> 3)
    } else {
        (size < 0, size.unsigned_abs())
    };
    if negative {
        return None;
    }
    match count {
        0 => Some(0),
        1 => Some(digits.read()),
        2 => {
            let high = digits.add(1).read();
            (high < 4).then(|| digits.read() | high << 30)
        }
        _ => None,
    }
}

/// `small_int` for the layout chosen at run time.
///
/// # Safety
/// As `small_int`, with `layout` the running interpreter's.
unsafe fn small_int_of(int: *mut ffi::PyObject, layout: IntLayout) -> Option<u32> {
    match layout {
        IntLayout::Tagged => small_int::<true>(int),
        IntLayout::SignedSize => small_int::<false>(int),
    }
}

/// Appends the values of the leading items that are exact ints read in place; returns how many.
///
/// # Safety
/// Every item is a live object, the GIL is held, and `TAGGED` says the running interpreter's
/// int layout (see `small_int`).
unsafe fn read_run<const TAGGED: bool>(items: &[*mut ffi::PyObject], out: &mut Vec<u32>) -> usize {
    let int_type = std::ptr::addr_of_mut!(ffi::PyLong_Type);
    let start = out.len();
    // written in place, then cut back to what was read: no capacity check per item
    out.resize(start + items.len(), 0);
    let mut done = 0;
    for (slot, &item) in out[start..].iter_mut().zip(items) {
        if ffi::Py_TYPE(item) != int_type {
            break;
        }
        let Some(value) = small_int::<TAGGED>(item) else {
            break;
        };
        *slot = value;
        done += 1;
    }
    out.truncate(start + done);
    done
}

/// `read_run` through the C API, for interpreters whose layouts are not known here: items
/// `at..len` of `list` while they are exact ints in range.
///
/// # Safety
/// `list` is a live list of at least `len` items and the GIL is held; the caller runs no
/// Python code between reading `len` and this call.
unsafe fn read_run_api(
    list: &Bound<'_, PyList>,
    at: usize,
    len: usize,
    out: &mut Vec<u32>,
) -> usize {
    for index in at..len {
        // a borrowed reference, valid while the list holds it: nothing here runs Python code
        let item = ffi::PyList_GetItem(list.as_ptr(), index as ffi::Py_ssize_t);
        if item.is_null() || ffi::PyLong_CheckExact(item) == 0 {
            let _ = PyErr::take(list.py());
            return index - at;
        }
        // an exact int: read without running Python code; -1 with an exception set when it
        // does not fit, which is cleared (the general path then names the error)
        let Ok(value) = u32::try_from(ffi::PyLong_AsLongLong(item)) else {
            let _ = PyErr::take(list.py());
            return index - at;
        };
        out.push(value);
    }
    len - at
}

fn list_tokens(list: &Bound<'_, PyList>, layout: Option<Layout>) -> PyResult<Vec<u32>> {
    // The length is read once and again only after the general path, the one place where
    // Python code (an `__index__`) can run and change the list.
    let mut len = list.len();
    let mut tokens = Vec::with_capacity(len);
    let mut at = 0;
    while at < len {
        // SAFETY: `list` is a live list (the `Bound` keeps it alive and proves the GIL is held)
        // of `len` items, read when no Python code could have run since; nothing in `read_run`
        // or `read_run_api` runs Python code (they only read exact ints); `layout` is only Some
        // on an interpreter `known_layout` accepts and `probe` confirmed.
        at += unsafe {
            match layout.map(|layout| layout.int) {
                Some(IntLayout::Tagged) => {
                    read_run::<true>(&list_items(list.as_ptr(), len)[at..], &mut tokens)
                }
                Some(IntLayout::SignedSize) => {
                    read_run::<false>(&list_items(list.as_ptr(), len)[at..], &mut tokens)
                }
                None => read_run_api(list, at, len, &mut tokens),
            }
        };
        if at == len {
            break;
        }
        // the general path: an owned reference, then the general conversion and its errors
        let item = list.get_item(at)?;
        tokens.push(general(&item)?);
        at += 1;
        len = list.len();
    }
    Ok(tokens)
}

// --- buffers ------------------------------------------------------------------------------------

/// The ids of a one-dimensional buffer of native-order integers, None when `token_ids` is not
/// one (the iterator path then reads it; it yields these same values, as Python ints).
fn buffer_tokens(token_ids: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u32>>> {
    // SAFETY: `token_ids` is a live object and the GIL is held (the `Bound` proves both);
    // PyObject_CheckBuffer only reads its type's slots.
    if unsafe { ffi::PyObject_CheckBuffer(token_ids.as_ptr()) } == 0 {
        return Ok(None);
    }
    let Ok(buffer) = PyUntypedBuffer::get(token_ids) else {
        return Ok(None);
    };
    let format = buffer.format().to_bytes();
    let code = match format {
        [code] | [b'@' | b'=', code] => *code,
        [b'<', code] if cfg!(target_endian = "little") => *code,
        _ => return Ok(None),
    };
    if buffer.dimensions() != 1 {
        return Ok(None);
    }
    let py = token_ids.py();
    match (code, buffer.item_size()) {
        (b'B', 1) => typed::<u8>(py, &buffer),
        (b'b', 1) => typed::<i8>(py, &buffer),
        (b'H', 2) => typed::<u16>(py, &buffer),
        (b'h', 2) => typed::<i16>(py, &buffer),
        (b'I' | b'L' | b'N', 4) => typed::<u32>(py, &buffer),
        (b'i' | b'l' | b'n', 4) => typed::<i32>(py, &buffer),
        (b'I' | b'L' | b'Q' | b'N', 8) => typed::<u64>(py, &buffer),
        (b'i' | b'l' | b'q' | b'n', 8) => typed::<i64>(py, &buffer),
        _ => Ok(None),
    }
}

/// The ids of `buffer` read as `T`s (None when pyo3 does not accept it as one).
fn typed<T>(py: Python<'_>, buffer: &PyUntypedBuffer) -> PyResult<Option<Vec<u32>>>
where
    T: Element + std::fmt::Display,
    u32: TryFrom<T>,
{
    let Ok(buffer) = buffer.as_typed::<T>() else {
        return Ok(None);
    };
    let values = buffer.to_vec(py)?;
    values
        .into_iter()
        .map(|value| u32::try_from(value).map_err(|_| out_of_range(value)))
        .collect::<PyResult<Vec<u32>>>()
        .map(Some)
}

/// The ids `token_ids` reads as (what prefix matching hashes), for tests: `in_place` False reads
/// a list through the C API only, as on an interpreter whose layouts are not known here.
#[pyfunction]
fn prompt_token_ids(token_ids: &Bound<'_, PyAny>, in_place: bool) -> PyResult<Vec<u32>> {
    match token_ids.cast::<PyList>() {
        Ok(list) if !in_place => list_tokens(list, None),
        _ => prompt_tokens(token_ids),
    }
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(prompt_token_ids, module)?)?;
    Ok(())
}

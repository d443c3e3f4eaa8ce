//! Inputs converted at the boundary: token ids, masks, formats and the
//! caller's output buffers become Rust values here, with the argument
//! named in every error; nothing past this module sees a Python object.

use engram::prefetch::RowFormat;
use numpy::{PyArray1, PyArrayDescrMethods, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::IntoPyDict;

use crate::errors::{invalid, wrong_type};

/// `numpy.asarray` and `numpy.ascontiguousarray`, looked up once.
static NUMPY: PyOnceLock<(Py<PyAny>, Py<PyAny>)> = PyOnceLock::new();

fn numpy_fns(py: Python<'_>) -> PyResult<&(Py<PyAny>, Py<PyAny>)> {
    NUMPY.get_or_try_init(py, || {
        let np = py.import("numpy")?;
        Ok((
            np.getattr("asarray")?.unbind(),
            np.getattr("ascontiguousarray")?.unbind(),
        ))
    })
}

/// `obj` as a numpy array: lists, tuples, numpy arrays, CPU tensors (via
/// their `__array__`) and buffer objects (bytearray, memoryview) all
/// convert without a copy where numpy can share the memory.
fn as_array<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Bound<'py, PyUntypedArray>> {
    let py = obj.py();
    let array = numpy_fns(py)?.0.bind(py).call1((obj,)).map_err(|e| {
        wrong_type(format!(
            "{what}: expected a list, numpy array, CPU tensor or buffer ({e})"
        ))
    })?;
    array
        .cast_into::<PyUntypedArray>()
        .map_err(|_| wrong_type(format!("{what}: numpy.asarray did not give an array")))
}

/// A 1-D array of integers (or bools) read into `i128` values, `what`
/// naming the argument.
fn integers(obj: &Bound<'_, PyAny>, what: &str, bools: bool) -> PyResult<Vec<i128>> {
    let array = as_array(obj, what)?;
    if array.ndim() != 1 {
        return Err(invalid(format!(
            "{what}: expected a 1-D sequence, got {} dimensions",
            array.ndim()
        )));
    }
    if array.len() == 0 {
        return Ok(Vec::new()); // an empty list is float64 to numpy
    }
    let kind = array.dtype().kind();
    let ok = matches!(kind, b'i' | b'u') || (bools && kind == b'b');
    if !ok {
        return Err(wrong_type(format!(
            "{what}: expected integers{}, got dtype {}",
            if bools { " or bools" } else { "" },
            array.dtype()
        )));
    }
    // Widen to the 64-bit integer of the same signedness (exact for every
    // integer dtype), C-contiguous, then read the values in place.
    let py = obj.py();
    let wide = if kind == b'i' { "int64" } else { "uint64" };
    let converted = numpy_fns(py)?
        .1
        .bind(py)
        .call((&array,), Some(&[("dtype", wide)].into_py_dict(py)?))?;
    if kind == b'i' {
        values::<i64>(converted, what)
    } else {
        values::<u64>(converted, what)
    }
}

/// The values of a 1-D array of `T` (just converted to it) as `i128`.
fn values<T: numpy::Element + Copy + Into<i128>>(
    array: Bound<'_, PyAny>,
    what: &str,
) -> PyResult<Vec<i128>> {
    let array = array
        .cast_into::<PyArray1<T>>()
        .map_err(|_| invalid(format!("{what}: not convertible to a 64-bit integer array")))?;
    let values = array.readonly();
    Ok(values
        .as_slice()
        .map_err(|e| invalid(format!("{what}: {e}")))?
        .iter()
        .map(|&v| v.into())
        .collect())
}

/// Token ids: a list, tuple, numpy array or CPU tensor of integers, each
/// in `0..2^32` (the vocabulary check is the library's).
pub(crate) fn tokens(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u32>> {
    integers(obj, what, false)?
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            u32::try_from(v)
                .map_err(|_| invalid(format!("{what}[{i}] is {v}: not a token id (0..2^32)")))
        })
        .collect()
}

/// Probabilities: a list, tuple or 1-d array of floats (None: empty). The
/// range check ([0, 1], NaN refused) is the library's, which names the
/// argument and the index.
pub(crate) fn probs(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Vec<f32>> {
    let Some(obj) = obj else {
        return Ok(Vec::new());
    };
    if obj.is_instance_of::<pyo3::types::PyString>() {
        return Err(invalid(format!("{what}: expected numbers, got a str")));
    }
    let values: Vec<f64> = obj
        .extract()
        .map_err(|_| invalid(format!("{what}: expected a sequence of numbers")))?;
    // Narrowed to f32 as the library keeps them; a value past f32's range
    // becomes infinite and is refused there as outside [0, 1].
    Ok(values.into_iter().map(|v| v as f32).collect())
}

/// A mask in the attention-mask convention: nonzero / True a real token,
/// 0 / False padding. None: every token real.
pub(crate) fn mask(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<bool>>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => Ok(Some(
            integers(o, "mask", true)?
                .into_iter()
                .map(|v| v != 0)
                .collect(),
        )),
    }
}

/// A token id (a Python int or a 0-d integer array / tensor).
pub(crate) fn token(obj: &Bound<'_, PyAny>) -> PyResult<u32> {
    let value: i128 = match obj.extract::<i128>() {
        Ok(v) if !obj.is_instance_of::<pyo3::types::PyBool>() => v,
        _ => {
            let array = as_array(obj, "token")?;
            if array.len() != 1 || !matches!(array.dtype().kind(), b'i' | b'u') {
                return Err(wrong_type(format!(
                    "token: expected an int, got {}",
                    obj.get_type().name()?
                )));
            }
            array.call_method0("item")?.extract()?
        }
    };
    u32::try_from(value).map_err(|_| invalid(format!("token is {value}: not a token id (0..2^32)")))
}

/// A row format name (`format` arguments of waits and reads), parsed as
/// the engine option is.
pub(crate) fn format(name: &str, what: &str) -> PyResult<RowFormat> {
    RowFormat::parse(name)
        .ok_or_else(|| invalid(format!("{what} {name:?}: expected \"f32\" or \"raw\"")))
}

/// An engine option's value as the text the core's option table parses:
/// a bool as 0 or 1, an int in decimal, a str or path as it is; None
/// (leave the default) as `None`. Any other type is a TypeError naming the
/// option.
pub(crate) fn option_text(name: &str, value: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    if value.is_none() {
        return Ok(None);
    }
    if let Ok(b) = value.cast::<pyo3::types::PyBool>() {
        return Ok(Some(if b.is_true() { "1" } else { "0" }.into()));
    }
    if let Ok(i) = value.extract::<i128>() {
        return Ok(Some(i.to_string()));
    }
    if let Ok(s) = value.extract::<String>() {
        return Ok(Some(s));
    }
    if let Ok(p) = value.extract::<std::path::PathBuf>() {
        return Ok(Some(p.to_string_lossy().into_owned()));
    }
    Err(wrong_type(format!(
        "option {name}: expected a bool, int, str or path, got {}",
        value.get_type().name()?
    )))
}

/// A caller's output buffer: where the rows go, checked before any wait.
pub(crate) struct OutBuffer {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the pointer is written only while the caller's call holds the
// buffer's exporting array (and so its memory) alive; see `OutBuffer::of`.
unsafe impl Send for OutBuffer {}

impl OutBuffer {
    /// The memory of `obj` (a writable C-contiguous numpy array, CPU
    /// tensor, bytearray or writable memoryview) for rows of `format`:
    /// float32 elements for f32 rows, or bytes (uint8 / int8) for either
    /// format. At least `need` bytes.
    ///
    /// The returned array must stay alive (the caller keeps it on its
    /// stack) while the buffer is written: it holds the export of the
    /// object's memory, so a bytearray cannot be resized meanwhile.
    pub(crate) fn of<'py>(
        obj: &Bound<'py, PyAny>,
        format: RowFormat,
        need: usize,
    ) -> PyResult<(OutBuffer, Bound<'py, PyUntypedArray>)> {
        let array = as_array(obj, "out")?;
        let dtype = array.dtype();
        let (kind, size) = (dtype.kind(), dtype.itemsize());
        let bytes = matches!(kind, b'u' | b'i') && size == 1;
        let floats = kind == b'f' && size == 4;
        let fits = match format {
            RowFormat::F32 => bytes || floats,
            RowFormat::Raw => bytes,
        };
        if !fits {
            return Err(wrong_type(format!(
                "out: dtype {dtype} does not hold {} rows (use {})",
                format.name(),
                match format {
                    RowFormat::F32 => "float32 or uint8",
                    RowFormat::Raw => "uint8",
                }
            )));
        }
        if !array.is_c_contiguous() {
            return Err(invalid("out: the buffer is not C-contiguous"));
        }
        // SAFETY: `array` is a live numpy array; its object header is
        // readable while we hold it.
        let (ptr, flags) = unsafe {
            let fields = numpy::npyffi::objects::_PyArray_GET_ITEM_DATA(array.as_array_ptr());
            ((*fields).data.cast::<u8>(), (*fields).flags)
        };
        if flags & numpy::npyffi::NPY_ARRAY_WRITEABLE == 0 {
            return Err(invalid("out: the buffer is read-only"));
        }
        let len = array.len() * size;
        if len < need {
            return Err(invalid(format!(
                "out: {len} bytes; the rows need {need} (nothing was consumed)"
            )));
        }
        Ok((OutBuffer { ptr, len }, array))
    }

    /// The buffer as a byte slice.
    ///
    /// # Safety
    /// The array returned with it by [`OutBuffer::of`] is still alive and
    /// nothing else writes the memory meanwhile.
    pub(crate) unsafe fn bytes(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: per the caller's contract the memory is live and ours.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

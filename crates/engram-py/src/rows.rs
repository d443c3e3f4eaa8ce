//! Rows handed to Python: copied out of the engine's buffers into arrays
//! that own their memory, so an array stays valid (and unchanged) however
//! long it lives, whatever the engine does next.

use engram::prefetch::RowsView;
use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;

use crate::engine::f32_bytes;

/// A copy of a wait's rows, made without the GIL.
pub(crate) struct OwnedRows {
    /// tokens x rows_per_token x values per row (the encoding's values per
    /// row as f32, or row_bytes bytes).
    shape: [usize; 3],
    data: RowData,
}

/// The copied values, in the engine's delivered format.
enum RowData {
    /// Decoded values.
    F32(Vec<f32>),
    /// Stored bytes.
    Raw(Vec<u8>),
}

impl OwnedRows {
    /// Copies `view` (both ring parts, in token order).
    pub(crate) fn copy(view: &RowsView<'_>) -> engram::Result<OwnedRows> {
        let (tokens, rows_per_token) = (view.len(), view.rows_per_token());
        Ok(if view.is_f32() {
            let mut values = vec![0f32; view.byte_len() / 4];
            view.copy_to(f32_bytes(&mut values))?;
            OwnedRows {
                // An f32 view's rows are the encoding's values, 4 bytes each.
                shape: [tokens, rows_per_token, view.row_bytes() / 4],
                data: RowData::F32(values),
            }
        } else {
            let mut bytes = vec![0u8; view.byte_len()];
            view.copy_to(&mut bytes)?;
            OwnedRows {
                shape: [tokens, rows_per_token, view.row_bytes()],
                data: RowData::Raw(bytes),
            }
        })
    }

    /// The rows as a numpy array of shape (tokens, rows_per_token, values
    /// per row) float32 or (tokens, rows_per_token, row_bytes) uint8, owning the
    /// copy (no second copy is made).
    pub(crate) fn into_array(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        Ok(match self.data {
            RowData::F32(values) => PyArray1::from_vec(py, values)
                .reshape(self.shape)?
                .into_any(),
            RowData::Raw(bytes) => PyArray1::from_vec(py, bytes)
                .reshape(self.shape)?
                .into_any(),
        })
    }
}

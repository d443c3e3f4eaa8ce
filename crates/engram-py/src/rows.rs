//! Rows handed to Python: copied out of the engine's buffers into arrays
//! that own their memory, so an array stays valid (and unchanged) however
//! long it lives, whatever the engine does next.

use engram::codec::ROW_DIM;
use engram::prefetch::RowsView;
use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;

use crate::engine::f32_bytes;

/// A copy of a wait's rows, made without the GIL.
pub(crate) enum OwnedRows {
    /// Decoded values: tokens x rows_per_token x ROW_DIM.
    F32 {
        values: Vec<f32>,
        tokens: usize,
        rows_per_token: usize,
    },
    /// Stored bytes: tokens x rows_per_token x row_bytes.
    Raw {
        bytes: Vec<u8>,
        tokens: usize,
        rows_per_token: usize,
        row_bytes: usize,
    },
}

impl OwnedRows {
    /// Copies `view` (both ring parts, in token order).
    pub(crate) fn copy(view: &RowsView<'_>) -> engram::Result<OwnedRows> {
        let (tokens, rows_per_token) = (view.len(), view.rows_per_token());
        if view.is_f32() {
            let mut values = vec![0f32; view.byte_len() / 4];
            view.copy_to(f32_bytes(&mut values))?;
            Ok(OwnedRows::F32 {
                values,
                tokens,
                rows_per_token,
            })
        } else {
            let mut bytes = vec![0u8; view.byte_len()];
            view.copy_to(&mut bytes)?;
            Ok(OwnedRows::Raw {
                bytes,
                tokens,
                rows_per_token,
                row_bytes: view.row_bytes(),
            })
        }
    }

    /// The rows as a numpy array of shape (tokens, rows_per_token, 256)
    /// float32 or (tokens, rows_per_token, row_bytes) uint8, owning the
    /// copy (no second copy is made).
    pub(crate) fn into_array(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        match self {
            OwnedRows::F32 {
                values,
                tokens,
                rows_per_token,
            } => Ok(PyArray1::from_vec(py, values)
                .reshape([tokens, rows_per_token, ROW_DIM])?
                .into_any()),
            OwnedRows::Raw {
                bytes,
                tokens,
                rows_per_token,
                row_bytes,
            } => Ok(PyArray1::from_vec(py, bytes)
                .reshape([tokens, rows_per_token, row_bytes])?
                .into_any()),
        }
    }
}

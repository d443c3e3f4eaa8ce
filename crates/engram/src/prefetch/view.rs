//! A borrowed view of consecutive tokens' rows in a ring buffer.

use crate::{Error, Result};

/// Rows of tokens `first_token..first_token + len()` of one table: per token
/// `rows_per_token` rows of `row_bytes` bytes, token-major, in at most two
/// contiguous parts (the ring may wrap between them).
///
/// In Rust the borrow ends the view at the next call on its prefill or
/// sequence. The memory itself stays untouched until the next wait on the
/// same table (or the prefill's drop, or the next `step_begin`), which is
/// the contract a foreign-function caller holding the [`RowsView::parts`]
/// pointers can rely on.
#[derive(Debug, Clone, Copy)]
pub struct RowsView<'a> {
    pub(crate) first_token: u32,
    pub(crate) rows_per_token: usize,
    pub(crate) row_bytes: usize,
    /// Rows are f32 values (native endian), not stored bytes.
    pub(crate) f32: bool,
    pub(crate) parts: [&'a [u8]; 2],
}

impl<'a> RowsView<'a> {
    /// Index of the first token in the view.
    pub fn first_token(&self) -> u32 {
        self.first_token
    }

    /// Tokens in the view.
    pub fn len(&self) -> usize {
        (self.parts[0].len() + self.parts[1].len()) / self.token_bytes().max(1)
    }

    /// True when the view holds no token.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rows per token (one per hash head and n-gram order).
    pub fn rows_per_token(&self) -> usize {
        self.rows_per_token
    }

    /// Bytes per row.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    fn token_bytes(&self) -> usize {
        self.rows_per_token * self.row_bytes
    }

    /// The view's bytes as at most two contiguous parts, in token order.
    pub fn parts(&self) -> (&'a [u8], &'a [u8]) {
        (self.parts[0], self.parts[1])
    }

    /// The rows of the `i`-th token of the view (`rows_per_token * row_bytes`
    /// bytes), or `None` past the end.
    pub fn token(&self, i: usize) -> Option<&'a [u8]> {
        let tb = self.token_bytes();
        let in_first = self.parts[0].len() / tb.max(1);
        if i < in_first {
            self.parts[0].get(i * tb..(i + 1) * tb)
        } else {
            let j = i - in_first;
            self.parts[1].get(j * tb..(j + 1) * tb)
        }
    }

    /// Row `column` of the `i`-th token of the view.
    pub fn row(&self, i: usize, column: usize) -> Option<&'a [u8]> {
        if column >= self.rows_per_token {
            return None;
        }
        self.token(i)
            .map(|t| &t[column * self.row_bytes..(column + 1) * self.row_bytes])
    }

    /// Total bytes in the view.
    pub fn byte_len(&self) -> usize {
        self.parts[0].len() + self.parts[1].len()
    }

    /// Copies the view into `out`, which must be exactly [`Self::byte_len`]
    /// bytes.
    pub fn copy_to(&self, out: &mut [u8]) -> Result<()> {
        if out.len() != self.byte_len() {
            return Err(Error::InvalidArgument(format!(
                "output buffer of {} bytes for {} tokens of {} bytes",
                out.len(),
                self.len(),
                self.token_bytes()
            )));
        }
        let (a, b) = out.split_at_mut(self.parts[0].len());
        a.copy_from_slice(self.parts[0]);
        b.copy_from_slice(self.parts[1]);
        Ok(())
    }

    /// True when the rows are decoded f32 values ([`RowFormat::F32`]).
    ///
    /// [`RowFormat::F32`]: super::RowFormat::F32
    pub fn is_f32(&self) -> bool {
        self.f32
    }

    /// The decoded values of the `i`-th token of the view
    /// (`rows_per_token` times the encoding's values per row), or `None`
    /// past the end or for raw rows.
    pub fn token_f32(&self, i: usize) -> Option<&'a [f32]> {
        if !self.f32 {
            return None;
        }
        // SAFETY: f32 rows were written as f32 at 4-aligned offsets of an
        // 8-aligned buffer; any bit pattern is a valid f32.
        let (head, values, tail) = unsafe { self.token(i)?.align_to::<f32>() };
        (head.is_empty() && tail.is_empty()).then_some(values)
    }

    /// All decoded values of the view in token order (empty for raw rows).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        (0..self.len())
            .filter_map(|i| self.token_f32(i))
            .flatten()
            .copied()
            .collect()
    }

    /// The view's bytes as one vector.
    pub fn to_vec(&self) -> Vec<u8> {
        [self.parts[0], self.parts[1]].concat()
    }
}

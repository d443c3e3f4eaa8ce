//! Which model a hot-row file belongs to: the layout digest and the table
//! files' shapes and sizes, compared at load so a hot file of another model
//! is refused before a single row of it is served.

use serde::{Deserialize, Serialize};

use crate::layout::Layout;
use crate::model::Model;
use crate::{Error, Result};

/// What identifies one table of a model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableIdentity {
    /// Layer that consumes the table.
    pub layer_id: u32,
    /// Encoding name as model files write it.
    pub encoding: String,
    /// Bytes per delivered row (values plus split scales).
    pub row_bytes: u32,
    /// Rows in the table.
    pub rows: u64,
    /// Size of the file holding the rows (for split tables: the values).
    pub file_bytes: u64,
    /// Size of the file holding split scales, 0 when scales are inline.
    pub scale_file_bytes: u64,
    /// Sizes of the table's further files (sharded tables), in first-use
    /// order after the first two; empty for one- and two-file tables.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more_file_bytes: Vec<u64>,
}

/// What identifies a model for a hot-row file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelIdentity {
    /// The model's table file as it was opened (for messages only: a model
    /// may move and stay the same model).
    pub name: String,
    /// [`layout_digest`] of the model's layout, as 16 hex digits.
    pub layout_digest: String,
    /// One entry per table, in layout order.
    pub tables: Vec<TableIdentity>,
}

impl ModelIdentity {
    /// The identity of an opened model (reads its table files' sizes).
    pub fn of(model: &Model) -> Result<ModelIdentity> {
        let size = |path: &std::path::Path| -> Result<u64> {
            Ok(std::fs::metadata(path)
                .map_err(|e| Error::io(path, e))?
                .len())
        };
        let mut tables = Vec::with_capacity(model.tables.len());
        for t in &model.tables {
            let sizes = t
                .files()
                .into_iter()
                .map(size)
                .collect::<Result<Vec<u64>>>()?;
            tables.push(TableIdentity {
                layer_id: t.layer_id,
                encoding: t.encoding.name().to_string(),
                row_bytes: t.full_row_bytes() as u32,
                rows: t.rows,
                file_bytes: sizes.first().copied().unwrap_or(0),
                scale_file_bytes: sizes.get(1).copied().unwrap_or(0),
                more_file_bytes: sizes.get(2..).unwrap_or_default().to_vec(),
            });
        }
        Ok(ModelIdentity {
            name: model
                .tables
                .first()
                .map(|t| t.first_file().display().to_string())
                .unwrap_or_default(),
            layout_digest: format!("{:016x}", layout_digest(&model.layout)),
            tables,
        })
    }

    /// Whether `self` and `other` are the same model (the name aside).
    pub fn matches(&self, other: &ModelIdentity) -> bool {
        self.layout_digest == other.layout_digest && self.tables == other.tables
    }

    /// A one-line description for error messages.
    pub fn describe(&self) -> String {
        let tables: Vec<String> = self
            .tables
            .iter()
            .map(|t| {
                format!(
                    "layer {} {} rows of {} B in a {} B file",
                    t.layer_id, t.rows, t.row_bytes, t.file_bytes
                )
            })
            .collect();
        format!(
            "{} (layout digest {}; {})",
            self.name,
            self.layout_digest,
            tables.join(", ")
        )
    }
}

/// A 64-bit FNV-1a digest of everything the hash depends on: the shape,
/// the token map, and per table the layer, primes, offsets and multipliers.
/// Not cryptographic: it tells models apart, it does not authenticate them.
pub fn layout_digest(layout: &Layout) -> u64 {
    let mut d = Fnv::default();
    // DeepSeek digests stay what they were before the second family, so
    // hot files made then still load; other families are told apart.
    if layout.family != crate::layout::Family::DeepSeekEngram {
        d.bytes(layout.family.name().as_bytes());
    }
    d.u64(layout.max_ngram_size as u64);
    d.u64(layout.n_heads as u64);
    d.u64(layout.head_dim as u64);
    d.u64(u64::from(layout.compressed_vocab_size));
    d.u64(u64::from(layout.pad_compressed_id));
    d.u64(layout.token_map.len() as u64);
    layout.token_map.iter().for_each(|&id| d.u32(id));
    d.u64(layout.tables.len() as u64);
    for t in &layout.tables {
        d.u32(t.layer_id);
        d.u64(t.rows);
        t.primes.iter().for_each(|&p| d.u32(p));
        t.offsets.iter().for_each(|&o| d.u32(o));
        t.multipliers.iter().for_each(|&m| d.u64(m));
    }
    d.0
}

/// FNV-1a, 64 bits.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_tells_scales_apart_and_is_stable() {
        let a = crate::layout::preset("deepseek-v4.1-flash", 4096).unwrap();
        let b = crate::layout::preset("deepseek-v4.1-flash", 2048).unwrap();
        assert_eq!(layout_digest(&a), layout_digest(&a.clone()));
        assert_ne!(layout_digest(&a), layout_digest(&b));
        let mut c = a.clone();
        c.tables[1].multipliers[2] += 2;
        assert_ne!(layout_digest(&a), layout_digest(&c));
    }
}

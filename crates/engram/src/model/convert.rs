//! GGUF files fed from another model: `pack` (a checkpoint's split rows into
//! packed 264-byte rows) and `transcode` (re-encoding every row).
//!
//! Both stream: rows are read in chunks of [`CHUNK_ROWS`] in a producer
//! thread, checked and converted row by row, and written sequentially, so
//! memory stays at a few chunks whatever the table size. Every source row is
//! decoded-checked on the way: a corrupt one stops the run with an error
//! naming it, and the output never appears under its final name.

use std::path::Path;

use super::gguf::GgufWriter;
use super::stream::{stream_tables, CHUNK_ROWS};
use super::{ds4, Model, Progress};
use crate::codec::{transcode_row, Encoding};
use crate::Result;

/// Writes `model` (any format) as a ds4 GGUF at `out` with rows in `to`.
pub fn write_gguf_from(
    model: &Model,
    to: Encoding,
    out: &Path,
    progress: &dyn Progress,
) -> Result<()> {
    let metadata = ds4::ds41_metadata(&model.layout, to, "engram model");
    let mut writer = GgufWriter::create(out, &metadata, ds4::table_decls(&model.layout, to))?;
    let rows: Vec<u64> = model.tables.iter().map(|t| t.rows).collect();
    let mut src = Vec::with_capacity(CHUNK_ROWS as usize * 264);
    stream_tables(
        &rows,
        to.row_bytes(),
        |table, first, buf| {
            let from = model.tables[table].encoding;
            let count = buf.len() / to.row_bytes();
            model.read_row_range(table, first, count, &mut src)?;
            let src_rows = src.chunks_exact(model.tables[table].full_row_bytes());
            for (i, (s, d)) in src_rows
                .zip(buf.chunks_exact_mut(to.row_bytes()))
                .enumerate()
            {
                transcode_row(from, to, s, d).map_err(|e| e.into_error(table, first + i as u64))?;
            }
            Ok(())
        },
        |chunk| writer.write(&chunk.data),
        progress,
    )?;
    writer.finish()
}

/// `engram pack`: the checkpoint directory `dir` as a packed 264-byte-row GGUF at `out`.
pub fn pack(dir: &Path, out: &Path, progress: &dyn Progress) -> Result<Model> {
    let model = Model::open(dir)?;
    write_gguf_from(&model, Encoding::E4m3E8m0Row264, out, progress)?;
    Model::open(out)
}

/// `engram transcode`: `model` re-encoded as `to` in a GGUF at `out`.
pub fn transcode(
    model: &Model,
    to: Encoding,
    out: &Path,
    progress: &dyn Progress,
) -> Result<Model> {
    write_gguf_from(model, to, out, progress)?;
    Model::open(out)
}

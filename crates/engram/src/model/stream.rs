//! A two-stage pipeline for writing whole tables: one thread produces chunks
//! of rows (generating, reading or transcoding them), the calling thread
//! writes them. Memory is bounded by a few chunks whatever the table size.

use std::sync::mpsc;

use super::Progress;
use crate::{Error, Result};

/// Rows per chunk: 64K rows of 264 bytes is 17 MiB, large enough for
/// sequential-write speed and small enough that three in flight stay cheap.
pub const CHUNK_ROWS: u64 = 64 * 1024;

/// Chunks in flight between the producer and the writer.
const IN_FLIGHT: usize = 3;

/// Fills `out`, a whole number of `width`-byte rows, row by row:
/// `fill(row_id, row)` for each, the first row being `first_row`. Every
/// synthetic writer's row filler; a buffer of part of a row is refused.
pub fn each_row(
    out: &mut [u8],
    width: usize,
    first_row: u64,
    mut fill: impl FnMut(u64, &mut [u8]) -> Result<()>,
) -> Result<()> {
    let len = out.len();
    if len % width != 0 {
        return Err(Error::InvalidArgument(format!(
            "buffer of {len} bytes is not a whole number of {width}-byte rows"
        )));
    }
    for (i, row) in out.chunks_exact_mut(width).enumerate() {
        fill(first_row + i as u64, row)?;
    }
    Ok(())
}

/// A chunk of rows of one table.
pub struct Chunk {
    /// Table index.
    pub table: usize,
    /// First row in the chunk.
    pub first_row: u64,
    /// The rows, packed.
    pub data: Vec<u8>,
}

/// Streams every row of tables with `rows[t]` rows of `row_bytes` each:
/// `fill(table, first_row, buf)` fills `buf` (a whole number of rows) on a
/// producer thread, `sink(chunk)` consumes chunks in table and row order on
/// the calling thread. Progress counts bytes sunk.
pub fn stream_tables<F, S>(
    rows: &[u64],
    row_bytes: usize,
    fill: F,
    mut sink: S,
    progress: &dyn Progress,
) -> Result<()>
where
    F: FnMut(usize, u64, &mut [u8]) -> Result<()> + Send,
    S: FnMut(&Chunk) -> Result<()>,
{
    let total: u64 = rows.iter().map(|&r| r * row_bytes as u64).sum();
    progress.start(total);
    let (full_tx, full_rx) = mpsc::sync_channel::<Result<Chunk>>(IN_FLIGHT);
    let (empty_tx, empty_rx) = mpsc::channel::<Vec<u8>>();
    for _ in 0..IN_FLIGHT {
        let _ = empty_tx.send(Vec::new());
    }
    std::thread::scope(|scope| {
        scope.spawn(move || produce(rows, row_bytes, fill, full_tx, empty_rx));
        for chunk in full_rx {
            let chunk = chunk?;
            sink(&chunk)?;
            progress.advance(chunk.data.len() as u64);
            // The producer may have stopped; a lost buffer is fine then.
            let _ = empty_tx.send(chunk.data);
        }
        Ok(())
    })
}

fn produce<F>(
    rows: &[u64],
    row_bytes: usize,
    mut fill: F,
    full_tx: mpsc::SyncSender<Result<Chunk>>,
    empty_rx: mpsc::Receiver<Vec<u8>>,
) where
    F: FnMut(usize, u64, &mut [u8]) -> Result<()>,
{
    for (table, &n) in rows.iter().enumerate() {
        let mut first_row = 0;
        while first_row < n {
            let count = CHUNK_ROWS.min(n - first_row);
            let Ok(mut data) = empty_rx.recv() else {
                return; // the writer stopped
            };
            data.resize(count as usize * row_bytes, 0);
            let result = fill(table, first_row, &mut data).map(|()| Chunk {
                table,
                first_row,
                data,
            });
            let failed = result.is_err();
            if full_tx.send(result).is_err() || failed {
                return;
            }
            first_row += count;
        }
    }
}

//! Turning a request (row ids in any order, with duplicates) into reads.
//!
//! Rows are grouped by id (one read per distinct row), taken in file-offset
//! order, and rows whose bytes share a device page ([`PAGE`]) are coalesced
//! into one read. Work is cut into sub-batches whose bounce memory stays
//! under a configured bound, so a huge request never allocates in
//! proportion to its length beyond its own index arrays.

use super::files::{TableFiles, TableSpec, MAX_PARTS};
use super::PAGE;
use crate::{Error, Result};

/// One read of a contiguous span of a file into the bounce buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadOp {
    /// File index in [`TableFiles::files`].
    pub file: usize,
    /// Byte offset of the read.
    pub offset: u64,
    /// Bytes to read (page multiple when the files are opened direct).
    pub len: usize,
    /// Bytes that must arrive; a read may end early (end of file) only after
    /// these. `need <= len`.
    pub need: usize,
    /// Where the read lands in the bounce buffer.
    pub buf_off: usize,
}

/// A request grouped by row id.
#[derive(Debug)]
pub struct Request {
    /// Request positions sorted by row id.
    order: Vec<u32>,
    /// Distinct row ids in increasing order, with where their requesters
    /// start in `order`.
    uniques: Vec<(u64, u32)>,
}

impl Request {
    /// Validates `rows` against `spec` and groups them.
    pub fn new(table: usize, spec: &TableSpec, rows: &[u32]) -> Result<Request> {
        if rows.len() > u32::MAX as usize {
            return Err(Error::InvalidArgument(format!(
                "{} rows in one batch; at most {} allowed",
                rows.len(),
                u32::MAX
            )));
        }
        if let Some(&bad) = rows.iter().find(|&&r| u64::from(r) >= spec.rows) {
            return Err(Error::InvalidArgument(format!(
                "row {bad} of table {table} is out of range (the table has {} rows)",
                spec.rows
            )));
        }
        // Row id in the high half, request position in the low half: one
        // sort of plain integers orders by row and keeps equal rows in
        // request order, without an indirect key load per comparison
        // (callgrind: the prefill's grouping was the engine's largest
        // instruction count after the copies).
        let mut keyed: Vec<u64> = rows
            .iter()
            .enumerate()
            .map(|(i, &row)| u64::from(row) << 32 | i as u64)
            .collect();
        keyed.sort_unstable();
        let mut order: Vec<u32> = Vec::with_capacity(keyed.len());
        let mut uniques: Vec<(u64, u32)> = Vec::new();
        for (pos, &key) in keyed.iter().enumerate() {
            let row = key >> 32;
            if uniques.last().map(|&(r, _)| r) != Some(row) {
                uniques.push((row, pos as u32));
            }
            order.push(key as u32);
        }
        Ok(Request { order, uniques })
    }

    /// Number of distinct rows.
    pub fn unique_rows(&self) -> usize {
        self.uniques.len()
    }

    /// Row id of distinct row `u`.
    pub fn row(&self, u: usize) -> u64 {
        self.uniques[u].0
    }

    /// Request positions that asked for distinct row `u`.
    pub fn requesters(&self, u: usize) -> &[u32] {
        let start = self.uniques[u].1 as usize;
        let end = self
            .uniques
            .get(u + 1)
            .map_or(self.order.len(), |&(_, s)| s as usize);
        &self.order[start..end]
    }
}

/// The reads for a range of distinct rows, and where each row part lands.
#[derive(Debug)]
pub struct SubBatch {
    /// Distinct rows covered: `first..first + places.len() / parts`.
    pub first: usize,
    /// Distinct rows covered.
    pub count: usize,
    /// Reads, with increasing, disjoint bounce ranges.
    pub ops: Vec<ReadOp>,
    /// For distinct row `first + k` and part `p`: `(op, offset in op)` at
    /// index `k * parts + p`.
    pub places: Vec<(u32, u32)>,
    /// Bounce buffer bytes needed.
    pub buf_len: usize,
}

/// Limits of a plan.
#[derive(Debug, Clone, Copy)]
pub struct PlanLimits {
    /// Reads cover whole aligned pages (direct I/O).
    pub align: bool,
    /// Longest coalesced read.
    pub max_read: usize,
    /// Bounce memory bound of one sub-batch.
    pub max_batch: usize,
}

/// A read being grown by coalescing.
#[derive(Debug, Clone, Copy)]
struct OpenRead {
    op: usize,
    file: usize,
    start: u64,
    end: u64,
}

fn align_down(x: u64) -> u64 {
    x & !(PAGE - 1)
}

fn align_up(x: u64) -> u64 {
    x.div_ceil(PAGE) * PAGE
}

/// Bounce bytes a read of `[start, end)` takes.
fn footprint(start: u64, end: u64, align: bool) -> usize {
    if align {
        (align_up(end) - start) as usize
    } else {
        ((end - start) as usize).next_multiple_of(8)
    }
}

/// Plans the sub-batch of distinct rows starting at `first`.
pub fn sub_batch(
    spec: &TableSpec,
    request: &Request,
    first: usize,
    limits: PlanLimits,
) -> SubBatch {
    let parts = spec.parts_per_row;
    let mut ops: Vec<ReadOp> = Vec::new();
    let mut places: Vec<(u32, u32)> = Vec::new();
    let mut open: [Option<OpenRead>; MAX_PARTS] = [None; MAX_PARTS];
    let mut cost = 0usize;
    let mut u = first;
    while u < request.unique_rows() {
        let row = request.row(u);
        let row_parts = spec.parts_of(row);
        // Decide per part whether the row extends the open read, and what
        // that costs in bounce memory, before committing anything.
        let mut extends = [false; MAX_PARTS];
        let mut delta = 0usize;
        for (p, part) in row_parts.iter().enumerate() {
            let (a, b) = (part.offset_of(row), part.offset_of(row) + part.bytes as u64);
            match open[p] {
                Some(cur)
                    if cur.file == part.file
                        && a >= cur.start
                        && a / PAGE <= (cur.end - 1) / PAGE
                        && footprint(cur.start, b, limits.align) <= limits.max_read =>
                {
                    extends[p] = true;
                    delta += footprint(cur.start, b, limits.align)
                        - footprint(cur.start, cur.end, limits.align);
                }
                _ => {
                    let start = if limits.align { align_down(a) } else { a };
                    delta += footprint(start, b, limits.align);
                }
            }
        }
        if u > first && cost + delta > limits.max_batch {
            break;
        }
        cost += delta;
        for (p, part) in row_parts.iter().enumerate() {
            let (a, b) = (part.offset_of(row), part.offset_of(row) + part.bytes as u64);
            let cur = match open[p] {
                Some(mut cur) if extends[p] => {
                    cur.end = cur.end.max(b);
                    cur
                }
                _ => {
                    let start = if limits.align { align_down(a) } else { a };
                    ops.push(ReadOp {
                        file: part.file,
                        offset: start,
                        len: 0,
                        need: 0,
                        buf_off: 0,
                    });
                    OpenRead {
                        op: ops.len() - 1,
                        file: part.file,
                        start,
                        end: b,
                    }
                }
            };
            open[p] = Some(cur);
            let op = &mut ops[cur.op];
            op.need = (cur.end - cur.start) as usize;
            op.len = if limits.align {
                footprint(cur.start, cur.end, true)
            } else {
                op.need
            };
            places.push((cur.op as u32, (a - cur.start) as u32));
        }
        u += 1;
    }
    debug_assert_eq!(places.len(), (u - first) * parts);
    let mut buf_len = 0usize;
    for op in &mut ops {
        op.buf_off = buf_len;
        buf_len += footprint(op.offset, op.offset + op.len as u64, limits.align);
    }
    SubBatch {
        first,
        count: u - first,
        ops,
        places,
        buf_len,
    }
}

/// Checks reads stay inside a bounce buffer of `buf_len` bytes, in
/// increasing disjoint ranges, with `need <= len`. Engines call this before
/// handing ranges of one buffer to several threads or to the kernel.
pub fn check_ops(ops: &[ReadOp], buf_len: usize) -> std::io::Result<()> {
    let mut floor = 0usize;
    for (i, op) in ops.iter().enumerate() {
        let end = op.buf_off.checked_add(op.len);
        let ok = op.need <= op.len && op.buf_off >= floor && end.is_some_and(|e| e <= buf_len);
        if !ok {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("read {i} ({op:?}) overlaps another or leaves the {buf_len}-byte buffer"),
            ));
        }
        floor = op.buf_off + op.len;
    }
    Ok(())
}

/// The first distinct row of `batch` that part of read `op` holds, with the
/// file path and the row's file offset, for error messages.
pub fn row_of_op<'a>(
    files: &'a TableFiles,
    spec: &TableSpec,
    request: &Request,
    batch: &SubBatch,
    op: usize,
) -> (u64, &'a std::path::Path, u64) {
    let parts = spec.parts_per_row;
    for (k, chunk) in batch.places.chunks(parts).enumerate() {
        if let Some(p) = chunk.iter().position(|&(o, _)| o as usize == op) {
            let row = request.row(batch.first + k);
            let part = &spec.parts_of(row)[p];
            return (row, &files.files[part.file].path, part.offset_of(row));
        }
    }
    let read = &batch.ops[op];
    (0, &files.files[read.file].path, read.offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::files::Part;

    fn spec(split: bool) -> TableSpec {
        let mut parts = vec![Part {
            file: 0,
            base: 100,
            first_row: 0,
            bytes: if split { 256 } else { 264 },
            dst: 0,
        }];
        if split {
            parts.push(Part {
                file: 1,
                base: 7,
                first_row: 0,
                bytes: 8,
                dst: 256,
            });
        }
        TableSpec::single(1_000_000, parts)
    }

    /// Four shards of three parts (codes, scales, biases, as MLX stores
    /// them), two shards' arrays in one file and the others in a second.
    fn sharded_spec() -> TableSpec {
        let widths = [80, 10, 10];
        let mut specs = Vec::new();
        let mut starts = Vec::new();
        for shard in 0..4u64 {
            starts.push(shard * 250_000);
            let mut dst = 0;
            for (p, &bytes) in widths.iter().enumerate() {
                specs.push(Part {
                    file: (shard / 2) as usize,
                    base: 3 + (shard % 2) * 40_000_000 + p as u64 * 20_000_000,
                    first_row: shard * 250_000,
                    bytes,
                    dst,
                });
                dst += bytes;
            }
        }
        TableSpec {
            rows: 1_000_000,
            row_bytes: 100,
            parts_per_row: 3,
            shard_starts: starts,
            parts: specs,
        }
    }

    fn pseudo_random_rows(n: usize, seed: u64) -> Vec<u32> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Clustered ids, so page sharing and long runs both occur.
                ((x % 4000) * 250 + (x >> 40) % 40) as u32
            })
            .collect()
    }

    /// Every distinct row is placed exactly once per part, inside a read
    /// that covers its bytes; reads are disjoint in the buffer; sub-batches
    /// respect the memory bound; reads respect the length bound.
    #[test]
    fn plans_cover_every_row_within_bounds() {
        for (shape, align, seed) in [
            (0, false, 1),
            (0, true, 2),
            (1, false, 3),
            (1, true, 4),
            (2, false, 5),
            (2, true, 6),
        ] {
            let spec = match shape {
                0 => spec(false),
                1 => spec(true),
                _ => sharded_spec(),
            };
            let rows = pseudo_random_rows(20_000, seed);
            let request = Request::new(0, &spec, &rows).unwrap();
            let limits = PlanLimits {
                align,
                max_read: 16 << 10,
                max_batch: 256 << 10,
            };
            let mut first = 0;
            while first < request.unique_rows() {
                let batch = sub_batch(&spec, &request, first, limits);
                assert!(batch.count > 0);
                assert!(
                    batch.buf_len <= limits.max_batch,
                    "{} > {}",
                    batch.buf_len,
                    limits.max_batch
                );
                check_ops(&batch.ops, batch.buf_len).unwrap();
                for op in &batch.ops {
                    assert!(op.len <= limits.max_read);
                    if align {
                        assert_eq!(
                            (
                                op.offset % PAGE,
                                op.len as u64 % PAGE,
                                op.buf_off as u64 % PAGE
                            ),
                            (0, 0, 0)
                        );
                    }
                }
                for k in 0..batch.count {
                    let row = request.row(first + k);
                    for (p, part) in spec.parts_of(row).iter().enumerate() {
                        let (op, off) = batch.places[k * spec.parts_per_row + p];
                        let op = batch.ops[op as usize];
                        assert_eq!(op.file, part.file);
                        assert_eq!(op.offset + u64::from(off), part.offset_of(row));
                        assert!(off as usize + part.bytes <= op.need);
                    }
                }
                first += batch.count;
            }
        }
    }

    #[test]
    fn duplicates_group_and_out_of_range_rows_are_rejected() {
        let spec = spec(false);
        let request = Request::new(0, &spec, &[5, 3, 5, 5, 3]).unwrap();
        assert_eq!(request.unique_rows(), 2);
        assert_eq!((request.row(0), request.requesters(0)), (3, &[1u32, 4][..]));
        assert_eq!(
            (request.row(1), request.requesters(1)),
            (5, &[0u32, 2, 3][..])
        );
        let err = Request::new(1, &spec, &[1, 1_000_000]).unwrap_err();
        assert!(err.to_string().contains("row 1000000 of table 1"), "{err}");
    }
}

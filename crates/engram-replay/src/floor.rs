//! The physical floor of a prefill: the stall a perfect scheduler would
//! still leave, given the device's IOPS and the compute that runs before
//! each wait in the sweep that ran.
//!
//! A perfect scheduler knows every row id from the start, reads each unique
//! row once (whole-prompt dedup; rows whose bytes start in the same 4 KiB
//! page in one read, as the engine's page coalescing does), in the order the
//! waits need them, at the device's full rate, and starts at time 0. The wait
//! `j` needs `R_j` unique reads (of every table waited on so far, as far as
//! each was waited for); they cannot be there before `R_j / IOPS`. The forward pass reaches wait
//! `j` after `C_j` of compute (the compute model's wall time in the layers
//! run before it) plus the stall before it, so the least total stall is
//! `max(0, max_j (R_j / IOPS - C_j))`. Under either sweep the first table's
//! waits dominate: its rows are needed after one or two layers of compute.

use std::collections::HashSet;
use std::time::Duration;

use serde::Serialize;

/// One prefill wait as the replay saw it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WaitPoint {
    /// The table waited on.
    pub table: usize,
    /// Tokens `0..upto` of that table are needed.
    pub upto: u32,
    /// The compute before the wait: the compute model's wall time in the
    /// layers run before it.
    pub before: Duration,
}

/// Per table, how many unique reads tokens `0..n` need, for each `n`.
#[derive(Debug, Clone, Default)]
pub struct UniqueRows {
    per_table: Vec<Vec<u64>>,
}

impl UniqueRows {
    /// From the row ids of a prompt, `[token][table][column]`, one read per
    /// unique row.
    pub fn of(ids: &[u32], tables: usize, columns: usize) -> UniqueRows {
        UniqueRows::of_reads(ids, tables, columns, |_, row| [u64::from(row)])
    }

    /// As [`UniqueRows::of`], a row of a table taking one read per key of
    /// `reads(table, row)` (the 4 KiB pages its parts start in), a key seen
    /// before in the table counted once.
    pub fn of_reads<K: IntoIterator<Item = u64>>(
        ids: &[u32],
        tables: usize,
        columns: usize,
        reads: impl Fn(usize, u32) -> K,
    ) -> UniqueRows {
        let per_token = tables * columns;
        let tokens = ids.len().checked_div(per_token).unwrap_or(0);
        let mut per_table = vec![Vec::with_capacity(tokens + 1); tables];
        for (t, counts) in per_table.iter_mut().enumerate() {
            let mut seen = HashSet::new();
            counts.push(0);
            for token in ids.chunks_exact(per_token) {
                let row = &token[t * columns..(t + 1) * columns];
                let new = row
                    .iter()
                    .flat_map(|&id| reads(t, id))
                    .filter(|&key| seen.insert(key))
                    .count() as u64;
                counts.push(counts.last().copied().unwrap_or(0) + new);
            }
        }
        UniqueRows { per_table }
    }

    /// Unique reads tokens `0..upto` of `table` need (clamped to the prompt).
    pub fn upto(&self, table: usize, upto: u32) -> u64 {
        self.per_table.get(table).map_or(0, |c| {
            c.get(upto as usize).or(c.last()).copied().unwrap_or(0)
        })
    }
}

/// The floor of one prefill: what a perfect scheduler would stall.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FloorReport {
    /// Least prefill stall the device allows, seconds.
    pub prefill_stall_seconds: f64,
    /// Reads a perfect scheduler issues: unique rows of every table of the
    /// prompt, rows starting in one 4 KiB page read once.
    pub unique_reads: u64,
    /// Measured prefill stall over the floor; absent when the floor is 0
    /// (the device could hide every read behind the compute).
    pub stall_over_floor: Option<f64>,
}

/// The least total stall over `waits` (in the order they happened) on a
/// device serving `iops` reads per second, each unique row one read.
pub fn floor_seconds(waits: &[WaitPoint], unique: &UniqueRows, iops: f64) -> f64 {
    if iops.is_nan() || iops <= 0.0 {
        return 0.0;
    }
    let mut upto = vec![0u32; unique.per_table.len()];
    let mut floor = 0.0f64;
    for w in waits {
        if let Some(slot) = upto.get_mut(w.table) {
            *slot = (*slot).max(w.upto);
        }
        let rows: u64 = upto
            .iter()
            .enumerate()
            .map(|(t, &u)| unique.upto(t, u))
            .sum();
        floor = floor.max(rows as f64 / iops - w.before.as_secs_f64());
    }
    floor
}

/// The floor report of a schedule whose prefill stalled `stall` seconds.
pub fn report(waits: &[WaitPoint], unique: &UniqueRows, iops: f64, stall: f64) -> FloorReport {
    let floor = floor_seconds(waits, unique, iops);
    let tokens = waits.iter().map(|w| w.upto).max().unwrap_or(0);
    FloorReport {
        prefill_stall_seconds: floor,
        unique_reads: (0..unique.per_table.len())
            .map(|t| unique.upto(t, tokens))
            .sum(),
        stall_over_floor: (floor > 0.0).then(|| stall / floor),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(table: usize, upto: u32, before_ms: u64) -> WaitPoint {
        WaitPoint {
            table,
            upto,
            before: Duration::from_millis(before_ms),
        }
    }

    #[test]
    fn unique_rows_count_first_uses_per_table() {
        // Two tables, two columns; token rows [t0c0 t0c1 t1c0 t1c1].
        let ids = [1, 2, 7, 7, 2, 3, 7, 8, 1, 1, 9, 9];
        let u = UniqueRows::of(&ids, 2, 2);
        assert_eq!(
            (0..=3).map(|n| u.upto(0, n)).collect::<Vec<_>>(),
            [0, 2, 3, 3]
        );
        assert_eq!(
            (0..=3).map(|n| u.upto(1, n)).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        assert_eq!(u.upto(0, 99), 3, "clamped to the prompt");
    }

    #[test]
    fn the_floor_follows_a_fake_device_of_known_iops() {
        // One table, one column, every token a new row: 1,000 unique rows.
        let ids: Vec<u32> = (0..1_000).collect();
        let u = UniqueRows::of(&ids, 1, 1);
        // A device of 1,000 IOPS: all rows take 1 s. Waits after 0.3 s of
        // compute (first half) and 0.5 s (all): the last one binds, 0.5 s.
        let waits = [wait(0, 500, 300), wait(0, 1_000, 500)];
        assert!((floor_seconds(&waits, &u, 1_000.0) - 0.5).abs() < 1e-12);
        // Ten times faster: 0.1 s of reads, all hidden behind the compute.
        assert_eq!(floor_seconds(&waits, &u, 10_000.0), 0.0);
        // An early wait can bind: half the rows (0.25 s at 2,000 IOPS)
        // after 0.05 s of compute.
        let early = [wait(0, 500, 50), wait(0, 1_000, 600)];
        assert!((floor_seconds(&early, &u, 2_000.0) - 0.2).abs() < 1e-12);
        let r = report(&waits, &u, 1_000.0, 1.5);
        assert_eq!(r.unique_reads, 1_000);
        assert!((r.stall_over_floor.unwrap() - 3.0).abs() < 1e-9);
        assert_eq!(report(&waits, &u, 1e6, 1.0).stall_over_floor, None);
    }

    #[test]
    fn rows_sharing_a_page_are_one_read() {
        // One table, one column: rows 0..17 of 264 bytes; rows 0..=15 start
        // in page 0 (row 15 at byte 3,960), row 16 in page 1.
        let ids: Vec<u32> = (0..17).collect();
        let u = UniqueRows::of_reads(&ids, 1, 1, |_, row| [u64::from(row) * 264 / 4096]);
        assert_eq!(u.upto(0, 16), 1);
        assert_eq!(u.upto(0, 17), 2);
        assert_eq!(UniqueRows::of(&ids, 1, 1).upto(0, 17), 17);
    }

    #[test]
    fn a_second_table_adds_its_rows_once_it_is_waited_on() {
        // Two tables of 100 unique rows each (one column).
        let ids: Vec<u32> = (0..100).flat_map(|i| [i, 1_000 + i]).collect();
        let u = UniqueRows::of(&ids, 2, 1);
        // At 100 IOPS table 0 takes 1 s, both 2 s; table 1 waited after 1.5 s.
        let waits = [wait(0, 100, 200), wait(1, 100, 1_500)];
        assert!((floor_seconds(&waits, &u, 100.0) - 0.8).abs() < 1e-12);
    }
}

//! The order in which an engine issues a batch's reads.
//!
//! A batch's reads come out of the plan sorted by file offset. Issued in
//! that order, the reads in flight at any moment are neighbours: with 64 in
//! flight over a prefill batch that touches 2% of a table's pages, they lie
//! within about 11 MB of each other. A device that spreads a file over
//! several backing units (a striped array, a network volume) could then
//! serve them from few of its units at once. Spread order cuts the batch
//! into `ways` runs and takes one read from each run in turn, so the reads
//! in flight cover the whole batch, as a random stream's do, while each run
//! is still read front to back. On the device machine's virtio disk the
//! two orders read at the same rate within its drift
//! (docs/log/2026-12-03-read-order.md), so sorted stays the default.

/// How an engine orders a batch's reads: the `read_order` option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadOrder {
    /// By file offset, as planned.
    #[default]
    Sorted,
    /// One read from each of `depth` runs of the sorted batch in turn.
    Spread,
}

impl ReadOrder {
    /// The order named `name` (`sorted` or `spread`).
    pub fn parse(name: &str) -> Option<ReadOrder> {
        match name {
            "sorted" => Some(ReadOrder::Sorted),
            "spread" => Some(ReadOrder::Spread),
            _ => None,
        }
    }

    /// Its name, as [`ReadOrder::parse`] reads it.
    pub fn name(self) -> &'static str {
        match self {
            ReadOrder::Sorted => "sorted",
            ReadOrder::Spread => "spread",
        }
    }

    /// The read to issue as the `claim`-th of a batch of `n` shared by
    /// `ways` readers: a permutation of `0..n` as `claim` runs over `0..n`.
    pub fn op(self, claim: usize, n: usize, ways: usize) -> usize {
        match self {
            ReadOrder::Sorted => claim,
            ReadOrder::Spread => spread(claim, n, ways),
        }
    }
}

/// Run `k` of `ways` holds `n / ways` reads, one more for the first
/// `n % ways` runs; claims take one read from each run in turn (the runs
/// that are longer give their last read in a final, shorter round).
fn spread(claim: usize, n: usize, ways: usize) -> usize {
    let ways = ways.clamp(1, n.max(1));
    let (short, longer) = (n / ways, n % ways);
    let start = |run: usize| run * short + run.min(longer);
    if claim < short * ways {
        start(claim % ways) + claim / ways
    } else {
        start(claim - short * ways) + short
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_a_permutation_for_every_size_and_width() {
        for n in 0..200 {
            for ways in [0, 1, 2, 3, 7, 16, 64, 300] {
                let mut seen = vec![false; n];
                for claim in 0..n {
                    let op = ReadOrder::Spread.op(claim, n, ways);
                    assert!(op < n, "n {n} ways {ways} claim {claim} -> {op}");
                    assert!(!seen[op], "n {n} ways {ways}: {op} twice");
                    seen[op] = true;
                }
            }
        }
    }

    #[test]
    fn the_first_claims_cover_the_batch_and_each_run_goes_forward() {
        // 10 reads, 3 ways: runs 0..4, 4..7, 7..10.
        let order: Vec<usize> = (0..10).map(|c| ReadOrder::Spread.op(c, 10, 3)).collect();
        assert_eq!(order, [0, 4, 7, 1, 5, 8, 2, 6, 9, 3]);
        let sorted: Vec<usize> = (0..10).map(|c| ReadOrder::Sorted.op(c, 10, 3)).collect();
        assert_eq!(sorted, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn a_batch_no_wider_than_the_depth_keeps_its_order() {
        let order: Vec<usize> = (0..24).map(|c| ReadOrder::Spread.op(c, 24, 64)).collect();
        assert_eq!(order, (0..24).collect::<Vec<_>>());
    }

    #[test]
    fn names_round_trip() {
        for order in [ReadOrder::Sorted, ReadOrder::Spread] {
            assert_eq!(ReadOrder::parse(order.name()), Some(order));
        }
        assert_eq!(ReadOrder::parse("random"), None);
    }
}

//! A prefill's prompt kept as compressed ids (4 bytes a token) and hashed
//! into row ids batch by batch, instead of every row id of the prompt held
//! for the prefill's life (4 bytes a row: 192 bytes a V4.1 token, 12 MiB
//! at 65,536 tokens), so the prefill's memory barely grows with the prompt.

use crate::hash::Hasher;

/// The tokens of one prefill, as the hash needs them.
pub(crate) struct PromptRows {
    hasher: Hasher,
    /// Compressed ids, led by the `lead` ids before the prompt that its
    /// first tokens' hash reads.
    run: Vec<u32>,
    lead: usize,
    tables: usize,
    cols: usize,
}

impl PromptRows {
    /// The prompt `run` (from `History::run_from`) hashed by `hasher`.
    pub(crate) fn new(hasher: Hasher, run: Vec<u32>, lead: usize) -> PromptRows {
        let cols = hasher.columns();
        let tables = hasher.rows_per_token() / cols.max(1);
        PromptRows {
            hasher,
            run,
            lead,
            tables,
            cols,
        }
    }

    /// Row ids of `table` for tokens `start..end`, token-major: the same
    /// as the sequence's hash gives for them.
    pub(crate) fn table_rows(&self, table: usize, start: u32, end: u32) -> Vec<u32> {
        let (start, end) = (start as usize, end as usize);
        let mut all = Vec::new();
        self.hasher
            .hash_run(&self.run, self.lead, start, end, &mut all);
        let stride = self.tables * self.cols;
        let at = table * self.cols;
        let mut rows = Vec::with_capacity((end - start) * self.cols);
        for token in all.chunks_exact(stride) {
            rows.extend_from_slice(&token[at..at + self.cols]);
        }
        rows
    }
}

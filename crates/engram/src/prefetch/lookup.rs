//! Prompt-lookup prediction: guess the next tokens by finding the longest
//! suffix of the history that occurred earlier and proposing what followed.

/// Proposes up to `count` tokens likely to follow `history`: for n from
/// `max_ngram` down to 1, finds the most recent earlier occurrence of the
/// last n tokens and returns the tokens that followed it. Empty when no
/// suffix repeats.
pub fn predict(history: &[u32], max_ngram: usize, count: usize) -> Vec<u32> {
    if count == 0 {
        return Vec::new();
    }
    let len = history.len();
    for n in (1..=max_ngram.min(len.saturating_sub(1))).rev() {
        let suffix = &history[len - n..];
        // Candidate starts: every earlier window, most recent first; the
        // window must end before the suffix starts so something follows it.
        for start in (0..len - n).rev() {
            if &history[start..start + n] == suffix {
                let follow = start + n;
                let end = (follow + count).min(len);
                return history[follow..end].to_vec();
            }
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_suffix_wins_and_most_recent_match() {
        // "1 2 3" occurred followed by 4 5; "3" alone occurred later followed by 9.
        let h = [1, 2, 3, 4, 5, 3, 9, 1, 2, 3];
        assert_eq!(predict(&h, 3, 2), vec![4, 5]);
        assert_eq!(predict(&h, 1, 2), vec![9, 1]);
        assert_eq!(predict(&[7, 8], 3, 2), Vec::<u32>::new());
        assert_eq!(predict(&[], 3, 2), Vec::<u32>::new());
        assert_eq!(predict(&[5, 5], 3, 3), vec![5]);
    }
}

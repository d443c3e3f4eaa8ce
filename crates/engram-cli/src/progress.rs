//! Progress bars on stderr for long library operations.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// An [`engram::model::Progress`] drawn as a byte-count bar on stderr
/// (hidden when stderr is not a terminal, or when `quiet`).
pub struct Bar(ProgressBar);

impl Bar {
    /// A bar labelled `label`.
    pub fn new(label: &str, quiet: bool) -> Bar {
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
        if quiet {
            bar.set_draw_target(ProgressDrawTarget::hidden());
        }
        bar.set_style(
            ProgressStyle::with_template(
                "{msg} [{bar:40}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        bar.set_message(label.to_string());
        Bar(bar)
    }

    /// Clears the bar.
    pub fn finish(&self) {
        self.0.finish_and_clear();
    }
}

impl engram::model::Progress for Bar {
    fn start(&self, total: u64) {
        self.0.set_length(total);
    }

    fn advance(&self, bytes: u64) {
        self.0.inc(bytes);
    }
}

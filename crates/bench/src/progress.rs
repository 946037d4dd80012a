//! The progress bar every long benchmark shows.

use indicatif::{ProgressBar, ProgressStyle};
use std::time::Duration;

/// A bar of `len` steps (a spinner when the length is unknown) labelled `what`; hidden when
/// `quiet`.
pub fn bar(quiet: bool, len: Option<u64>, what: &str) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let (b, template) = match len {
        Some(n) => (
            ProgressBar::new(n),
            "{msg:>24} [{elapsed_precise}] {wide_bar} {human_pos}/{human_len} ({per_sec})",
        ),
        None => (
            ProgressBar::new_spinner(),
            "{msg:>24} [{elapsed_precise}] {spinner} {human_pos} ({per_sec})",
        ),
    };
    b.set_style(
        ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    b.set_message(what.to_string());
    b.enable_steady_tick(Duration::from_millis(200));
    b
}

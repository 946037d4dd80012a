//! Why a device operation runs: to serve a read, as part of a write (a delete or an overwrite
//! looking up what it replaces), or in the background (start-up load, deferred deletes,
//! scrub, rebuild). Layers below the one that knows (read/write separation's counters) ask
//! [`current`]; the caller marks its work with [`writing`] or [`background`]. Unmarked work
//! serves a read. The mark is task-local: it follows the future through every await, not into
//! tasks it spawns.

use std::future::Future;

/// What a marked operation is part of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A write, overwrite or delete.
    Write,
    /// Work no client waits on.
    Background,
}

tokio::task_local! {
    static PURPOSE: Purpose;
}

/// Runs `work` marked as part of a write.
pub async fn writing<F: Future>(work: F) -> F::Output {
    within(Purpose::Write, work).await
}

/// Runs `work` marked as background work.
pub async fn background<F: Future>(work: F) -> F::Output {
    within(Purpose::Background, work).await
}

async fn within<F: Future>(purpose: Purpose, work: F) -> F::Output {
    // The outer mark holds: background work that writes stays background.
    match current() {
        Some(outer) => PURPOSE.scope(outer, work).await,
        None => PURPOSE.scope(purpose, work).await,
    }
}

/// The current task's mark; `None`: it serves a read.
pub fn current() -> Option<Purpose> {
    PURPOSE.try_with(|p| *p).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_mark_holds_inside_and_only_inside() {
        assert_eq!(current(), None);
        let inside = background(async {
            tokio::task::yield_now().await;
            (current(), writing(async { current() }).await)
        })
        .await;
        assert_eq!(
            inside,
            (Some(Purpose::Background), Some(Purpose::Background))
        );
        assert_eq!(writing(async { current() }).await, Some(Purpose::Write));
        assert_eq!(current(), None);
        // Not inherited by a spawned task.
        let spawned = background(async { tokio::spawn(async { current() }).await })
            .await
            .unwrap();
        assert_eq!(spawned, None);
    }
}

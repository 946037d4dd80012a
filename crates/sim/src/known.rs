//! Bugs the simulator found in the store and that are not fixed yet, each with what it
//! looks like, so that a run can tell a known bug from a new one.
//!
//! Store-internal randomness (chunk and upload ids, `tokio::select!` order, hash-map order)
//! makes the same plan take slightly different paths from run to run, so a list of failing
//! seeds would not be stable; a known bug is therefore recognised by its symptom and the
//! circumstances it needs (see [`Context`]). A seed that hits a known bug stops there and is
//! counted under the bug's id; `railstore sim` reports the counts and, with `--allow-known`,
//! does not fail for them. When a bug is fixed, delete its entry: the simulator then fails
//! wherever it still occurs.

/// What kind of check found a problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A read, listing or delete answer disagreed with the model.
    Data,
    /// The store refused to open (or an offline command could not open it).
    Open,
    /// A rebuild failed.
    Rebuild,
    /// A clean shutdown failed.
    Shutdown,
    /// Anything else (a scrub failed, a status count, a stuck step, a panic).
    Other,
}

/// What had happened in the seed when the problem was found.
#[derive(Debug, Clone, Copy, Default)]
pub struct Context {
    /// Separation is on.
    pub separation: bool,
    /// A device has been rebuilt.
    pub rebuilt: bool,
    /// A device has failed, been wiped, come back stale or turned flaky.
    pub device_fault: bool,
    /// A flaky device (transient errors, bit flips) is in the array now.
    pub flaky: bool,
    /// The policy packs small objects (pack3+3, hybrid).
    pub pack: bool,
}

/// A known, unfixed bug.
#[derive(Debug)]
pub struct KnownBug {
    /// Its id (SIM-n), as in `docs/sim.md`.
    pub id: &'static str,
    /// What goes wrong.
    pub summary: &'static str,
    matches: fn(Kind, &str, &Context) -> bool,
}

/// The known bugs, most specific first (a problem counts under the first that matches).
pub static KNOWN_BUGS: &[KnownBug] = &[KnownBug {
    id: "SIM-12",
    summary: "split and packed objects: an overwrite cut by a crash while its group was \
              whole, then devices lost within the tolerance before the next open repairs it: \
              the old and the new version share the positions in place (a split survivor \
              keeps only k shards; a packed object's old member may be the lost device's), \
              and the loss takes the survivor with it (overwrites are staged, or their sets \
              written first, only in degraded groups: doing it for every one costs a sync \
              each)",
    matches: |k, w, c| {
        k == Kind::Data
            && c.device_fault
            && w.contains("an acknowledged object is lost")
            && w.contains("an overwrite of it was cut by a crash")
    },
}];

/// The known bug a problem is a symptom of, if any.
pub fn classify(kind: Kind, what: &str, ctx: &Context) -> Option<&'static KnownBug> {
    KNOWN_BUGS.iter().find(|b| (b.matches)(kind, what, ctx))
}

/// The known bug with this id.
pub fn by_id(id: &str) -> Option<&'static KnownBug> {
    KNOWN_BUGS.iter().find(|b| b.id == id)
}

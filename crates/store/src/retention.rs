//! Object lock as the store enforces it: a version under a legal hold, or under a retention
//! that has not run out, is not deleted — by a client or by the lifecycle worker — and a
//! governance retention gives way only to a caller that bypasses it. The S3 layer sets the
//! lock in the version's stored headers (never sent as headers); the store checks it under
//! the key's lock when it deletes a version.

use crate::types::ObjectInfo;
use std::collections::BTreeMap;
use std::time::SystemTime;

/// Stored header: the retention mode, `GOVERNANCE` or `COMPLIANCE`.
const MODE: &str = "x-railstore-lock-mode";
/// Stored header: the end of the retention, milliseconds since the Unix epoch.
const UNTIL: &str = "x-railstore-lock-until";
/// Stored header: `ON` while the version is under a legal hold.
const LEGAL_HOLD: &str = "x-railstore-legal-hold";

/// How a retention may be lifted early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    /// A caller that bypasses governance retention may shorten, change or remove it.
    Governance,
    /// Nobody may, until it runs out.
    Compliance,
}

impl LockMode {
    /// S3's name of the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            LockMode::Governance => "GOVERNANCE",
            LockMode::Compliance => "COMPLIANCE",
        }
    }

    /// The mode S3 names exactly so (case matters).
    pub fn parse(s: &str) -> Option<LockMode> {
        match s {
            "GOVERNANCE" => Some(LockMode::Governance),
            "COMPLIANCE" => Some(LockMode::Compliance),
            _ => None,
        }
    }
}

/// A version's retention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub mode: LockMode,
    /// When it ends, in milliseconds since the Unix epoch (dates past 2106 included).
    pub until_ms: i64,
}

impl Retention {
    /// Whether it still holds at `now_ms`.
    pub fn in_force(&self, now_ms: i64) -> bool {
        self.until_ms > now_ms
    }
}

/// Milliseconds since the Unix epoch now.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A version's retention, if it has one.
pub fn retention(info: &ObjectInfo) -> Option<Retention> {
    let mode = LockMode::parse(info.headers.get(MODE)?)?;
    let until_ms = info.headers.get(UNTIL)?.parse().ok()?;
    Some(Retention { mode, until_ms })
}

/// Whether a version is under a legal hold.
pub fn legal_hold(info: &ObjectInfo) -> bool {
    info.headers.get(LEGAL_HOLD).is_some_and(|v| v == "ON")
}

/// Sets (or, with `None`, removes) a retention in a version's stored headers.
pub fn set_retention(headers: &mut BTreeMap<String, String>, r: Option<Retention>) {
    match r {
        Some(r) => {
            headers.insert(MODE.into(), r.mode.as_str().into());
            headers.insert(UNTIL.into(), r.until_ms.to_string());
        }
        None => {
            headers.remove(MODE);
            headers.remove(UNTIL);
        }
    }
}

/// Puts a version under a legal hold, or lifts it.
pub fn set_legal_hold(headers: &mut BTreeMap<String, String>, on: bool) {
    if on {
        headers.insert(LEGAL_HOLD.into(), "ON".into());
    } else {
        headers.remove(LEGAL_HOLD);
    }
}

/// Removes any lock from headers copied from another version (a copy does not inherit its
/// source's lock).
pub fn strip_lock(headers: &mut BTreeMap<String, String>) {
    set_retention(headers, None);
    set_legal_hold(headers, false);
}

/// Why a version may not be deleted at `now_ms`, if it may not.
pub fn deletion_refused(info: &ObjectInfo, bypass_governance: bool, now_ms: i64) -> Option<String> {
    if legal_hold(info) {
        return Some("the version is under a legal hold".into());
    }
    match retention(info) {
        Some(r) if r.in_force(now_ms) => match r.mode {
            LockMode::Compliance => Some("the version is under a compliance-mode retention".into()),
            LockMode::Governance if !bypass_governance => Some(
                "the version is under a governance-mode retention (bypass it to delete)".into(),
            ),
            LockMode::Governance => None,
        },
        _ => None,
    }
}

/// Why a version's retention may not change from what it is to `new` at `now_ms`, if it may
/// not: a retention in force may be extended, never shortened or changed in mode — except a
/// governance one by a caller that bypasses it.
pub fn change_refused(
    info: &ObjectInfo,
    new: Option<Retention>,
    bypass_governance: bool,
    now_ms: i64,
) -> Option<String> {
    let old = retention(info).filter(|r| r.in_force(now_ms))?;
    let extends = new.is_some_and(|n| n.mode == old.mode && n.until_ms >= old.until_ms);
    if extends {
        return None;
    }
    match old.mode {
        LockMode::Compliance => {
            Some("a compliance-mode retention can only be extended until it runs out".into())
        }
        LockMode::Governance if !bypass_governance => Some(
            "shortening, removing or changing the mode of a governance-mode retention needs \
             the governance bypass"
                .into(),
        ),
        LockMode::Governance => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(headers: &[(&str, &str)]) -> ObjectInfo {
        ObjectInfo {
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..ObjectInfo::default()
        }
    }

    #[test]
    fn locks_round_trip_through_the_headers() {
        let mut i = info(&[]);
        assert_eq!((retention(&i), legal_hold(&i)), (None, false));
        // 2140: past what 32-bit seconds hold.
        let r = Retention {
            mode: LockMode::Governance,
            until_ms: 5_364_662_400_000,
        };
        set_retention(&mut i.headers, Some(r));
        set_legal_hold(&mut i.headers, true);
        assert_eq!((retention(&i), legal_hold(&i)), (Some(r), true));
        strip_lock(&mut i.headers);
        assert!(i.headers.is_empty());
        assert_eq!(
            LockMode::parse("governance"),
            None,
            "names are case-sensitive"
        );
    }

    #[test]
    fn deletes_and_changes_follow_the_modes() {
        let now = 1_000_000;
        let gov = |until: i64| info(&[(MODE, "GOVERNANCE"), (UNTIL, &until.to_string())]);
        let comp = info(&[(MODE, "COMPLIANCE"), (UNTIL, "2000000")]);
        // Deletes.
        assert!(deletion_refused(&gov(now + 1), false, now).is_some());
        assert!(deletion_refused(&gov(now + 1), true, now).is_none());
        assert!(deletion_refused(&gov(now), false, now).is_none(), "ran out");
        assert!(deletion_refused(&comp, true, now).is_some());
        let held = info(&[(LEGAL_HOLD, "ON")]);
        assert!(
            deletion_refused(&held, true, now).is_some(),
            "bypass does not lift a hold"
        );
        assert!(deletion_refused(&info(&[]), false, now).is_none());
        // Changes.
        let r = |mode, until_ms| Some(Retention { mode, until_ms });
        let g = LockMode::Governance;
        let c = LockMode::Compliance;
        assert!(change_refused(&gov(now + 10), r(g, now + 20), false, now).is_none());
        assert!(change_refused(&gov(now + 10), r(g, now + 5), false, now).is_some());
        assert!(change_refused(&gov(now + 10), r(g, now + 5), true, now).is_none());
        assert!(change_refused(&gov(now + 10), r(c, now + 10), false, now).is_some());
        assert!(change_refused(&gov(now + 10), r(c, now + 10), true, now).is_none());
        assert!(change_refused(&gov(now + 10), None, false, now).is_some());
        assert!(change_refused(&comp, r(g, 2_000_000), true, now).is_some());
        assert!(change_refused(&comp, r(c, 1_500_000), true, now).is_some());
        assert!(change_refused(&comp, r(c, 3_000_000), false, now).is_none());
        assert!(
            change_refused(&gov(now - 1), r(g, now + 1), false, now).is_none(),
            "ran out"
        );
    }
}

//! Which objects a degraded array puts at risk: those with pieces on devices out of service
//! (failed, or being rebuilt), by how much redundancy they have left. Shown in `/status`,
//! `/metrics` and `railstore status` while any device is out; costs one placement per manager
//! object then (nothing while the array is whole).

use crate::record::{chunk_key, object_key};
use crate::store::{Store, Stored};
use serde::{Deserialize, Serialize};

/// Objects named in a report (the counts are always complete).
const SAMPLE_MAX: usize = 20;

/// The objects a degraded array puts at risk.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RiskReport {
    /// Devices out of service (failed, or being rebuilt).
    pub devices_out: Vec<usize>,
    /// Current objects with a piece of their record or of a chunk on one of them.
    pub objects_at_risk: u64,
    /// Of those, objects with no redundancy left: one more device lost in the wrong place
    /// loses them.
    pub objects_without_redundancy: u64,
    /// Objects with more pieces out than their mechanism tolerates: unreadable until a device
    /// comes back.
    pub objects_unreadable: u64,
    /// Some of them (`bucket/key`), least redundancy left first.
    pub sample: Vec<String>,
}

impl Store {
    /// The objects at risk now; empty while every device serves.
    pub fn objects_at_risk(&self) -> RiskReport {
        let inner = &self.inner;
        let io = inner.manager.devices();
        let out: Vec<usize> = (0..io.len()).filter(|&d| !io.readable(d)).collect();
        if out.is_empty() {
            return RiskReport::default();
        }
        let layout = inner.manager.layout();
        let policy = &inner.manager.config().policy;
        // Redundancy left of one manager object, if it has pieces out: its mechanism's
        // tolerance less its placement positions on devices out. The mechanism is the one
        // stored when the manager has it in its cache, else the one the policy picks for the
        // length.
        let left = |key: &[u8], len: u64| -> Option<i64> {
            let mech = inner
                .manager
                .cached_meta(key)
                .map_or_else(|| policy.choose(len), |m| m.mechanism);
            let lost = layout
                .place(key)
                .of_pieces(mech.span(layout.width()))
                .devices()
                .filter(|d| out.contains(d))
                .count();
            (lost > 0).then(|| mech.tolerance() as i64 - lost as i64)
        };
        let mut report = RiskReport {
            devices_out: out.clone(),
            ..RiskReport::default()
        };
        let mut worst: Vec<(i64, String)> = Vec::new();
        let st = inner.state.read().unwrap();
        for (name, bucket) in &st.buckets {
            for (key, entry) in &bucket.objects {
                // A record holds its metadata and, when inline, the body.
                let record_len = entry.info.size.min(inner.config.inline_bytes_max) + 512;
                let mut least = left(&object_key(bucket.id, key), record_len);
                if let Stored::Chunks(chunks) = &entry.body {
                    for c in chunks.iter() {
                        if let Some(l) = left(&chunk_key(&c.id), c.len) {
                            least = Some(least.map_or(l, |x| x.min(l)));
                        }
                    }
                }
                let Some(least) = least else { continue };
                report.objects_at_risk += 1;
                report.objects_without_redundancy += u64::from(least == 0);
                report.objects_unreadable += u64::from(least < 0);
                worst.push((least, format!("{name}/{key}")));
            }
        }
        worst.sort();
        report.sample = worst.into_iter().take(SAMPLE_MAX).map(|(_, n)| n).collect();
        report
    }
}

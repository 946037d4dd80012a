//! A reader-role device's write buffer (Rails §4.2, eRails §3): writes addressed to a device
//! while it serves reads wait here, newest value per key, and are flushed in arrival order when
//! it turns writer. Reads of the device look here first: the buffer holds its newest data.
//! Pure bookkeeping with a bound in bytes; the scheduler decides when to fill and drain it.
//!
//! With the journal (`separated`'s `Durability::Journal`) every operation carries a tag, its
//! journal sequence number, and leaves in two steps: [`WriteBuffer::applied`] once the device
//! has it (it stays readable and keeps its charge) and [`WriteBuffer::confirm_applied`] once a
//! sync made it durable and the device's watermark covers it.

use std::collections::{BTreeMap, VecDeque};

/// A buffered operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pending {
    /// Store this value.
    Store(Vec<u8>),
    /// Delete the key.
    Delete,
}

impl Pending {
    fn bytes(&self) -> u64 {
        match self {
            Pending::Store(v) => v.len() as u64,
            Pending::Delete => 0,
        }
    }
}

/// Why a write was not buffered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BufferError {
    /// The buffer would pass its bound: the writer waits (back-pressure) or, if configured,
    /// the device takes the write directly (partial separation).
    #[error("write buffer full: {used} of {max} B used, {needed} B more needed")]
    Full {
        /// Bytes buffered now.
        used: u64,
        /// The bound.
        max: u64,
        /// Bytes the write needs.
        needed: u64,
    },
}

/// One buffered operation.
#[derive(Debug)]
struct Entry {
    /// Arrival number.
    seq: u64,
    op: Pending,
    /// The caller's tag (the journal sequence number; 0 without a journal).
    tag: u64,
    /// The smallest tag of the operations on this key the device has not had: this one's, or
    /// that of an older one it replaced before the older one was applied.
    base: u64,
    /// The device has it; it waits for [`WriteBuffer::confirm_applied`].
    applied: bool,
}

/// An operation to flush, from [`WriteBuffer::next_batch_tagged`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToFlush {
    /// Arrival number, for [`WriteBuffer::flushed`] or [`WriteBuffer::applied`].
    pub seq: u64,
    /// The key.
    pub key: Vec<u8>,
    /// The operation.
    pub op: Pending,
    /// Its tag.
    pub tag: u64,
}

/// One device's write buffer.
#[derive(Debug)]
pub struct WriteBuffer {
    bytes_max: u64,
    bytes: u64,
    /// Newest pending operation per key.
    latest: BTreeMap<Vec<u8>, Entry>,
    /// Keys in arrival order of their newest operation (older entries are skipped on drain).
    order: VecDeque<(u64, Vec<u8>)>,
    /// Operations marked applied and not yet confirmed (entries superseded since are skipped).
    applied: Vec<(u64, Vec<u8>)>,
    /// The `base` of every entry not applied (a multiset: without tags all are 0).
    unapplied_bases: BTreeMap<u64, usize>,
    next_seq: u64,
}

/// Per-key overhead charged against the bound besides the value bytes.
pub const ENTRY_OVERHEAD_BYTES: u64 = 64;

impl WriteBuffer {
    /// An empty buffer holding at most `write_buffer_bytes_max` bytes (keys, values and
    /// [`ENTRY_OVERHEAD_BYTES`] per key).
    pub fn new(write_buffer_bytes_max: u64) -> WriteBuffer {
        WriteBuffer {
            bytes_max: write_buffer_bytes_max,
            bytes: 0,
            latest: BTreeMap::new(),
            order: VecDeque::new(),
            applied: Vec::new(),
            unapplied_bases: BTreeMap::new(),
            next_seq: 0,
        }
    }

    /// Bytes charged now.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The bound.
    pub fn bytes_max(&self) -> u64 {
        self.bytes_max
    }

    /// Moves the bound (buffers sized from the measured write rate). What the buffer holds
    /// stays; below a lower bound it only takes writes again once flushing has made room.
    pub fn set_bytes_max(&mut self, bytes_max: u64) {
        self.bytes_max = bytes_max;
    }

    /// Keys waiting (applied but unconfirmed ones included).
    pub fn len(&self) -> usize {
        self.latest.len()
    }

    /// Whether nothing waits (an applied but unconfirmed operation still waits).
    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }

    fn cost(key: &[u8], op: &Pending) -> u64 {
        key.len() as u64 + op.bytes() + ENTRY_OVERHEAD_BYTES
    }

    /// Buffers `op` for `key`, replacing an older pending operation on the same key. Fails,
    /// changing nothing, when the bound would be passed.
    pub fn push(&mut self, key: &[u8], op: Pending) -> Result<(), BufferError> {
        self.push_tagged(key, op, 0)
    }

    /// Whether `op` on `key` fits now.
    pub fn fits(&self, key: &[u8], op: &Pending) -> bool {
        let freed = self
            .latest
            .get(key)
            .map(|e| Self::cost(key, &e.op))
            .unwrap_or(0);
        self.bytes - freed + Self::cost(key, op) <= self.bytes_max
    }

    fn add_base(&mut self, base: u64) {
        *self.unapplied_bases.entry(base).or_default() += 1;
    }

    fn remove_base(&mut self, base: u64) {
        if let Some(n) = self.unapplied_bases.get_mut(&base) {
            *n -= 1;
            if *n == 0 {
                self.unapplied_bases.remove(&base);
            }
        }
    }

    /// Removes `key`'s entry, releasing its charge and its base.
    fn remove_entry(&mut self, key: &[u8]) -> Option<Entry> {
        let e = self.latest.remove(key)?;
        self.bytes -= Self::cost(key, &e.op);
        if !e.applied {
            self.remove_base(e.base);
        }
        Some(e)
    }

    /// [`WriteBuffer::push`] with a tag that [`WriteBuffer::next_batch_tagged`] hands back.
    /// Tags must rise with arrival for [`WriteBuffer::oldest_unapplied_tag`] to mean anything.
    pub fn push_tagged(&mut self, key: &[u8], op: Pending, tag: u64) -> Result<(), BufferError> {
        let freed = self
            .latest
            .get(key)
            .map(|e| Self::cost(key, &e.op))
            .unwrap_or(0);
        let needed = Self::cost(key, &op);
        if self.bytes - freed + needed > self.bytes_max {
            return Err(BufferError::Full {
                used: self.bytes,
                max: self.bytes_max,
                needed,
            });
        }
        // Replacing an operation the device never had keeps its base: until this one is
        // applied, the older one's journal record must not be taken as done.
        let base = match self.remove_entry(key) {
            Some(old) if !old.applied => old.base,
            _ => tag,
        };
        self.bytes += needed;
        self.add_base(base);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.latest.insert(
            key.to_vec(),
            Entry {
                seq,
                op,
                tag,
                base,
                applied: false,
            },
        );
        self.order.push_back((seq, key.to_vec()));
        // Superseded entries stay in `order` and `applied` until drained; bound them too.
        if self.order.len() > 2 * self.latest.len() + 64 {
            let latest = &self.latest;
            self.order
                .retain(|(s, k)| latest.get(k).is_some_and(|e| e.seq == *s));
        }
        if self.applied.len() > 2 * self.latest.len() + 64 {
            let latest = &self.latest;
            self.applied
                .retain(|(s, k)| latest.get(k).is_some_and(|e| e.seq == *s && e.applied));
        }
        Ok(())
    }

    /// Drops everything pending (the device failed: its writes go to the rebuild path).
    pub fn clear(&mut self) {
        self.latest.clear();
        self.order.clear();
        self.applied.clear();
        self.unapplied_bases.clear();
        self.bytes = 0;
    }

    /// Drops the pending operation on `key`, if any (a newer write went to the device directly).
    pub fn discard(&mut self, key: &[u8]) {
        self.remove_entry(key);
    }

    /// Drops the pending operation on `key` if its tag is below `tag`; returns false, changing
    /// nothing, when a newer one (tag above `tag`) waits.
    pub fn discard_older(&mut self, key: &[u8], tag: u64) -> bool {
        match self.latest.get(key) {
            Some(e) if e.tag > tag => false,
            _ => {
                self.discard(key);
                true
            }
        }
    }

    /// The tag of the pending operation on `key`, if any.
    pub fn pending_tag(&self, key: &[u8]) -> Option<u64> {
        self.latest.get(key).map(|e| e.tag)
    }

    /// The newest pending operation for `key`, if any: reads answer from it.
    pub fn get(&self, key: &[u8]) -> Option<&Pending> {
        self.latest.get(key).map(|e| &e.op)
    }

    /// Keys with a pending operation that start with `prefix`, ascending (listings merge them
    /// with the device's own keys).
    pub fn keys_with_prefix<'a>(
        &'a self,
        prefix: &'a [u8],
    ) -> impl Iterator<Item = (&'a [u8], &'a Pending)> + 'a {
        self.latest
            .range(prefix.to_vec()..)
            .take_while(move |(k, _)| k.starts_with(prefix))
            .map(|(k, e)| (k.as_slice(), &e.op))
    }

    /// The oldest pending operation, to flush next; it stays buffered (and readable) until
    /// [`WriteBuffer::flushed`] confirms the device has it.
    pub fn next_to_flush(&mut self) -> Option<(u64, Vec<u8>, Pending)> {
        self.next_batch(1).pop()
    }

    /// Up to `n` of the oldest pending operations, each on a different key, to flush together;
    /// they stay buffered (and readable) until [`WriteBuffer::flushed`].
    pub fn next_batch(&mut self, n: usize) -> Vec<(u64, Vec<u8>, Pending)> {
        self.next_batch_tagged(n)
            .into_iter()
            .map(|f| (f.seq, f.key, f.op))
            .collect()
    }

    /// [`WriteBuffer::next_batch`] with tags; operations already applied are skipped.
    pub fn next_batch_tagged(&mut self, n: usize) -> Vec<ToFlush> {
        let mut out = Vec::new();
        self.drop_stale_front();
        for (seq, key) in &self.order {
            if out.len() == n {
                break;
            }
            if let Some(e) = self.latest.get(key) {
                if e.seq == *seq && !e.applied {
                    out.push(ToFlush {
                        seq: *seq,
                        key: key.clone(),
                        op: e.op.clone(),
                        tag: e.tag,
                    });
                }
            }
        }
        out
    }

    /// Drops superseded entries at the front of the arrival order.
    fn drop_stale_front(&mut self) {
        while let Some((seq, key)) = self.order.front() {
            match self.latest.get(key) {
                Some(e) if e.seq == *seq => break,
                _ => {
                    self.order.pop_front();
                }
            }
        }
    }

    /// The smallest tag of an operation the device has not had and that is not yet overtaken
    /// by one it has: of a pending operation not yet applied, or of an older operation on the
    /// same key that one replaced before the older one was applied. Every tag below it was
    /// applied, or replaced by an operation that was applied, or discarded.
    pub fn oldest_unapplied_tag(&self) -> Option<u64> {
        self.unapplied_bases.keys().next().copied()
    }

    /// The pending operations (applied or not) whose tag is in `tags`.
    pub fn tagged(&self, tags: &std::collections::BTreeSet<u64>) -> Vec<ToFlush> {
        self.latest
            .iter()
            .filter(|(_, e)| tags.contains(&e.tag))
            .map(|(k, e)| ToFlush {
                seq: e.seq,
                key: k.clone(),
                op: e.op.clone(),
                tag: e.tag,
            })
            .collect()
    }

    /// The device has the operation `seq` on `key` (not yet durably): it stays buffered and
    /// readable, charged against the bound, until [`WriteBuffer::confirm_applied`]. Nothing
    /// happens when a newer operation replaced it meanwhile.
    pub fn applied(&mut self, seq: u64, key: &[u8]) {
        let Some(e) = self.latest.get_mut(key) else {
            return;
        };
        if e.seq == seq && !e.applied {
            e.applied = true;
            let base = e.base;
            self.applied.push((seq, key.to_vec()));
            self.remove_base(base);
        }
    }

    /// Whether some operation is applied and not yet confirmed.
    pub fn has_applied(&self) -> bool {
        !self.applied.is_empty()
    }

    /// Drops every applied operation with a tag up to `tag_max` (the device made them durable
    /// and its watermark covers them); returns how many went.
    pub fn confirm_applied(&mut self, tag_max: u64) -> usize {
        let mut n = 0;
        let mut keep = Vec::new();
        for (seq, key) in std::mem::take(&mut self.applied) {
            match self.latest.get(&key) {
                Some(e) if e.seq == seq && e.applied && e.tag <= tag_max => {
                    self.bytes -= Self::cost(&key, &e.op);
                    self.latest.remove(&key);
                    n += 1;
                }
                Some(e) if e.seq == seq && e.applied => keep.push((seq, key)),
                _ => {}
            }
        }
        self.applied = keep;
        self.drop_stale_front();
        n
    }

    /// The device stored the operation `seq` on `key`: drop it, unless a newer one arrived
    /// meanwhile (that one flushes later).
    pub fn flushed(&mut self, seq: u64, key: &[u8]) {
        if self.latest.get(key).is_some_and(|e| e.seq == seq) {
            self.remove_entry(key);
        }
        if self
            .order
            .front()
            .is_some_and(|(s, k)| *s == seq && k == key)
        {
            self.order.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn newest_wins_and_flushes_in_arrival_order() {
        let mut b = WriteBuffer::new(1 << 20);
        b.push(b"a", Pending::Store(b"1".to_vec())).unwrap();
        b.push(b"b", Pending::Store(b"2".to_vec())).unwrap();
        b.push(b"a", Pending::Delete).unwrap();
        assert_eq!(b.get(b"a"), Some(&Pending::Delete));
        let (s1, k1, op1) = b.next_to_flush().unwrap();
        assert_eq!(
            (k1.as_slice(), op1),
            (&b"b"[..], Pending::Store(b"2".to_vec()))
        );
        b.flushed(s1, &k1);
        let (s2, k2, op2) = b.next_to_flush().unwrap();
        assert_eq!((k2.as_slice(), op2), (&b"a"[..], Pending::Delete));
        // A newer write while the flush is in flight keeps the key buffered.
        b.push(b"a", Pending::Store(b"3".to_vec())).unwrap();
        b.flushed(s2, &k2);
        assert_eq!(b.get(b"a"), Some(&Pending::Store(b"3".to_vec())));
        let (s3, k3, _) = b.next_to_flush().unwrap();
        b.flushed(s3, &k3);
        assert!(b.is_empty());
        assert_eq!(b.bytes(), 0);
        assert_eq!(b.next_to_flush(), None);
    }

    #[test]
    fn batches_take_distinct_keys_in_arrival_order() {
        let mut b = WriteBuffer::new(1 << 20);
        for (k, v) in [(b"a", 1u8), (b"b", 2), (b"a", 3), (b"c", 4)] {
            b.push(k, Pending::Store(vec![v])).unwrap();
        }
        let batch = b.next_batch(8);
        let keys: Vec<&[u8]> = batch.iter().map(|(_, k, _)| k.as_slice()).collect();
        assert_eq!(keys, vec![&b"b"[..], b"a", b"c"]);
        assert_eq!(batch[1].2, Pending::Store(vec![3]));
        assert_eq!(b.next_batch(2).len(), 2);
        for (seq, k, _) in batch {
            b.flushed(seq, &k);
        }
        assert!(b.is_empty() && b.next_batch(8).is_empty());
    }

    #[test]
    fn a_full_buffer_refuses_and_changes_nothing() {
        let mut b = WriteBuffer::new(200);
        b.push(b"k", Pending::Store(vec![0; 100])).unwrap();
        let before = b.bytes();
        let e = b.push(b"j", Pending::Store(vec![0; 100])).unwrap_err();
        assert!(matches!(e, BufferError::Full { .. }));
        assert_eq!(b.bytes(), before);
        assert_eq!(b.get(b"j"), None);
        // Replacing a key's value reuses its charge.
        b.push(b"k", Pending::Store(vec![1; 120])).unwrap();
        assert_eq!(b.len(), 1);
    }

    #[test]
    fn applied_operations_stay_until_confirmed_and_bases_track_replaced_ones() {
        let mut b = WriteBuffer::new(1 << 20);
        b.push_tagged(b"a", Pending::Store(vec![1]), 1).unwrap();
        b.push_tagged(b"b", Pending::Store(vec![2]), 2).unwrap();
        // `a` is replaced before it was applied: its record (tag 1) is not done with.
        b.push_tagged(b"a", Pending::Store(vec![3]), 3).unwrap();
        assert_eq!(b.oldest_unapplied_tag(), Some(1));
        let batch = b.next_batch_tagged(1);
        assert_eq!((batch[0].key.as_slice(), batch[0].tag), (&b"b"[..], 2));
        b.applied(batch[0].seq, &batch[0].key);
        assert_eq!(b.oldest_unapplied_tag(), Some(1));
        assert_eq!(
            b.get(b"b"),
            Some(&Pending::Store(vec![2])),
            "readable until confirmed"
        );
        assert!(b.has_applied() && !b.is_empty());
        // Applied ones are not handed out again.
        let batch = b.next_batch_tagged(8);
        assert_eq!(batch.len(), 1);
        assert_eq!((batch[0].key.as_slice(), batch[0].tag), (&b"a"[..], 3));
        b.applied(batch[0].seq, &batch[0].key);
        assert_eq!(b.oldest_unapplied_tag(), None);
        // Replacing an applied operation starts a new base.
        b.push_tagged(b"b", Pending::Delete, 4).unwrap();
        assert_eq!(b.oldest_unapplied_tag(), Some(4));
        assert_eq!(b.confirm_applied(u64::MAX), 1, "only `a`: `b` was replaced");
        assert_eq!(b.len(), 1);
        b.discard(b"b");
        assert!(b.is_empty() && b.oldest_unapplied_tag().is_none());
        assert_eq!(b.bytes(), 0);
        // A newer tag is not discarded by an older overtaking write.
        b.push_tagged(b"c", Pending::Store(vec![5]), 9).unwrap();
        assert!(!b.discard_older(b"c", 8));
        assert_eq!(b.pending_tag(b"c"), Some(9));
        assert!(b.discard_older(b"c", 10));
        assert!(b.is_empty());
    }

    proptest! {
        /// Against a model: reads see the newest op, the bound holds, and draining applies
        /// exactly the newest op of every key.
        #[test]
        fn matches_a_model(ops in proptest::collection::vec((0u8..8, proptest::option::of(0usize..300), any::<bool>()), 1..200)) {
            let mut b = WriteBuffer::new(2000);
            let mut model: BTreeMap<Vec<u8>, Pending> = BTreeMap::new();
            let mut device: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            for (k, v, flush) in ops {
                let key = vec![b'k', k];
                let op = match v { Some(n) => Pending::Store(vec![k; n]), None => Pending::Delete };
                if b.push(&key, op.clone()).is_ok() {
                    model.insert(key.clone(), op);
                }
                prop_assert!(b.bytes() <= b.bytes_max());
                prop_assert_eq!(b.get(&key), model.get(&key));
                if flush {
                    if let Some((seq, fk, fop)) = b.next_to_flush() {
                        match &fop {
                            Pending::Store(v) => { device.insert(fk.clone(), v.clone()); }
                            Pending::Delete => { device.remove(&fk); }
                        }
                        b.flushed(seq, &fk);
                        if b.get(&fk).is_none() {
                            model.remove(&fk);
                        }
                    }
                }
            }
            let mut want = device.clone();
            for (k, op) in &model {
                match op {
                    Pending::Store(v) => { want.insert(k.clone(), v.clone()); }
                    Pending::Delete => { want.remove(k); }
                }
            }
            while let Some((seq, k, op)) = b.next_to_flush() {
                match op {
                    Pending::Store(v) => { device.insert(k.clone(), v); }
                    Pending::Delete => { device.remove(&k); }
                }
                b.flushed(seq, &k);
            }
            prop_assert_eq!(device, want);
            prop_assert_eq!(b.bytes(), 0);
        }
    }
}

//! A reader-role device's write buffer (Rails §4.2, eRails §3): writes addressed to a device
//! while it serves reads wait here, newest value per key, and are flushed in arrival order when
//! it turns writer. Reads of the device look here first: the buffer holds its newest data.
//! Pure bookkeeping with a bound in bytes; the scheduler decides when to fill and drain it.

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

/// One device's write buffer.
#[derive(Debug)]
pub struct WriteBuffer {
    bytes_max: u64,
    bytes: u64,
    /// Newest pending operation per key, with its arrival number.
    latest: BTreeMap<Vec<u8>, (u64, Pending)>,
    /// Keys in arrival order of their newest operation (older entries are skipped on drain).
    order: VecDeque<(u64, Vec<u8>)>,
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

    /// Keys waiting.
    pub fn len(&self) -> usize {
        self.latest.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }

    fn cost(key: &[u8], op: &Pending) -> u64 {
        key.len() as u64 + op.bytes() + ENTRY_OVERHEAD_BYTES
    }

    /// Buffers `op` for `key`, replacing an older pending operation on the same key. Fails,
    /// changing nothing, when the bound would be passed.
    pub fn push(&mut self, key: &[u8], op: Pending) -> Result<(), BufferError> {
        let freed = self
            .latest
            .get(key)
            .map(|(_, old)| Self::cost(key, old))
            .unwrap_or(0);
        let needed = Self::cost(key, &op);
        if self.bytes - freed + needed > self.bytes_max {
            return Err(BufferError::Full {
                used: self.bytes,
                max: self.bytes_max,
                needed,
            });
        }
        self.bytes = self.bytes - freed + needed;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.latest.insert(key.to_vec(), (seq, op));
        self.order.push_back((seq, key.to_vec()));
        // Superseded entries stay in `order` until drained; bound them too.
        if self.order.len() > 2 * self.latest.len() + 64 {
            let latest = &self.latest;
            self.order
                .retain(|(s, k)| latest.get(k).is_some_and(|(ls, _)| ls == s));
        }
        Ok(())
    }

    /// Drops everything pending (the device failed: its writes go to the rebuild path).
    pub fn clear(&mut self) {
        self.latest.clear();
        self.order.clear();
        self.bytes = 0;
    }

    /// Drops the pending operation on `key`, if any (a newer write went to the device directly).
    pub fn discard(&mut self, key: &[u8]) {
        if let Some((_, op)) = self.latest.remove(key) {
            self.bytes -= Self::cost(key, &op);
        }
    }

    /// The newest pending operation for `key`, if any: reads answer from it.
    pub fn get(&self, key: &[u8]) -> Option<&Pending> {
        self.latest.get(key).map(|(_, op)| op)
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
            .map(|(k, (_, op))| (k.as_slice(), op))
    }

    /// The oldest pending operation, to flush next; it stays buffered (and readable) until
    /// [`WriteBuffer::flushed`] confirms the device has it.
    pub fn next_to_flush(&mut self) -> Option<(u64, Vec<u8>, Pending)> {
        while let Some((seq, key)) = self.order.front() {
            match self.latest.get(key) {
                Some((s, op)) if s == seq => return Some((*seq, key.clone(), op.clone())),
                _ => {
                    self.order.pop_front();
                }
            }
        }
        None
    }

    /// Up to `n` of the oldest pending operations, each on a different key, to flush together;
    /// they stay buffered (and readable) until [`WriteBuffer::flushed`].
    pub fn next_batch(&mut self, n: usize) -> Vec<(u64, Vec<u8>, Pending)> {
        let mut out = Vec::new();
        // Drop superseded entries at the front, then take live ones in arrival order.
        while let Some((seq, key)) = self.order.front() {
            match self.latest.get(key) {
                Some((s, _)) if s == seq => break,
                _ => {
                    self.order.pop_front();
                }
            }
        }
        for (seq, key) in &self.order {
            if out.len() == n {
                break;
            }
            if let Some((s, op)) = self.latest.get(key) {
                if s == seq {
                    out.push((*seq, key.clone(), op.clone()));
                }
            }
        }
        out
    }

    /// The device stored the operation `seq` on `key`: drop it, unless a newer one arrived
    /// meanwhile (that one flushes later).
    pub fn flushed(&mut self, seq: u64, key: &[u8]) {
        if let Some((s, op)) = self.latest.get(key) {
            if *s == seq {
                self.bytes -= Self::cost(key, op);
                self.latest.remove(key);
            }
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

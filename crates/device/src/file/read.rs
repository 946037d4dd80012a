//! Reading one value: the in-memory index says where its record is (or hands the bytes over
//! while the record still sits in a write buffer); the value is read alone, with exactly the
//! aligned blocks that cover it, through io_uring or on the blocking pool, and checked against
//! the CRC the index keeps. `retrieve_part` reads only the blocks of the range asked for and
//! leaves the check to the caller. A record that compaction moved while it was read is read
//! again where it is now.

use super::layout::read_aligned;
use super::{FileDevice, SegIo, Shared};
use crate::api::{ReadRange, Retrieved};
use crate::error::{DeviceError, Result};
use crate::format::{body_crc, header_prefix, Loc, RecordKind};

impl Shared {
    /// Reads and checks the record at `loc` from disk.
    pub(super) fn read_record(
        &self,
        key: &[u8],
        loc: Loc,
        io: Option<SegIo>,
        range: ReadRange,
        part: bool,
    ) -> Result<Retrieved> {
        let Some(io) = io else {
            return Err(DeviceError::Failed {
                reason: "segment missing",
            });
        };
        if loc.value_len == 0 {
            return Self::check_value(key, loc, &[], range);
        }
        if let Some((start, end)) = Self::part_of(loc, range, part)? {
            let (buf, at) = read_aligned(
                &io.file,
                io.base + loc.value_offset() + start,
                (end - start) as usize,
                self.read_align,
            )
            .map_err(|e| DeviceError::io("read record", e))?;
            return Ok(Self::unchecked(loc, &buf[at..at + (end - start) as usize]));
        }
        let (buf, at) = read_aligned(
            &io.file,
            io.base + loc.value_offset(),
            loc.value_len as usize,
            self.read_align,
        )
        .map_err(|e| DeviceError::io("read record", e))?;
        Self::check_value(key, loc, &buf[at..at + loc.value_len as usize], range)
    }

    /// For `retrieve_part`: the bytes of the value to read when only part of it is asked for
    /// (the caller checks them; the body CRC needs the whole value), `None` to read it whole.
    pub(super) fn part_of(loc: Loc, range: ReadRange, part: bool) -> Result<Option<(u64, u64)>> {
        let (start, end) = range.resolve(loc.value_len as u64)?;
        Ok((part && end - start < loc.value_len as u64 && end > start).then_some((start, end)))
    }

    /// The answer of a `retrieve_part` read of part of a value.
    pub(super) fn unchecked(loc: Loc, bytes: &[u8]) -> Retrieved {
        Retrieved {
            value: bytes::Bytes::copy_from_slice(bytes),
            value_len: loc.value_len as u64,
        }
    }

    /// Verifies a value read alone against the body CRC the index keeps (it covers the header
    /// fields, the key and the value), and cuts out `range`. Reading the value alone lets a
    /// block-aligned value be read with exactly its own blocks.
    pub(super) fn check_value(
        key: &[u8],
        loc: Loc,
        value: &[u8],
        range: ReadRange,
    ) -> Result<Retrieved> {
        let (start, end) = range.resolve(loc.value_len as u64)?;
        Self::verify_value(key, &loc, value)?;
        Ok(Retrieved {
            value: bytes::Bytes::copy_from_slice(&value[start as usize..end as usize]),
            value_len: loc.value_len as u64,
        })
    }

    /// Verifies a value against the body CRC its location keeps.
    pub(super) fn verify_value(key: &[u8], loc: &Loc, value: &[u8]) -> Result<()> {
        let prefix = header_prefix(
            RecordKind::Put,
            loc.seq,
            loc.key_len,
            loc.value_len,
            loc.pad,
        );
        if body_crc(&prefix, key, value) != loc.body_crc {
            return Err(DeviceError::Corrupt {
                location: format!("segment {} offset {}", loc.segment, loc.offset),
                reason: "value checksum mismatch",
            });
        }
        Ok(())
    }

    /// Looks a key up: the value now if the record is still in memory, else where to read it.
    #[allow(clippy::type_complexity)]
    pub(super) fn locate(
        &self,
        key: &[u8],
        range: ReadRange,
    ) -> Result<std::result::Result<Retrieved, (Option<SegIo>, Loc)>> {
        let st = self.lock();
        Self::check_failed(&st)?;
        let loc = *st
            .index
            .get(key)
            .ok_or_else(|| DeviceError::KeyNotFound { key: key.to_vec() })?;
        let from_mem = |rec: &[u8]| -> Result<Retrieved> {
            let (start, end) = range.resolve(loc.value_len as u64)?;
            let v = &rec[(loc.value_offset() - loc.offset) as usize..];
            Ok(Retrieved {
                value: bytes::Bytes::copy_from_slice(&v[start as usize..end as usize]),
                value_len: loc.value_len as u64,
            })
        };
        if st.active.covers(&loc) {
            return from_mem(st.active.record(&loc)).map(Ok);
        }
        if let Some(b) = st.queued.iter().find(|b| b.covers(&loc)) {
            return from_mem(b.record(&loc)).map(Ok);
        }
        Ok(Err((
            st.segments.get(&loc.segment).map(|s| s.io.clone()),
            loc,
        )))
    }

    /// Whether a read of `key` at `loc` that failed should be tried again: compaction moved
    /// the record meanwhile (a freed slot may already hold other bytes).
    pub(super) fn moved(&self, key: &[u8], loc: &Loc) -> bool {
        self.lock().index.get(key).is_some_and(|l| l != loc)
    }

    /// Whether `key`'s record is still at `loc` (not moved, overwritten or deleted).
    pub(super) fn still_at(&self, key: &[u8], loc: &Loc) -> bool {
        self.lock().index.get(key) == Some(loc)
    }

    pub(super) fn retrieve_blocking(&self, key: &[u8], range: ReadRange) -> Result<Retrieved> {
        loop {
            match self.locate(key, range)? {
                Ok(r) => return Ok(r),
                Err((io, loc)) => match self.read_record(key, loc, io, range, false) {
                    Err(DeviceError::Corrupt { .. } | DeviceError::Io { .. })
                        if self.moved(key, &loc) => {}
                    r => return r,
                },
            }
        }
    }
}

impl FileDevice {
    /// `retrieve`, or with `part` `retrieve_part`: part of a value is read alone, unchecked.
    pub(super) async fn read(&self, key: &[u8], range: ReadRange, part: bool) -> Result<Retrieved> {
        self.shared.config.limits.check_key(key)?;
        let _slot = self.gate.enter().await;
        loop {
            let (io, loc) = match self.shared.locate(key, range)? {
                Ok(r) => return Ok(r),
                Err(at) => at,
            };
            let r = match io {
                Some(io) if self.ring.is_some() && loc.value_len > 0 => {
                    self.read_uring(key, &io, loc, range, part).await
                }
                io => {
                    let key = key.to_vec();
                    self.blocking(move |sh| sh.read_record(&key, loc, io, range, part))
                        .await
                }
            };
            match r {
                // Compaction moved the record while it was read (a freed slot may already
                // hold other bytes): read it where it is now. An unchecked part cannot tell
                // by its checksum, so it is read again whenever the record moved meanwhile
                // (the index changes before a slot is freed).
                Err(DeviceError::Corrupt { .. } | DeviceError::Io { .. })
                    if self.shared.moved(key, &loc) => {}
                Ok(_) if part && !self.shared.still_at(key, &loc) => {}
                r => return r,
            }
        }
    }

    /// Reads the value at `loc` through io_uring and checks it (or, for `retrieve_part`,
    /// the part asked for alone).
    async fn read_uring(
        &self,
        key: &[u8],
        io: &SegIo,
        loc: Loc,
        range: ReadRange,
        part: bool,
    ) -> Result<Retrieved> {
        let ring = self.ring.as_ref().expect("checked by the caller");
        let align = self.shared.read_align;
        let part = Shared::part_of(loc, range, part)?;
        let (at, value_len) = match part {
            Some((s, e)) => (io.base + loc.value_offset() + s, e - s),
            None => (io.base + loc.value_offset(), loc.value_len as u64),
        };
        let start = at / align * align;
        let want = (at + value_len - start) as usize;
        let len = (want as u64).div_ceil(align) as usize * align as usize;
        let (buf, n) = ring
            .read(&io.file, start, len)
            .await
            .map_err(|e| DeviceError::io("read record", e))?;
        if n < want {
            return Err(DeviceError::Corrupt {
                location: format!("segment {} offset {}", loc.segment, loc.offset),
                reason: "record past end of file",
            });
        }
        let from = (at - start) as usize;
        let value = &buf[from..from + value_len as usize];
        match part {
            Some(_) => Ok(Shared::unchecked(loc, value)),
            None => Shared::check_value(key, loc, value, range),
        }
    }
}

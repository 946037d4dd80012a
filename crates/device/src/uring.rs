//! Reads through io_uring: tasks submit O_DIRECT reads straight from the async executor and one
//! reaper thread per device completes them. Compared with a blocking worker pool this saves the
//! hand-off to a worker thread for every read (two context switches), which is what bounds
//! small random reads on a few cores.
//!
//! Memory safety rests on one rule: a read's buffer (and its file) belong to its slot in
//! [`Slots`] from before the entry is queued until the reaper sees its completion; only the
//! reaper frees a queued read's buffer. A cancelled read (its task dropped) is still completed by
//! the kernel, so the slot outlives the task; dropping the ring cancels and drains every read in
//! flight before the buffers go; if the ring breaks so that completions can no longer be
//! reaped, the buffers still owned by the kernel are leaked on purpose.

use crate::aligned::AlignedBuf;
use io_uring::{opcode, types, IoUring};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use tokio::sync::oneshot;

/// user_data of the no-op that wakes the reaper to stop.
const STOP: u64 = u64::MAX;
/// user_data of the cancellations sent when the ring is dropped.
const CANCEL: u64 = u64::MAX - 1;

type Done = oneshot::Sender<(AlignedBuf, io::Result<usize>)>;

struct Pending {
    /// Owns the memory the kernel writes into until the completion arrives, even if the
    /// waiting task is cancelled.
    buf: AlignedBuf,
    /// Keeps the descriptor open until the completion arrives.
    file: Arc<File>,
    done: Done,
}

struct Slots {
    pending: Vec<Option<Pending>>,
    free: Vec<usize>,
    /// The reaper has stopped for good (the ring failed): no read may be queued any more.
    dead: bool,
}

impl Slots {
    /// Reads whose completion has not been reaped yet.
    fn in_flight(&self) -> usize {
        self.pending.len() - self.free.len()
    }

    fn release(&mut self, slot: usize) -> Option<Pending> {
        let p = self.pending.get_mut(slot).and_then(Option::take)?;
        self.free.push(slot);
        Some(p)
    }
}

/// Why a submission failed, and whether the entry is in the submission queue anyway.
enum PushError {
    /// The entry never reached the queue: its slot may be released.
    NotQueued(io::Error),
    /// The entry is in the queue; a later submit (any read's, or the reaper's) hands it to the
    /// kernel, so its slot must stay until the completion arrives.
    Queued(io::Error),
}

/// One io_uring with its reaper thread.
pub(crate) struct ReadRing {
    ring: Arc<IoUring>,
    /// Serialises access to the submission queue.
    sq: Mutex<()>,
    slots: Arc<Mutex<Slots>>,
    stopping: Arc<AtomicBool>,
    reaper: Mutex<Option<JoinHandle<()>>>,
    /// Errors the next submits report instead of submitting (tests).
    #[cfg(test)]
    inject: Mutex<std::collections::VecDeque<i32>>,
}

impl ReadRing {
    /// A ring for up to `depth` reads in flight; `None` where io_uring is unavailable (old
    /// kernels, seccomp in containers).
    pub(crate) fn new(depth: usize) -> Option<ReadRing> {
        let entries = depth.next_power_of_two().clamp(8, 4096) as u32;
        let ring = Arc::new(IoUring::new(entries).ok()?);
        let slots = Arc::new(Mutex::new(Slots {
            pending: Vec::new(),
            free: Vec::new(),
            dead: false,
        }));
        let stopping = Arc::new(AtomicBool::new(false));
        let (r, s, st) = (ring.clone(), slots.clone(), stopping.clone());
        let reaper = std::thread::Builder::new()
            .name("rs-dev-uring".into())
            .spawn(move || reap(&r, &s, &st))
            .ok()?;
        Some(ReadRing {
            ring,
            sq: Mutex::new(()),
            slots,
            stopping,
            reaper: Mutex::new(Some(reaper)),
            #[cfg(test)]
            inject: Mutex::new(Default::default()),
        })
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads `len` bytes at aligned `offset` into a fresh aligned buffer; returns it and the
    /// byte count the kernel reported.
    pub(crate) async fn read(
        &self,
        file: &Arc<File>,
        offset: u64,
        len: usize,
    ) -> io::Result<(AlignedBuf, usize)> {
        let mut buf = AlignedBuf::new(len);
        let ptr = buf.as_mut_ptr();
        let (tx, rx) = oneshot::channel();
        let slot = {
            let mut s = self.slots();
            if s.dead {
                return Err(io::Error::other("io_uring reaper stopped"));
            }
            let p = Pending {
                buf,
                file: file.clone(),
                done: tx,
            };
            match s.free.pop() {
                Some(i) => {
                    s.pending[i] = Some(p);
                    i
                }
                None => {
                    s.pending.push(Some(p));
                    s.pending.len() - 1
                }
            }
        };
        let entry = opcode::Read::new(types::Fd(file.as_raw_fd()), ptr, len as u32)
            .offset(offset)
            .build()
            .user_data(slot as u64);
        match self.push(&entry) {
            Ok(()) => {}
            Err(PushError::NotQueued(e)) => {
                // The kernel never saw the entry: the buffer is ours again.
                self.slots().release(slot);
                return Err(e);
            }
            // The entry will still reach the kernel; the reaper frees the slot on completion.
            Err(PushError::Queued(e)) => return Err(e),
        }
        let (buf, r) = rx
            .await
            .map_err(|_| io::Error::other("io_uring reaper stopped"))?;
        r.map(|n| (buf, n))
    }

    /// `submit`, retried when a signal interrupts it.
    fn submit(&self) -> io::Result<usize> {
        loop {
            #[cfg(test)]
            let injected = self
                .inject
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop_front();
            #[cfg(not(test))]
            let injected: Option<i32> = None;
            let r = match injected {
                Some(errno) => Err(io::Error::from_raw_os_error(errno)),
                None => self.ring.submit(),
            };
            match r {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => return r,
            }
        }
    }

    fn push(&self, entry: &io_uring::squeue::Entry) -> Result<(), PushError> {
        let _sq = self.sq.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            // SAFETY: submission-queue access is serialised by `self.sq`; the entry's buffer is
            // owned by its `Pending` slot (or is none, for the stop no-op and cancellations)
            // until the reaper sees the completion, and its file is kept open there too.
            let pushed = unsafe { self.ring.submission_shared().push(entry) };
            if pushed.is_ok() {
                break;
            }
            // Queue full: hand what is queued to the kernel and retry.
            self.submit().map_err(PushError::NotQueued)?;
        }
        self.submit().map_err(PushError::Queued)?;
        Ok(())
    }
}

fn reap(ring: &IoUring, slots: &Mutex<Slots>, stopping: &AtomicBool) {
    let lock = || slots.lock().unwrap_or_else(|e| e.into_inner());
    let mut stop_seen = false;
    loop {
        if let Err(e) = ring.submit_and_wait(1) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            tracing::error!(error = %e, "io_uring wait failed; reads stop");
            // Completions can no longer be reaped, so the kernel may still write into the
            // buffers of reads in flight (and read through their files): leak them rather than
            // free memory the kernel owns. Their tasks see the reaper stopped.
            let mut s = lock();
            s.dead = true;
            for slot in 0..s.pending.len() {
                if let Some(p) = s.release(slot) {
                    std::mem::forget(p.buf);
                    std::mem::forget(p.file);
                }
            }
            return;
        }
        // SAFETY: this thread is the only consumer of the completion queue.
        let cq = unsafe { ring.completion_shared() };
        for cqe in cq {
            match cqe.user_data() {
                STOP => {
                    stop_seen = true;
                    continue;
                }
                CANCEL => continue,
                _ => {}
            }
            let slot = cqe.user_data() as usize;
            let p = lock().release(slot);
            if let Some(p) = p {
                let r = if cqe.result() < 0 {
                    Err(io::Error::from_raw_os_error(-cqe.result()))
                } else {
                    Ok(cqe.result() as usize)
                };
                // The reader may have been cancelled; the buffer is freed here then, after the
                // kernel is done with it.
                let _ = p.done.send((p.buf, r));
            }
        }
        // Stop only once no read is left in flight: a cancelled read may still be running in
        // the kernel, and its buffer must not be freed (with the slots) while it does.
        if stop_seen && stopping.load(Ordering::SeqCst) && lock().in_flight() == 0 {
            break;
        }
    }
}

impl Drop for ReadRing {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Reads still in flight belong to cancelled tasks (a live read borrows the ring): ask
        // the kernel to cancel them so the reaper's drain below is short. A read that cannot be
        // cancelled any more just completes.
        let in_flight: Vec<usize> = {
            let s = self.slots();
            (0..s.pending.len())
                .filter(|&i| s.pending[i].is_some())
                .collect()
        };
        for slot in in_flight {
            let cancel = opcode::AsyncCancel::new(slot as u64)
                .build()
                .user_data(CANCEL);
            let _ = self.push(&cancel);
        }
        let nop = opcode::Nop::new().build().user_data(STOP);
        if self.push(&nop).is_ok() {
            // The reaper returns once every read in flight has completed (or the ring failed
            // and their buffers were leaked), so nothing the kernel may write into is freed.
            if let Some(t) = self.reaper.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let _ = t.join();
            }
        }
        // Otherwise the reaper keeps running and keeps the slots (and their buffers) alive.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::FromRawFd;
    use std::time::{Duration, Instant};

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    /// A ring, or a loud skip where the kernel refuses io_uring (the `file` device then reads
    /// through the thread pool and never builds one).
    fn ring(depth: usize) -> Option<ReadRing> {
        let r = ReadRing::new(depth);
        if r.is_none() {
            eprintln!("io_uring unavailable here; ring tests have nothing to test");
        }
        r
    }

    fn in_flight(slots: &Mutex<Slots>) -> usize {
        slots.lock().unwrap().in_flight()
    }

    fn data_file() -> (tempfile::TempDir, Arc<File>, Vec<u8>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        let data: Vec<u8> = (0..16384u32).map(|i| (i * 7 + 3) as u8).collect();
        std::fs::File::create(&path)
            .unwrap()
            .write_all(&data)
            .unwrap();
        let f = Arc::new(File::open(&path).unwrap());
        (dir, f, data)
    }

    #[test]
    fn interrupted_submits_are_retried() {
        let Some(ring) = ring(8) else { return };
        let (_dir, file, data) = data_file();
        ring.inject
            .lock()
            .unwrap()
            .extend([libc::EINTR, libc::EINTR, libc::EINTR]);
        let (buf, n) = runtime()
            .block_on(ring.read(&file, 4096, 4096))
            .expect("EINTR is retried, not reported");
        assert_eq!((n, &buf[..n]), (4096, &data[4096..8192]));
        assert!(ring.inject.lock().unwrap().is_empty());
        assert_eq!(in_flight(&ring.slots), 0);
    }

    #[test]
    fn failed_submits_never_leak_slots() {
        let Some(ring) = ring(8) else { return };
        let (_dir, file, data) = data_file();
        let rt = runtime();
        // One read first, then a pause: the reaper is back waiting in the kernel, so it does
        // not submit what the reads below leave in the queue.
        rt.block_on(ring.read(&file, 0, 4096)).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        // Every submit fails: eight reads sit in the (8-entry) submission queue unsubmitted,
        // their slots kept for the kernel; the ninth finds the queue full and never gets in.
        ring.inject.lock().unwrap().extend([libc::EBUSY; 9]);
        for _ in 0..9 {
            let r = rt.block_on(ring.read(&file, 0, 4096));
            assert_eq!(r.err().map(|e| e.raw_os_error()), Some(Some(libc::EBUSY)));
        }
        assert_eq!(
            in_flight(&ring.slots),
            8,
            "queued reads keep their slots; the one never queued gives its slot back"
        );
        // The next submit hands the stuck entries to the kernel too; all complete.
        let (buf, n) = rt.block_on(ring.read(&file, 8192, 4096)).unwrap();
        assert_eq!(&buf[..n], &data[8192..12288]);
        let t = Instant::now();
        while in_flight(&ring.slots) > 0 {
            assert!(t.elapsed() < Duration::from_secs(10), "slots leaked");
            std::thread::sleep(Duration::from_millis(1));
        }
        let s = ring.slots.lock().unwrap();
        assert_eq!(s.free.len(), s.pending.len());
    }

    #[test]
    fn drop_waits_for_cancelled_reads_before_freeing_buffers() {
        let Some(ring) = ring(8) else { return };
        // A read from an empty pipe stays in the kernel until data arrives.
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: both descriptors were just created and are owned here only.
        let (rd, _wr) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
        let rd = Arc::new(rd);
        let rt = runtime();
        let r = rt.block_on(async {
            tokio::time::timeout(Duration::from_millis(50), ring.read(&rd, 0, 4096)).await
        });
        assert!(r.is_err(), "the read waits for data; its task is cancelled");
        let slots = ring.slots.clone();
        assert_eq!(in_flight(&slots), 1, "the kernel still owns the buffer");
        drop(ring);
        assert_eq!(
            in_flight(&slots),
            0,
            "the ring was dropped while the kernel could still write into a read's buffer"
        );
    }
}

//! The payloads of the checks (issue 21, point 1) through shared memory instead of a pipe:
//! a candidate's outputs and the trusted reference, float32, reach 800 MB a case, and a
//! pipe carries them at about 1.3 GB/s where a copy into memory runs several times faster
//! (docs/benchmarks.md, "payloads through shared memory").
//!
//! The parent creates one area per worker ([`PayloadArea`]: an anonymous `memfd`, sealed
//! against shrinking) and the worker inherits it, the fd's number in
//! [`crate::protocol::env::PAYLOAD_FD`]. The parent sizes the area before the worker
//! writes (a candidate's `RLIMIT_FSIZE` would stop the worker growing it); the worker maps
//! it and copies its outputs in ([`PayloadWriter`]); the parent `pread`s them into its own
//! memory, which no worker can reach, before it compares anything. Each worker has an area
//! of its own, close-on-exec in the parent and inherited by that worker's process alone
//! (and by the sandbox's launcher processes it forks, which exec nothing), so a candidate's
//! worker never holds the reference worker's.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

use crate::protocol::env;

/// The parent's handle on a worker's payload area.
#[derive(Debug)]
pub(super) struct PayloadArea {
    file: File,
}

impl PayloadArea {
    /// A new, empty area: close-on-exec (each child is given its own in
    /// [`PayloadArea::inherit_in_child`]), sealed against shrinking, so that what the parent
    /// sized stays there, and against further seals.
    ///
    /// # Errors
    /// `memfd_create` or the seal failed (a kernel before 3.17).
    pub(super) fn create() -> std::io::Result<Self> {
        // SAFETY: memfd_create with a NUL-terminated name and flags; the fd it returns is
        // owned by the File from here on.
        let fd = unsafe {
            libc::memfd_create(
                c"autokernel-payload".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and nothing else owns it.
        let file = unsafe { File::from_raw_fd(fd) };
        // no seal can be added after these: a worker that sealed its area against growing
        // would turn the parent's next `reserve` into an error instead of a verdict
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
        // SAFETY: fcntl on the fd `file` owns, with an integer argument.
        if unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, seals) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(PayloadArea { file })
    }

    /// The fd's number, the same in the child that inherits it.
    pub(super) fn raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Clears close-on-exec on `fd` in a child between fork and exec, so that this child,
    /// and no other, inherits it.
    ///
    /// # Safety
    /// Only between fork and exec (a `pre_exec` hook): it touches the child's own fd table
    /// and calls nothing but `fcntl`, which is async-signal-safe.
    pub(super) unsafe fn inherit_in_child(fd: RawFd) -> std::io::Result<()> {
        // SAFETY: fcntl with an integer argument, on an fd of the caller's.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Grows the area to at least `bytes` (never shrinks: sealed).
    ///
    /// # Errors
    /// `ftruncate` failed (no memory for the tmpfs file).
    pub(super) fn reserve(&self, bytes: u64) -> std::io::Result<()> {
        if self.file.metadata()?.len() < bytes {
            self.file.set_len(bytes)?;
        }
        Ok(())
    }

    /// Copies the area's first `numel` float32 values into `buffer` (resized to `numel`,
    /// its memory reused): the parent's own copy, which no worker can write.
    ///
    /// # Errors
    /// The area is shorter than `numel` values (never after [`PayloadArea::reserve`]), or
    /// the read failed.
    pub(super) fn read_into(&self, numel: usize, buffer: &mut Vec<f32>) -> std::io::Result<()> {
        buffer.resize(numel, 0.0);
        let bytes = as_bytes_mut(buffer);
        let chunk = chunk_len(bytes.len());
        in_pieces(bytes.chunks_mut(chunk).enumerate().collect(), |(i, c)| {
            self.file.read_exact_at(c, (i * chunk) as u64)
        })
    }

    /// A handle on the same area for a blocking task.
    pub(super) fn try_clone(&self) -> std::io::Result<Self> {
        Ok(PayloadArea {
            file: self.file.try_clone()?,
        })
    }
}

/// The worker's side: the area it inherited, mapped while its size stays the same.
pub(crate) struct PayloadWriter {
    file: File,
    map: Option<memmap2::MmapMut>,
}

impl PayloadWriter {
    /// The area named by [`env::PAYLOAD_FD`], made close-on-exec so that nothing the worker
    /// starts inherits it; `None` when the parent gave none (a worker started by hand).
    pub(crate) fn from_env() -> Option<Self> {
        let fd: RawFd = std::env::var(env::PAYLOAD_FD).ok()?.parse().ok()?;
        // SAFETY: the parent cleared close-on-exec on this fd for this process alone; it is
        // owned by the File from here on, and fcntl takes an integer argument.
        unsafe {
            if libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) < 0 {
                return None;
            }
            Some(PayloadWriter {
                file: File::from_raw_fd(fd),
                map: None,
            })
        }
    }

    /// Copies `parts` one after the other to the start of the area, as float32 in native
    /// order.
    ///
    /// # Errors
    /// The area is smaller than the parts (the parent sizes it from its own plan before it
    /// lets a worker write), or mapping it failed.
    pub(crate) fn write(&mut self, parts: &[&[f32]]) -> std::io::Result<()> {
        let bytes: usize = parts.iter().map(|p| size_of_val(*p)).sum();
        let len = self.file.metadata()?.len() as usize;
        if len < bytes {
            return Err(std::io::Error::other(format!(
                "the payload area holds {len} bytes, {bytes} are to be written"
            )));
        }
        if bytes == 0 {
            return Ok(());
        }
        if self.map.as_ref().is_none_or(|m| m.len() != len) {
            // SAFETY: a shared map of this worker's own payload area. The parent only ever
            // grows it (it is sealed against shrinking), so the map stays backed, and only
            // this process writes it while the parent waits for the line that follows.
            self.map = Some(unsafe { memmap2::MmapMut::map_mut(&self.file)? });
        }
        let map = self.map.as_mut().expect("mapped above");
        let mut at = 0;
        for part in parts {
            let b = as_bytes(part);
            copy(&mut map[at..at + b.len()], b);
            at += b.len();
        }
        Ok(())
    }
}

/// `values` as bytes in native order, without a copy: outputs reach 800 MB (float32 at
/// 4096×50257), and the other side, on the same machine, reads them in the same order.
fn as_bytes(values: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding and any byte may be read; the length is the slice's own
    // size in bytes, and the borrow keeps `values` alive.
    unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), size_of_val(values)) }
}

fn as_bytes_mut(values: &mut [f32]) -> &mut [u8] {
    // SAFETY: as `as_bytes`; every bit pattern is a valid f32, so any bytes written are too.
    unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr().cast::<u8>(), size_of_val(values)) }
}

/// Below this a copy runs on one thread: starting threads would cost more than they save.
const ONE_THREAD_MAX_BYTES: usize = 16 << 20;

/// The most threads one copy uses: a copy of memory stops scaling at a few threads, and
/// the rest of the machine is the GPU's host side.
const MAX_COPY_THREADS: usize = 8;

/// The length of each piece `bytes` are copied in, one thread per piece: a single thread
/// copies at a few GB/s, and an output reaches 800 MB.
fn chunk_len(bytes: usize) -> usize {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pieces = (bytes / ONE_THREAD_MAX_BYTES).clamp(1, threads.min(MAX_COPY_THREADS));
    bytes.div_ceil(pieces).max(1)
}

/// `dst.copy_from_slice(src)`, in pieces on several threads when it is large.
fn copy(dst: &mut [u8], src: &[u8]) {
    let chunk = chunk_len(src.len());
    let pieces = dst.chunks_mut(chunk).zip(src.chunks(chunk)).collect();
    // a copy between slices of the same length cannot fail
    let _ = in_pieces(pieces, |(d, c)| {
        d.copy_from_slice(c);
        Ok(())
    });
}

/// Runs `work` on every piece: the first on this thread, the others on threads of their
/// own where one can be started, else here too (a candidate that used up the user's
/// processes must not make the parent panic). The first error, if any.
fn in_pieces<T: Send>(
    pieces: Vec<T>,
    work: impl Fn(T) -> std::io::Result<()> + Sync,
) -> std::io::Result<()> {
    // each piece is taken once, by a thread or by this one, whichever comes first
    let slots: Vec<Mutex<Option<T>>> = pieces.into_iter().map(|p| Mutex::new(Some(p))).collect();
    let take = |slot: &Mutex<Option<T>>| slot.lock().unwrap_or_else(|p| p.into_inner()).take();
    let (work, take) = (&work, &take);
    std::thread::scope(|s| {
        let started: Vec<_> = slots
            .iter()
            .skip(1)
            .filter_map(|slot| {
                std::thread::Builder::new()
                    .spawn_scoped(s, move || take(slot).map_or(Ok(()), work))
                    .ok()
            })
            .collect();
        let mut result = Ok(());
        for slot in &slots {
            if let Some(piece) = take(slot) {
                result = result.and(work(piece));
            }
        }
        for thread in started {
            let done = thread
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("a copy thread panicked")));
            result = result.and(done);
        }
        result
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_written_through_the_map_are_read_back_by_pread() {
        let area = PayloadArea::create().unwrap();
        area.reserve(6 * 4).unwrap();
        let mut writer = PayloadWriter {
            file: area.file.try_clone().unwrap(),
            map: None,
        };
        writer
            .write(&[&[1.0, 2.0], &[f32::NAN, -0.0, 3.5, 4.0]])
            .unwrap();
        let mut back = vec![9.0; 1];
        area.read_into(6, &mut back).unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back), bits(&[1.0, 2.0, f32::NAN, -0.0, 3.5, 4.0]));
    }

    #[test]
    fn a_writer_cannot_overrun_or_shrink_the_area() {
        let area = PayloadArea::create().unwrap();
        area.reserve(8).unwrap();
        let mut writer = PayloadWriter {
            file: area.file.try_clone().unwrap(),
            map: None,
        };
        let err = writer.write(&[&[1.0, 2.0, 3.0]]).unwrap_err();
        assert!(err.to_string().contains("holds 8 bytes, 12"), "{err}");
        // the seal refuses a shrink, whoever asks, and any further seal
        assert!(writer.file.set_len(4).is_err());
        // SAFETY: fcntl with an integer argument on an fd the writer owns.
        let sealed = unsafe {
            libc::fcntl(
                std::os::fd::AsRawFd::as_raw_fd(&writer.file),
                libc::F_ADD_SEALS,
                libc::F_SEAL_GROW,
            )
        };
        assert_eq!(sealed, -1, "a worker could seal its area against growing");
        assert_eq!(area.file.metadata().unwrap().len(), 8);
        area.reserve(16).unwrap();
        // growing is the parent's: reserve never shrinks what is there
        area.reserve(4).unwrap();
        assert_eq!(area.file.metadata().unwrap().len(), 16);
    }

    #[test]
    fn a_payload_copied_in_pieces_arrives_whole_and_in_order() {
        // large enough for several pieces and not a multiple of a piece
        let numel = (3 * ONE_THREAD_MAX_BYTES) / 4 + 7;
        let values: Vec<f32> = (0..numel).map(|i| i as f32).collect();
        let area = PayloadArea::create().unwrap();
        area.reserve((numel * 4 + 8) as u64).unwrap();
        let mut writer = PayloadWriter {
            file: area.file.try_clone().unwrap(),
            map: None,
        };
        writer.write(&[&[-1.0, -2.0], &values]).unwrap();
        let mut back = Vec::new();
        area.read_into(numel + 2, &mut back).unwrap();
        assert_eq!(&back[..2], &[-1.0, -2.0]);
        assert!(back[2..].iter().enumerate().all(|(i, &v)| v == i as f32));
    }

    #[test]
    fn reading_past_what_was_reserved_is_an_error_not_a_short_buffer() {
        let area = PayloadArea::create().unwrap();
        area.reserve(8).unwrap();
        let mut buffer = Vec::new();
        assert!(area.read_into(3, &mut buffer).is_err());
    }
}

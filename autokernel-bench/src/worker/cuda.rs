//! The few CUDA driver calls the timed loop ([`super::timing`]) makes itself: events, a
//! memset, device copies and allocations, on raw handles that no Python object holds, so
//! a candidate in the same process cannot find them through the garbage collector
//! (a `torch.cuda.Event` it finds, it could record again; a flush buffer, resize).
//!
//! The driver is the one torch already loaded (`libcuda.so.1`, opened again here with
//! `dlopen`, which returns the same library): no link-time dependency, so the worker builds
//! and runs on machines without CUDA, where nothing here is called. Torch has made the
//! device's primary context current on the thread that runs the harness, which is the
//! thread these calls are made from. Signatures: the CUDA Driver API reference
//! (`cuda.h`; the `_v2` names are what its macros make of `cuMemAlloc` and friends).

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;

use pyo3::exceptions::PyRuntimeError;
use pyo3::PyErr;

type CuResult = c_int;
/// `CUevent`.
type RawEvent = *mut c_void;
/// `CUstream`: the address torch reports as `torch.cuda.Stream.cuda_stream` (0: the
/// legacy default stream).
pub(super) type Stream = *mut c_void;
/// `CUdeviceptr`.
type DevicePtr = u64;

/// The driver's entry points, resolved once per process.
struct Driver {
    event_create: unsafe extern "C" fn(*mut RawEvent, c_uint) -> CuResult,
    event_record: unsafe extern "C" fn(RawEvent, Stream) -> CuResult,
    event_elapsed_time: unsafe extern "C" fn(*mut f32, RawEvent, RawEvent) -> CuResult,
    event_destroy: unsafe extern "C" fn(RawEvent) -> CuResult,
    ctx_synchronize: unsafe extern "C" fn() -> CuResult,
    stream_synchronize: unsafe extern "C" fn(Stream) -> CuResult,
    mem_alloc: unsafe extern "C" fn(*mut DevicePtr, usize) -> CuResult,
    mem_free: unsafe extern "C" fn(DevicePtr) -> CuResult,
    memset_d8_async: unsafe extern "C" fn(DevicePtr, u8, usize, Stream) -> CuResult,
    memcpy_dtod_async: unsafe extern "C" fn(DevicePtr, DevicePtr, usize, Stream) -> CuResult,
    memcpy_dtoh: unsafe extern "C" fn(*mut c_void, DevicePtr, usize) -> CuResult,
    get_error_name: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    ctx_get_current: unsafe extern "C" fn(*mut *mut c_void) -> CuResult,
    ctx_set_current: unsafe extern "C" fn(*mut c_void) -> CuResult,
    device_get: unsafe extern "C" fn(*mut c_int, c_int) -> CuResult,
    primary_ctx_retain: unsafe extern "C" fn(*mut *mut c_void, c_int) -> CuResult,
}

// SAFETY: plain function pointers into the driver, which is thread-safe.
unsafe impl Send for Driver {}
unsafe impl Sync for Driver {}

static DRIVER: OnceLock<Result<Driver, String>> = OnceLock::new();

fn driver() -> Result<&'static Driver, PyErr> {
    DRIVER
        .get_or_init(load)
        .as_ref()
        .map_err(|e| PyRuntimeError::new_err(e.clone()))
}

/// The symbol `name` of the library `lib`, as the function pointer type `F`.
///
/// # Safety
/// `F` must be the symbol's true signature, a function pointer (pointer-sized).
unsafe fn sym<F: Copy>(lib: *mut c_void, name: &CStr) -> Result<F, String> {
    assert_eq!(size_of::<F>(), size_of::<*mut c_void>());
    // SAFETY: a NUL-terminated name; a non-null result is the symbol's address.
    let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
    if p.is_null() {
        return Err(format!(
            "CUDA error: the CUDA driver has no `{}`",
            name.to_string_lossy()
        ));
    }
    // SAFETY: the caller names `F`, the symbol's signature.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

fn load() -> Result<Driver, String> {
    // SAFETY: dlopen with a NUL-terminated name; each symbol is given the signature cuda.h
    // gives it (the field's type).
    unsafe {
        let lib = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if lib.is_null() {
            return Err("CUDA error: cannot open the CUDA driver (libcuda.so.1)".into());
        }
        Ok(Driver {
            event_create: sym(lib, c"cuEventCreate")?,
            event_record: sym(lib, c"cuEventRecord")?,
            event_elapsed_time: sym(lib, c"cuEventElapsedTime")?,
            event_destroy: sym(lib, c"cuEventDestroy_v2")?,
            ctx_synchronize: sym(lib, c"cuCtxSynchronize")?,
            stream_synchronize: sym(lib, c"cuStreamSynchronize")?,
            mem_alloc: sym(lib, c"cuMemAlloc_v2")?,
            mem_free: sym(lib, c"cuMemFree_v2")?,
            memset_d8_async: sym(lib, c"cuMemsetD8Async")?,
            memcpy_dtod_async: sym(lib, c"cuMemcpyDtoDAsync_v2")?,
            memcpy_dtoh: sym(lib, c"cuMemcpyDtoH_v2")?,
            get_error_name: sym(lib, c"cuGetErrorName")?,
            ctx_get_current: sym(lib, c"cuCtxGetCurrent")?,
            ctx_set_current: sym(lib, c"cuCtxSetCurrent")?,
            device_get: sym(lib, c"cuDeviceGet")?,
            primary_ctx_retain: sym(lib, c"cuDevicePrimaryCtxRetain")?,
        })
    }
}

/// Ok for `CUDA_SUCCESS`, else a Python `RuntimeError` whose text starts "CUDA error" (so
/// that the harness's `_is_cuda_error` reads it as one: a candidate's illegal access shows
/// up in the next driver call) naming `what` and the driver's name of the code.
fn check(d: &Driver, code: CuResult, what: &str) -> Result<(), PyErr> {
    if code == 0 {
        return Ok(());
    }
    let mut name: *const c_char = std::ptr::null();
    // SAFETY: the driver writes a pointer to a static string, or leaves it null.
    let name = unsafe {
        if (d.get_error_name)(code, &mut name) == 0 && !name.is_null() {
            CStr::from_ptr(name).to_string_lossy().into_owned()
        } else {
            format!("code {code}")
        }
    };
    Err(PyRuntimeError::new_err(format!(
        "CUDA error: {name} ({code}) in {what}"
    )))
}

/// Makes sure a context is current on this thread: torch's runtime leaves the primary
/// context of the device it uses current on the threads it ran on; on another thread none
/// is, and the driver's calls would fail. Then the primary context of `device` (torch's
/// ordinal, which the driver's numbering matches in the same process) is made current.
/// Retained once more each time it is set; a worker sets it at most once per thread.
///
/// # Errors
/// As [`Event::new`].
pub(super) fn ensure_context(device: c_int) -> Result<(), PyErr> {
    let d = driver()?;
    let mut ctx: *mut c_void = std::ptr::null_mut();
    // SAFETY: the driver writes the current context or null.
    check(
        d,
        unsafe { (d.ctx_get_current)(&mut ctx) },
        "cuCtxGetCurrent",
    )?;
    if !ctx.is_null() {
        return Ok(());
    }
    let mut dev: c_int = 0;
    // SAFETY: the driver writes the device handle, then the primary context's.
    check(
        d,
        unsafe { (d.device_get)(&mut dev, device) },
        "cuDeviceGet",
    )?;
    check(
        d,
        unsafe { (d.primary_ctx_retain)(&mut ctx, dev) },
        "cuDevicePrimaryCtxRetain",
    )?;
    // SAFETY: a context just retained.
    check(d, unsafe { (d.ctx_set_current)(ctx) }, "cuCtxSetCurrent")
}

/// A CUDA event with timing (`cuEventCreate` with default flags).
pub(super) struct Event(RawEvent);

impl Event {
    /// # Errors
    /// A "CUDA error" `RuntimeError` when the driver fails.
    pub(super) fn new() -> Result<Self, PyErr> {
        let d = driver()?;
        let mut e: RawEvent = std::ptr::null_mut();
        // SAFETY: the driver writes the new event's handle.
        check(d, unsafe { (d.event_create)(&mut e, 0) }, "cuEventCreate")?;
        Ok(Self(e))
    }

    /// Records the event on `stream`.
    ///
    /// # Errors
    /// As [`Event::new`].
    pub(super) fn record(&self, stream: Stream) -> Result<(), PyErr> {
        let d = driver()?;
        // SAFETY: a live event; `stream` is torch's handle for a live stream.
        check(
            d,
            unsafe { (d.event_record)(self.0, stream) },
            "cuEventRecord",
        )
    }

    /// Milliseconds between `self` and `end`, both completed.
    ///
    /// # Errors
    /// As [`Event::new`].
    pub(super) fn elapsed_ms(&self, end: &Event) -> Result<f32, PyErr> {
        let d = driver()?;
        let mut ms = 0f32;
        // SAFETY: two live events.
        check(
            d,
            unsafe { (d.event_elapsed_time)(&mut ms, self.0, end.0) },
            "cuEventElapsedTime",
        )?;
        Ok(ms)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if let Ok(d) = driver() {
            // SAFETY: the event is ours and destroyed once.
            unsafe { (d.event_destroy)(self.0) };
        }
    }
}

/// Waits for all work on the device (`cuCtxSynchronize`).
///
/// # Errors
/// As [`Event::new`].
pub(super) fn synchronize() -> Result<(), PyErr> {
    let d = driver()?;
    // SAFETY: no arguments.
    check(d, unsafe { (d.ctx_synchronize)() }, "cuCtxSynchronize")
}

/// Device memory of our own (`cuMemAlloc`), outside torch's caching allocator.
pub(super) struct DeviceBuffer {
    ptr: DevicePtr,
    /// Bytes.
    len: usize,
}

impl DeviceBuffer {
    /// `len` bytes, uninitialized.
    ///
    /// # Errors
    /// As [`Event::new`] (out of memory included).
    pub(super) fn new(len: usize) -> Result<Self, PyErr> {
        let d = driver()?;
        let mut ptr: DevicePtr = 0;
        // SAFETY: the driver writes the allocation's address.
        check(
            d,
            unsafe { (d.mem_alloc)(&mut ptr, len.max(1)) },
            "cuMemAlloc",
        )?;
        Ok(Self { ptr, len })
    }

    /// Enqueues zeroing the whole buffer on `stream`.
    ///
    /// # Errors
    /// As [`Event::new`].
    pub(super) fn zero_async(&self, stream: Stream) -> Result<(), PyErr> {
        let d = driver()?;
        // SAFETY: within our allocation.
        check(
            d,
            unsafe { (d.memset_d8_async)(self.ptr, 0, self.len, stream) },
            "cuMemsetD8Async",
        )
    }

    /// Copies `self.len` bytes from device address `src` on `stream` once all work on the
    /// device is done (`src` may have been written on another stream, the candidate's),
    /// then waits for the stream: on return the copy is done, and `src` may be freed.
    ///
    /// # Errors
    /// As [`Event::new`].
    pub(super) fn copy_from_device(&self, src: u64, stream: Stream) -> Result<(), PyErr> {
        let d = driver()?;
        // SAFETY: no arguments.
        check(d, unsafe { (d.ctx_synchronize)() }, "cuCtxSynchronize")?;
        // SAFETY: `src` is a live tensor of at least `self.len` bytes (the caller's
        // contiguous float32 copy of the output); within our allocation.
        check(
            d,
            unsafe { (d.memcpy_dtod_async)(self.ptr, src, self.len, stream) },
            "cuMemcpyDtoDAsync",
        )?;
        // SAFETY: a live stream.
        check(
            d,
            unsafe { (d.stream_synchronize)(stream) },
            "cuStreamSynchronize",
        )
    }

    /// The buffer's bytes as float32 values, copied to the host.
    ///
    /// # Errors
    /// As [`Event::new`].
    pub(super) fn to_host_f32(&self) -> Result<Vec<f32>, PyErr> {
        let d = driver()?;
        let mut host = vec![0f32; self.len / size_of::<f32>()];
        // SAFETY: `host` holds `self.len` bytes rounded down to whole floats, all written.
        check(
            d,
            unsafe {
                (d.memcpy_dtoh)(
                    host.as_mut_ptr().cast(),
                    self.ptr,
                    host.len() * size_of::<f32>(),
                )
            },
            "cuMemcpyDtoH",
        )?;
        Ok(host)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if let Ok(d) = driver() {
            // SAFETY: our allocation, freed once.
            unsafe { (d.mem_free)(self.ptr) };
        }
    }
}

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
//! Stream addresses come from torch (`torch._C._cuda_getCurrentRawStream`, captured before
//! any candidate ran: [`super::torch_ops`]).

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
    mem_alloc: unsafe extern "C" fn(*mut DevicePtr, usize) -> CuResult,
    mem_free: unsafe extern "C" fn(DevicePtr) -> CuResult,
    memset_d8_async: unsafe extern "C" fn(DevicePtr, u8, usize, Stream) -> CuResult,
    memcpy_dtod_async: unsafe extern "C" fn(DevicePtr, DevicePtr, usize, Stream) -> CuResult,
    memcpy_dtoh: unsafe extern "C" fn(*mut c_void, DevicePtr, usize) -> CuResult,
    get_error_name: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    ctx_set_current: unsafe extern "C" fn(*mut c_void) -> CuResult,
    device_get: unsafe extern "C" fn(*mut c_int, c_int) -> CuResult,
    primary_ctx_retain: unsafe extern "C" fn(*mut *mut c_void, c_int) -> CuResult,
    device_get_pci_bus_id: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> CuResult,
}

static DRIVER: OnceLock<Result<Driver, String>> = OnceLock::new();

fn driver() -> Result<&'static Driver, PyErr> {
    DRIVER
        .get_or_init(load)
        .as_ref()
        .map_err(|e| PyRuntimeError::new_err(e.clone()))
}

/// The symbol `name` of the library `lib` (`what`: its name in the error), as the function
/// pointer type `F`.
///
/// # Safety
/// `F` must be the symbol's true signature, a function pointer (pointer-sized).
pub(super) unsafe fn symbol<F: Copy>(
    lib: *mut c_void,
    name: &CStr,
    what: &str,
) -> Result<F, String> {
    assert_eq!(size_of::<F>(), size_of::<*mut c_void>());
    // SAFETY: a NUL-terminated name; a non-null result is the symbol's address.
    let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
    if p.is_null() {
        return Err(format!("{what} has no `{}`", name.to_string_lossy()));
    }
    // SAFETY: the caller names `F`, the symbol's signature.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

/// [`symbol`] of the CUDA driver.
///
/// # Safety
/// As [`symbol`]'s.
unsafe fn sym<F: Copy>(lib: *mut c_void, name: &CStr) -> Result<F, String> {
    // SAFETY: the caller's contract.
    unsafe { symbol(lib, name, "CUDA error: the CUDA driver") }
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
            mem_alloc: sym(lib, c"cuMemAlloc_v2")?,
            mem_free: sym(lib, c"cuMemFree_v2")?,
            memset_d8_async: sym(lib, c"cuMemsetD8Async")?,
            memcpy_dtod_async: sym(lib, c"cuMemcpyDtoDAsync_v2")?,
            memcpy_dtoh: sym(lib, c"cuMemcpyDtoH_v2")?,
            get_error_name: sym(lib, c"cuGetErrorName")?,
            ctx_set_current: sym(lib, c"cuCtxSetCurrent")?,
            device_get: sym(lib, c"cuDeviceGet")?,
            primary_ctx_retain: sym(lib, c"cuDevicePrimaryCtxRetain")?,
            device_get_pci_bus_id: sym(lib, c"cuDeviceGetPCIBusId")?,
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

/// The device's primary context, retained once per process (`cuDevicePrimaryCtxRetain`).
static PRIMARY: OnceLock<usize> = OnceLock::new();

/// Makes the primary context of `device` (torch's ordinal, which the driver's numbering
/// matches in the same process) current on this thread, as torch's runtime does on the
/// threads it runs on: the driver's calls below then go to torch's context, whatever
/// context a candidate left current.
///
/// # Errors
/// As [`Event::new`].
pub(super) fn ensure_context(device: c_int) -> Result<(), PyErr> {
    let d = driver()?;
    let ctx = match PRIMARY.get() {
        Some(&ctx) => ctx as *mut c_void,
        None => {
            let mut dev: c_int = 0;
            let mut ctx: *mut c_void = std::ptr::null_mut();
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
            *PRIMARY.get_or_init(|| ctx as usize) as *mut c_void
        }
    };
    // SAFETY: a context retained for the process's life.
    check(d, unsafe { (d.ctx_set_current)(ctx) }, "cuCtxSetCurrent")
}

/// The PCI bus id of `device` (torch's ordinal), as `0000:19:00.0`: the name NVML knows
/// the same GPU by ([`super::nvml`]), whatever `CUDA_VISIBLE_DEVICES` renumbered.
///
/// # Errors
/// As [`Event::new`].
pub(super) fn pci_bus_id(device: c_int) -> Result<String, PyErr> {
    let d = driver()?;
    let mut dev: c_int = 0;
    // SAFETY: the driver writes the device handle.
    check(
        d,
        unsafe { (d.device_get)(&mut dev, device) },
        "cuDeviceGet",
    )?;
    let mut buf = [0 as c_char; 32];
    // SAFETY: the driver writes a NUL-terminated id of at most `len` bytes.
    check(
        d,
        unsafe { (d.device_get_pci_bus_id)(buf.as_mut_ptr(), buf.len() as c_int, dev) },
        "cuDeviceGetPCIBusId",
    )?;
    // SAFETY: NUL-terminated within the buffer (the driver's contract).
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned())
}

/// The L2 flush buffer of [`super::timing`], allocated once per process: kept for its life,
/// so that no later measurement fails to allocate it next to a candidate's memory.
static FLUSH: OnceLock<DeviceBuffer> = OnceLock::new();

/// The flush buffer of `len` bytes (the first caller's size).
///
/// # Errors
/// As [`Event::new`].
pub(super) fn flush_buffer(len: usize) -> Result<&'static DeviceBuffer, PyErr> {
    if let Some(b) = FLUSH.get() {
        return Ok(b);
    }
    let b = DeviceBuffer::new(len)?;
    Ok(FLUSH.get_or_init(|| b))
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

    /// The buffer's size in bytes.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Enqueues a copy of `bytes` (at most the buffer's size) from device address `src` on
    /// `stream`, in its order (work on other streams is not waited for); nothing waits
    /// for it here.
    ///
    /// # Errors
    /// As [`Event::new`]; more bytes than the buffer holds.
    pub(super) fn copy_from_async(
        &self,
        src: u64,
        bytes: usize,
        stream: Stream,
    ) -> Result<(), PyErr> {
        let d = driver()?;
        if bytes > self.len {
            return Err(PyRuntimeError::new_err(format!(
                "a copy of {bytes} bytes into a buffer of {}",
                self.len
            )));
        }
        // SAFETY: within our allocation; `src` is the address torch reports for a live
        // tensor of at least `bytes` bytes (the caller's float32 copy of an output), which
        // torch frees only in the same stream's order, after this copy.
        check(
            d,
            unsafe { (d.memcpy_dtod_async)(self.ptr, src, bytes, stream) },
            "cuMemcpyDtoDAsync",
        )
    }

    /// The buffer's first `bytes` as float32 values, copied to the host once the device is
    /// done with what was enqueued before (a synchronous copy).
    ///
    /// # Errors
    /// As [`Event::new`].
    pub(super) fn read_f32(&self, bytes: usize) -> Result<Vec<f32>, PyErr> {
        let d = driver()?;
        let mut host = vec![0f32; bytes.min(self.len) / size_of::<f32>()];
        // SAFETY: `host` holds as many bytes as are read, all written.
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

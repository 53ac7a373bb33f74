//! What the GPU was doing around a measurement, as NVML reads it: the SM clock, the
//! temperature and how many processes hold a CUDA context on it (issue 36: the note of each
//! measurement says which conditions it was taken in, so that a noisy figure can be traced
//! to a throttled clock or a process of someone else's).
//!
//! NVML is the library the driver ships (`libnvidia-ml.so.1`), opened with `dlopen` as the
//! CUDA driver is ([`super::cuda`]): no link-time dependency, nothing called on a machine
//! without it. Signatures and constants: the NVML API reference (`nvml.h`):
//! `nvmlDeviceGetClockInfo(device, NVML_CLOCK_SM = 1, &mhz)`,
//! `nvmlDeviceGetTemperature(device, NVML_TEMPERATURE_GPU = 0, &celsius)`, and
//! `nvmlDeviceGetComputeRunningProcesses_v3(device, &count, NULL)`, which answers
//! `NVML_SUCCESS` (no process) or `NVML_ERROR_INSUFFICIENT_SIZE` (7) with the count set.

use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::sync::OnceLock;

use autokernel_core::GpuConditions;

type Ret = c_int;
type Device = *mut c_void;

const NVML_SUCCESS: Ret = 0;
const NVML_ERROR_INSUFFICIENT_SIZE: Ret = 7;
const NVML_CLOCK_SM: c_uint = 1;
const NVML_TEMPERATURE_GPU: c_uint = 0;

struct Nvml {
    by_pci_bus_id: unsafe extern "C" fn(*const c_char, *mut Device) -> Ret,
    by_index: unsafe extern "C" fn(c_uint, *mut Device) -> Ret,
    clock_info: unsafe extern "C" fn(Device, c_uint, *mut c_uint) -> Ret,
    temperature: unsafe extern "C" fn(Device, c_uint, *mut c_uint) -> Ret,
    compute_processes: unsafe extern "C" fn(Device, *mut c_uint, *mut c_void) -> Ret,
}

fn load() -> Option<Nvml> {
    // SAFETY: dlopen with a NUL-terminated name; each symbol gets the signature nvml.h
    // gives it (the field's type); nvmlInit_v2 takes no argument.
    unsafe {
        let lib = libc::dlopen(
            c"libnvidia-ml.so.1".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_LOCAL,
        );
        if lib.is_null() {
            return None;
        }
        let sym = |name: &std::ffi::CStr| libc::dlsym(lib, name.as_ptr());
        let init = sym(c"nvmlInit_v2");
        if init.is_null() {
            return None;
        }
        let init: unsafe extern "C" fn() -> Ret = std::mem::transmute(init);
        if init() != NVML_SUCCESS {
            return None;
        }
        let what = "NVML";
        Some(Nvml {
            by_pci_bus_id: super::cuda::symbol(lib, c"nvmlDeviceGetHandleByPciBusId_v2", what)
                .ok()?,
            by_index: super::cuda::symbol(lib, c"nvmlDeviceGetHandleByIndex_v2", what).ok()?,
            clock_info: super::cuda::symbol(lib, c"nvmlDeviceGetClockInfo", what).ok()?,
            temperature: super::cuda::symbol(lib, c"nvmlDeviceGetTemperature", what).ok()?,
            compute_processes: super::cuda::symbol(
                lib,
                c"nvmlDeviceGetComputeRunningProcesses_v3",
                what,
            )
            .ok()?,
        })
    }
}

/// NVML's handle on torch's `device` (by its PCI bus id, else its index), once per process.
fn device(ordinal: c_int) -> Option<(&'static Nvml, Device)> {
    static NVML: OnceLock<Option<(Nvml, usize)>> = OnceLock::new();
    let (nvml, dev) = NVML
        .get_or_init(|| {
            let nvml = load()?;
            let mut dev: Device = std::ptr::null_mut();
            let by_bus = super::cuda::pci_bus_id(ordinal)
                .ok()
                .and_then(|id| CString::new(id).ok())
                // SAFETY: a NUL-terminated id; NVML writes the handle.
                .is_some_and(|id| unsafe { (nvml.by_pci_bus_id)(id.as_ptr(), &mut dev) } == 0);
            // SAFETY: NVML writes the handle.
            if !by_bus && unsafe { (nvml.by_index)(ordinal.max(0) as c_uint, &mut dev) } != 0 {
                return None;
            }
            Some((nvml, dev as usize))
        })
        .as_ref()?;
    Some((nvml, *dev as Device))
}

/// The GPU's state now: the conditions of a measurement of one instant (`lease_wait_ms`
/// 0), or `None` where NVML cannot be read (no NVML, no GPU).
pub(super) fn now(ordinal: c_int) -> Option<GpuConditions> {
    let (nvml, dev) = device(ordinal)?;
    let (mut mhz, mut celsius, mut count) = (0 as c_uint, 0 as c_uint, 0 as c_uint);
    // SAFETY: a handle NVML gave; each call writes its one out-parameter (the process list
    // is not asked for: a null array with a count of 0).
    let (clock_ok, temp_ok, procs) = unsafe {
        (
            (nvml.clock_info)(dev, NVML_CLOCK_SM, &mut mhz) == NVML_SUCCESS,
            (nvml.temperature)(dev, NVML_TEMPERATURE_GPU, &mut celsius) == NVML_SUCCESS,
            (nvml.compute_processes)(dev, &mut count, std::ptr::null_mut()),
        )
    };
    Some(GpuConditions {
        lease_wait_ms: 0.0,
        sm_clock_mhz: clock_ok.then_some((mhz, mhz)),
        temperature_c: temp_ok.then_some((celsius, celsius)),
        gpu_processes: matches!(procs, NVML_SUCCESS | NVML_ERROR_INSUFFICIENT_SIZE)
            .then_some(count),
    })
}

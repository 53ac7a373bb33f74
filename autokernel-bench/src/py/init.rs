//! Starting CPython as the chosen interpreter (NOTES.md "pyo3 embedding").
//!
//! `PyConfig` with `executable` and `program_name` set to the venv's python gives real venv
//! semantics: `sys.prefix`, site-packages, `.pth` files and a correct `sys.executable`
//! (which torch.compile's subprocesses need). After `Py_InitializeFromConfig` the thread
//! state is released with `PyEval_SaveThread`, so `pyo3::Python::attach` can take it.

use std::ffi::{CStr, CString};
use std::mem::MaybeUninit;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use pyo3::ffi;

/// Initialises the embedded interpreter as `python`. Call once, before any pyo3 use.
///
/// # Errors
/// The interpreter's own message when a config step or initialisation fails.
pub(crate) fn initialize(python: &Path) -> Result<(), String> {
    let exe = CString::new(python.as_os_str().as_bytes())
        .map_err(|_| format!("python path `{}` contains a NUL byte", python.display()))?;
    // SAFETY: PyConfig is a plain C struct initialised by PyConfig_InitPythonConfig before
    // any field is read; the strings passed are NUL-terminated and outlive the calls (the
    // config copies them); the config is cleared on every path after initialisation.
    unsafe {
        if ffi::Py_IsInitialized() != 0 {
            return Err("the interpreter is already initialised".into());
        }
        let mut config = MaybeUninit::<ffi::PyConfig>::zeroed();
        let cfg = config.as_mut_ptr();
        ffi::PyConfig_InitPythonConfig(cfg);
        let steps = [
            ffi::PyConfig_SetBytesString(cfg, &raw mut (*cfg).executable, exe.as_ptr()),
            ffi::PyConfig_SetBytesString(cfg, &raw mut (*cfg).program_name, exe.as_ptr()),
        ];
        for status in steps {
            if ffi::PyStatus_Exception(status) != 0 {
                ffi::PyConfig_Clear(cfg);
                return Err(status_message(&status));
            }
        }
        let status = ffi::Py_InitializeFromConfig(cfg);
        ffi::PyConfig_Clear(cfg);
        if ffi::PyStatus_Exception(status) != 0 {
            return Err(status_message(&status));
        }
        ffi::PyEval_SaveThread();
    }
    Ok(())
}

fn status_message(status: &ffi::PyStatus) -> String {
    let text = |p: *const std::os::raw::c_char| {
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: a non-null err_msg/func of a PyStatus is a static C string.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    format!(
        "python initialisation failed: {} ({})",
        text(status.err_msg),
        text(status.func)
    )
}

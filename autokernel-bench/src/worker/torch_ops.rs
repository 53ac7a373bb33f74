//! Torch's callables the timed loop ([`super::timing`]) calls between a candidate's timed
//! calls, captured when the harness starts, before any candidate: C functions and method
//! descriptors (`torch.Tensor.copy_`, `torch._C._cuda_getCurrentRawStream`, …), which a
//! candidate can rebind in its namespaces but not re-code, called straight from Rust. A
//! Python function there (the harness's own) could be re-coded or made to read a rebound
//! table entry between two guard checks, and would run outside the timed window on exactly
//! the calls it was asked about: a place to compute a checked output untimed
//! (`tests/cases/timing/computes_where_the_judge_copies.py`). Called from Rust, they leave
//! no Python frame, so no profile or trace hook fires; a torch function or dispatch mode
//! would still intercept them, which the loop checks around every call.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyList};

/// The captured callables; see the module's documentation.
pub(super) struct TorchOps {
    /// `torch.Tensor`: an output must be of this exact class.
    pub tensor: Py<PyAny>,
    narrow: Py<PyAny>,
    view: Py<PyAny>,
    copy_: Py<PyAny>,
    numel: Py<PyAny>,
    size: Py<PyAny>,
    to: Py<PyAny>,
    contiguous: Py<PyAny>,
    detach: Py<PyAny>,
    data_ptr: Py<PyAny>,
    get_device: Py<PyAny>,
    numpy: Py<PyAny>,
    float32: Py<PyAny>,
    /// `torch._C._len_torch_function_stack` and `_len_torch_dispatch_stack`, where torch has
    /// them.
    function_modes: Option<Py<PyAny>>,
    dispatch_modes: Option<Py<PyAny>>,
    /// `torch._C._cuda_getDevice`, `_cuda_getCurrentRawStream` and `_cuda_sleep`, where
    /// torch was built with CUDA.
    current_device: Option<Py<PyAny>>,
    raw_stream: Option<Py<PyAny>>,
    sleep: Option<Py<PyAny>>,
    /// The launch counter's counts (`harness._LAUNCH_COUNTS`): the list itself, not the
    /// name.
    launch_counts: Py<PyList>,
    /// `functools.partial`, with which each timed call is made.
    partial: Py<PyAny>,
}

impl TorchOps {
    /// Captures the callables from `torch` and the harness module `harness`.
    ///
    /// # Errors
    /// When torch lacks one it always has (the harness imported torch already).
    pub(super) fn capture(py: Python<'_>, harness: &Bound<'_, PyModule>) -> PyResult<Self> {
        let torch = py.import("torch")?;
        let tensor = torch.getattr("Tensor")?;
        let c = torch.getattr("_C")?;
        let method = |name: &str| tensor.getattr(name).map(Bound::unbind);
        let optional = |name: &str| c.getattr(name).ok().map(Bound::unbind);
        Ok(Self {
            narrow: method("narrow")?,
            view: method("view")?,
            copy_: method("copy_")?,
            numel: method("numel")?,
            size: method("size")?,
            to: method("to")?,
            contiguous: method("contiguous")?,
            detach: method("detach")?,
            data_ptr: method("data_ptr")?,
            get_device: method("get_device")?,
            numpy: method("numpy")?,
            float32: torch.getattr("float32")?.unbind(),
            function_modes: optional("_len_torch_function_stack"),
            dispatch_modes: optional("_len_torch_dispatch_stack"),
            current_device: optional("_cuda_getDevice"),
            raw_stream: optional("_cuda_getCurrentRawStream"),
            sleep: optional("_cuda_sleep"),
            launch_counts: harness
                .getattr("_LAUNCH_COUNTS")?
                .cast_into::<PyList>()?
                .unbind(),
            partial: py.import("functools")?.getattr("partial")?.unbind(),
            tensor: tensor.unbind(),
        })
    }

    /// Whether `out` is a plain `torch.Tensor` (no subclass).
    pub(super) fn is_tensor(&self, py: Python<'_>, out: &Bound<'_, PyAny>) -> bool {
        out.get_type().is(self.tensor.bind(py))
    }

    /// `t.numel()`.
    pub(super) fn numel(&self, py: Python<'_>, t: &Bound<'_, PyAny>) -> PyResult<u64> {
        self.numel.bind(py).call1((t,))?.extract()
    }

    /// `tuple(t.size())`, for `view`.
    pub(super) fn size<'py>(
        &self,
        py: Python<'py>,
        t: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.size.bind(py).call1((t,))
    }

    /// `v.copy_(pool.narrow(0, offset, v.numel()).view(shape))`: input `v` overwritten in
    /// place with the window of its flat pool at `offset`.
    pub(super) fn rotate_into<'py>(
        &self,
        py: Python<'py>,
        v: &Bound<'py, PyAny>,
        shape: &Bound<'py, PyAny>,
        pool: &Bound<'py, PyAny>,
        offset: u64,
        numel: u64,
    ) -> PyResult<()> {
        let window = self.narrow.bind(py).call1((pool, 0, offset, numel))?;
        let window = self.view.bind(py).call1((window, shape))?;
        self.copy_.bind(py).call1((v, window))?;
        Ok(())
    }

    /// A contiguous float32 copy of `out` (detached; `out` itself when it is one already),
    /// its shape, and its device ordinal (−1 on the CPU).
    pub(super) fn float32<'py>(
        &self,
        py: Python<'py>,
        out: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyAny>, Vec<usize>, i64)> {
        let t = self.detach.bind(py).call1((out,))?;
        let t = self.to.bind(py).call1((t, self.float32.bind(py)))?;
        let t = self.contiguous.bind(py).call1((t,))?;
        let shape: Vec<usize> = self.size.bind(py).call1((&t,))?.extract()?;
        let device: i64 = self.get_device.bind(py).call1((&t,))?.extract()?;
        Ok((t, shape, device))
    }

    /// The device address of tensor `t`'s data.
    pub(super) fn data_ptr(&self, py: Python<'_>, t: &Bound<'_, PyAny>) -> PyResult<u64> {
        self.data_ptr.bind(py).call1((t,))?.extract()
    }

    /// The values of the contiguous float32 CPU tensor `t`, copied.
    pub(super) fn host_values(&self, py: Python<'_>, t: &Bound<'_, PyAny>) -> PyResult<Vec<f32>> {
        use numpy::{PyArrayDyn, PyArrayMethods};
        let array = self.numpy.bind(py).call1((t,))?;
        let array = array.cast::<PyArrayDyn<f32>>()?;
        let values = array.readonly().as_array().iter().copied().collect();
        Ok(values)
    }

    /// (torch function modes, torch dispatch modes) active now; zeros where torch cannot
    /// say.
    pub(super) fn modes(&self, py: Python<'_>) -> PyResult<(usize, usize)> {
        let len = |f: &Option<Py<PyAny>>| -> PyResult<usize> {
            match f {
                Some(f) => f.bind(py).call0()?.extract(),
                None => Ok(0),
            }
        };
        Ok((len(&self.function_modes)?, len(&self.dispatch_modes)?))
    }

    /// Torch's current CUDA device ordinal.
    ///
    /// # Errors
    /// When torch has no CUDA.
    pub(super) fn current_device(&self, py: Python<'_>) -> PyResult<i32> {
        cuda_only(&self.current_device, "_cuda_getDevice")?
            .bind(py)
            .call0()?
            .extract()
    }

    /// The address of torch's current CUDA stream on `device` (0: the legacy default
    /// stream).
    ///
    /// # Errors
    /// When torch has no CUDA.
    pub(super) fn current_stream(&self, py: Python<'_>, device: i32) -> PyResult<usize> {
        cuda_only(&self.raw_stream, "_cuda_getCurrentRawStream")?
            .bind(py)
            .call1((device,))?
            .extract()
    }

    /// Keeps torch's current stream busy for `cycles` clock cycles, where torch can.
    pub(super) fn sleep(&self, py: Python<'_>, cycles: u64) -> PyResult<()> {
        if let Some(sleep) = &self.sleep {
            sleep.bind(py).call1((cycles,))?;
        }
        Ok(())
    }

    /// Launches counted so far in the launch counter's slot `slot` (`harness.launch_slot`):
    /// read by index, and only an `int` itself is taken (a subclass could run code of the
    /// candidate's when read, outside the timed window); anything else reads as `u64::MAX`.
    pub(super) fn launches(&self, py: Python<'_>, slot: usize) -> PyResult<u64> {
        let count = self.launch_counts.bind(py).get_item(slot)?;
        if !count.is_exact_instance_of::<PyInt>() {
            return Ok(u64::MAX);
        }
        Ok(count.extract().unwrap_or(u64::MAX))
    }

    /// `functools.partial(function, **kwargs)`: one timed call's callable.
    pub(super) fn partial<'py>(
        &self,
        py: Python<'py>,
        function: &Bound<'py, PyAny>,
        kwargs: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.partial.bind(py).call((function,), Some(kwargs))
    }

    /// `str(t.dtype)` without the `torch.` prefix (`float16`).
    pub(super) fn dtype_name(&self, t: &Bound<'_, PyAny>) -> PyResult<String> {
        let name = t.getattr("dtype")?.str()?.to_string();
        Ok(name.trim_start_matches("torch.").to_string())
    }
}

fn cuda_only<'a>(f: &'a Option<Py<PyAny>>, name: &str) -> PyResult<&'a Py<PyAny>> {
    f.as_ref().ok_or_else(|| {
        pyo3::exceptions::PyRuntimeError::new_err(format!(
            "this torch has no `torch._C.{name}` (built without CUDA?)"
        ))
    })
}

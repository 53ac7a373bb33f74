//! The tamper guards: Rust's own references to what the judge relies on, taken before any
//! candidate loads, and the identity check that finds what a candidate replaced.
//!
//! Every guarded Python function is checked by identity and by its code object and
//! defaults ([`FnParts`]), dunders included where they are callables.
//!
//! Three kinds of guard, all named by the harness when it starts: single objects
//! (`harness.guarded_names`: the harness's own functions and the library functions it
//! calls), whole namespaces (`harness.guarded_namespaces`: every callable of `torch`,
//! `torch.nn.functional`, …, every attribute of `torch.Tensor`), and the interposers a
//! candidate could leave behind without rebinding a name (torch function or dispatch modes,
//! aten kernels registered through `torch.library`). The standard streams are guarded too
//! (`StdStreams`): a candidate that closes or replaces them would break the next one's
//! prints and hide the worker's own log; and so are the catalogue's data tables, by value
//! (`harness.guarded_tables`).

use pyo3::prelude::*;

/// What a candidate must leave as it found it, as it was before any candidate ran.
pub(super) struct Guards {
    /// (dotted name, object, its function parts) re-checked by identity after each candidate.
    objects: Vec<(String, Py<PyAny>, Option<FnParts>)>,
    /// Whole namespaces snapshotted before any candidate (see `guarded_namespaces`).
    namespaces: Vec<Namespace>,
    /// Modes and library kernels present before any candidate.
    interposers: Interposers,
    /// The standard streams as they were before any candidate.
    streams: StdStreams,
    /// `harness.guarded_tables` and what it gave before any candidate: the catalogue's data
    /// tables, which an edit in place changes without a change of identity.
    tables: (Py<PyAny>, String),
}

impl Guards {
    /// Takes the guards the imported `harness` module names (`guarded_names`,
    /// `guarded_namespaces`), before any candidate is loaded. A namespace this torch lacks
    /// is skipped.
    ///
    /// # Errors
    /// Python's, when the harness's lists cannot be read or a guarded name does not resolve.
    pub(super) fn take(py: Python<'_>, harness: &Bound<'_, PyModule>) -> PyResult<Guards> {
        let names: String = harness.getattr("guarded_names")?.call0()?.extract()?;
        let names: Vec<String> = serde_json::from_str(&names)
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
        let mut objects = Vec::new();
        for n in names {
            let obj = resolve_dotted(py, &n)?;
            let parts = FnParts::of(&obj);
            objects.push((n, obj.unbind(), parts));
        }
        #[derive(serde::Deserialize)]
        struct Space {
            name: String,
            scope: String,
        }
        let spaces: String = harness.getattr("guarded_namespaces")?.call0()?.extract()?;
        let spaces: Vec<Space> = serde_json::from_str(&spaces)
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
        let mut namespaces = Vec::new();
        for sp in spaces {
            // a namespace this torch lacks is skipped, not fatal
            if let Ok(ns) = Namespace::snapshot(py, &sp.name, &sp.scope) {
                namespaces.push(ns);
            }
        }
        let tables = harness.getattr("guarded_tables")?;
        let before: String = tables.call0()?.extract()?;
        Ok(Guards {
            objects,
            namespaces,
            interposers: Interposers::count(py),
            streams: StdStreams::take(py)?,
            tables: (tables.unbind(), before),
        })
    }

    /// Names of guarded objects that were replaced or removed since start, then entries of
    /// guarded namespaces, then global interposers (torch function or dispatch modes left
    /// active, kernels registered through `torch.library`). Empty when nothing changed.
    pub(super) fn changed(&self, py: Python<'_>) -> Vec<String> {
        let mut out: Vec<String> = self
            .objects
            .iter()
            .filter_map(|(name, obj, parts)| match resolve_dotted(py, name) {
                Ok(now) if !now.is(obj) => Some(name.clone()),
                Ok(now) => FnParts::changed(&now, parts.as_ref())
                    .then(|| format!("{name} (its code or defaults were replaced)")),
                Err(_) => Some(name.clone()),
            })
            .collect();
        for ns in &self.namespaces {
            out.extend(ns.changes(py));
        }
        if out.is_empty() {
            out.extend(Interposers::count(py).added_since(&self.interposers));
        }
        out.extend(self.streams.changes(py));
        let (tables, before) = &self.tables;
        let now = tables.bind(py).call0().and_then(|t| t.extract::<String>());
        if !matches!(&now, Ok(t) if t == before) {
            out.push("the catalogue's tables (edited in place)".into());
        }
        out
    }
}

/// The standard streams before any candidate: what fds 0, 1 and 2 are open on (device and
/// inode, read by Rust, not through Python a candidate can rebind) and Python's
/// `sys.stdin`, `sys.stdout`, `sys.stderr` objects.
struct StdStreams {
    /// `(device, inode)` of fds 0, 1, 2; `None` where one was not open.
    fds: [Option<(u64, u64)>; 3],
    /// `(name, object)` of `sys.stdin`, `sys.stdout`, `sys.stderr`.
    objects: Vec<(&'static str, Py<PyAny>)>,
}

/// Names of the standard streams, by fd.
const STD_NAMES: [&str; 3] = ["stdin", "stdout", "stderr"];

/// `(device, inode)` of what `fd` is open on, `None` when it is closed.
fn fd_identity(fd: i32) -> Option<(u64, u64)> {
    // SAFETY: fstat only writes the struct it is given; an invalid fd is an error return.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        (libc::fstat(fd, &mut st) == 0).then_some((st.st_dev as u64, st.st_ino as u64))
    }
}

impl StdStreams {
    fn take(py: Python<'_>) -> PyResult<StdStreams> {
        let sys = py.import("sys")?;
        let mut objects = Vec::new();
        for name in STD_NAMES {
            objects.push((name, sys.getattr(name)?.unbind()));
        }
        Ok(StdStreams {
            fds: [fd_identity(0), fd_identity(1), fd_identity(2)],
            objects,
        })
    }

    /// What changed, in words: an fd closed or pointed elsewhere, a `sys` stream replaced
    /// or closed.
    fn changes(&self, py: Python<'_>) -> Vec<String> {
        let mut out = Vec::new();
        for (fd, before) in self.fds.iter().enumerate() {
            let now = fd_identity(fd as i32);
            if now != *before {
                let what = if now.is_none() {
                    "was closed"
                } else {
                    "was pointed elsewhere"
                };
                out.push(format!("fd {fd} ({}) {what}", STD_NAMES[fd]));
            }
        }
        let Ok(sys) = py.import("sys") else {
            return out;
        };
        for (name, before) in &self.objects {
            match sys.getattr(*name) {
                Ok(now) if now.is(before) => {
                    // the original object: its `closed` is io's own property, not the candidate's
                    if !now.is_none()
                        && now
                            .getattr("closed")
                            .and_then(|c| c.is_truthy())
                            .unwrap_or(true)
                    {
                        out.push(format!("sys.{name} (closed)"));
                    }
                }
                _ => out.push(format!("sys.{name} (replaced)")),
            }
        }
        out
    }
}

/// The parts of a Python function that a candidate can swap while the function object
/// stays the same, so that an identity check alone passes: `__code__`, `__defaults__`,
/// `__kwdefaults__` (of `__func__` for a static or class method). `reference.__code__ =
/// zeros.__code__` once made the reference agree with an all-zeros kernel.
struct FnParts([Py<PyAny>; 3]);

impl FnParts {
    /// The parts of `obj` when it is a Python function (or wraps one); `None` for anything
    /// else (a C function, a class, data), whose behaviour no attribute assignment changes.
    fn of(obj: &Bound<'_, PyAny>) -> Option<FnParts> {
        let has_code = |o: &Bound<'_, PyAny>| o.hasattr("__code__").unwrap_or(false);
        let function = if has_code(obj) {
            obj.clone()
        } else {
            obj.getattr("__func__").ok().filter(has_code)?
        };
        let part = |name: &str| function.getattr(name).ok().map(Bound::unbind);
        Some(FnParts([
            part("__code__")?,
            part("__defaults__")?,
            part("__kwdefaults__")?,
        ]))
    }

    /// Whether `now` (the same object as at the snapshot) has other parts than `then`.
    fn changed(now: &Bound<'_, PyAny>, then: Option<&FnParts>) -> bool {
        let Some(then) = then else {
            return false;
        };
        match FnParts::of(now) {
            Some(parts) => parts
                .0
                .iter()
                .zip(&then.0)
                .any(|(a, b)| !a.bind(now.py()).is(b)),
            None => true,
        }
    }
}

/// A namespace's entries as they were before any candidate ran.
struct Namespace {
    name: String,
    /// The namespace object itself (module, class or dict).
    object: Py<PyAny>,
    /// "callables", "all" or "class" (see `harness.guarded_namespaces`).
    scope: String,
    /// (key, value, its function parts) of each guarded entry.
    entries: Vec<(String, Py<PyAny>, Option<FnParts>)>,
    /// Number of entries of a class namespace (where a new entry is tampering too).
    len: usize,
}

/// The mapping of a namespace object: a dict as it is, else its `__dict__`.
fn mapping<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    if obj.is_instance_of::<pyo3::types::PyDict>() {
        Ok(obj.clone())
    } else {
        obj.getattr("__dict__")
    }
}

impl Namespace {
    fn snapshot(py: Python<'_>, name: &str, scope: &str) -> PyResult<Namespace> {
        let object = resolve_dotted(py, name)?;
        let map = mapping(&object)?;
        let callable = py.import("builtins")?.getattr("callable")?;
        let mut entries = Vec::new();
        let items = map.call_method0("items")?;
        for item in items.try_iter()? {
            let (key, value): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item?.extract()?;
            let Ok(key) = key.extract::<String>() else {
                continue;
            };
            // dunders too where they are callables (`builtins.__import__`); data dunders
            // such as `__warningregistry__` legitimately change
            let dunder = key.starts_with("__") && key.ends_with("__");
            let is_callable = callable.call1((&value,))?.is_truthy()?;
            let keep = match scope {
                "class" => true,
                "all" => !dunder || is_callable,
                _ => is_callable,
            };
            if keep {
                let parts = FnParts::of(&value);
                entries.push((key, value.unbind(), parts));
            }
        }
        Ok(Namespace {
            name: name.to_string(),
            len: map.len()?,
            object: object.unbind(),
            scope: scope.to_string(),
            entries,
        })
    }

    /// `name.key` for every guarded entry replaced or removed (and, for a class, added).
    fn changes(&self, py: Python<'_>) -> Vec<String> {
        let now = match resolve_dotted(py, &self.name) {
            Ok(now) if now.is(&self.object) => now,
            _ => return vec![format!("{} (replaced)", self.name)],
        };
        let Ok(map) = mapping(&now) else {
            return vec![format!("{} (no namespace)", self.name)];
        };
        let mut out: Vec<String> = self
            .entries
            .iter()
            .filter_map(|(key, value, parts)| match map.get_item(key) {
                Ok(v) if !v.is(value) => Some(format!("{}.{key}", self.name)),
                Ok(v) => FnParts::changed(&v, parts.as_ref())
                    .then(|| format!("{}.{key} (its code or defaults were replaced)", self.name)),
                Err(_) => Some(format!("{}.{key}", self.name)),
            })
            .collect();
        if self.scope == "class" && map.len().map_or(true, |n| n != self.len) {
            out.push(format!("{} (attributes added)", self.name));
        }
        out
    }
}

/// What a candidate can leave behind to intercept every torch call without rebinding a
/// name: torch function or dispatch modes left active, or kernels registered through
/// `torch.library`. Counted through the guarded (identity-checked) `torch._C` and
/// `torch.library` namespaces; a count this torch cannot give is `None` and not checked.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Interposers {
    function_modes: Option<usize>,
    dispatch_modes: Option<usize>,
    library_impls: Option<usize>,
}

impl Interposers {
    fn count(py: Python<'_>) -> Interposers {
        let call = |helper: &str| {
            resolve_dotted(py, helper)
                .and_then(|f| f.call0())
                .and_then(|n| n.extract::<usize>())
                .ok()
        };
        Interposers {
            function_modes: call("torch._C._len_torch_function_stack"),
            dispatch_modes: call("torch._C._len_torch_dispatch_stack"),
            // overrides of aten ops only: torch.compile registers kernels of its own
            // namespaces (`_c10d_functional/...`), which no reference calls
            library_impls: resolve_dotted(py, "torch.library._impls")
                .and_then(|set| {
                    let mut n = 0;
                    for entry in set.try_iter()? {
                        if entry?.extract::<String>()?.starts_with("aten/") {
                            n += 1;
                        }
                    }
                    Ok(n)
                })
                .ok(),
        }
    }

    /// What grew since `before`, in words.
    fn added_since(&self, before: &Interposers) -> Vec<String> {
        let grew = |now: Option<usize>, then: Option<usize>| matches!((now, then), (Some(a), Some(b)) if a > b);
        let mut out = Vec::new();
        if grew(self.function_modes, before.function_modes) {
            out.push("a torch function mode was left active".to_string());
        }
        if grew(self.dispatch_modes, before.dispatch_modes) {
            out.push("a torch dispatch mode was left active".to_string());
        }
        if grew(self.library_impls, before.library_impls) {
            out.push("aten kernels were overridden through torch.library".to_string());
        }
        out
    }
}

/// The object a dotted name reaches from `sys.modules` (`torch.nn.functional.softmax`).
fn resolve_dotted<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    let modules = py.import("sys")?.getattr("modules")?;
    let mut parts = name.split('.');
    let first = parts.next().unwrap_or_default();
    let mut obj = modules.get_item(first)?;
    for part in parts {
        obj = obj.getattr(part)?;
    }
    Ok(obj)
}

"""Profiles a PyTorch model under torch.profiler and writes a Chrome trace.

Run by autokernel's bench worker (`Worker::call_script(this file, "profile", kwargs)`), or
directly for a check:

    python profile_model.py --example tiny --examples-dir examples/models --out trace.json

What it does, in order:
1. loads the model: a class in a file, an importable class (`transformers:GPT2LMHeadModel`;
   a class with a `config_class` is built as `Class(ConfigClass(**kwargs))`), or a bundled
   example (`examples/models/<name>.py`, whose module-level `EXAMPLE` dict gives the class,
   the default input shape and constructor kwargs);
   `pretrained` (a local folder) loads a checkpoint with `Class.from_pretrained(folder,
   local_files_only=True)` instead; a transformers `model_kwargs` key that the config class
   does not have is an error naming the closest field;
2. builds the call (`load_for_call`, which verification uses too, so both run the model on
   the same inputs): the positional input of `input_shape` (token ids in `[0, vocab)` for
   language models: a model with `config.vocab_size` or an `nn.Embedding`, given a shape of
   at most two dims; random normal floats otherwise), the keyword inputs of `inputs`
   (`{"name", "shape", "dtype"}`: see `make_named_input`), or what the user's function
   `inputs_fn` (`{"path", "function"}`) returns as `(args, kwargs)`;
3. warms up (`warmup` forward passes) and records the model's call sites
   (``call_sites.py``, beside this file: which module or call a kernel kind can replace,
   at which parameters);
4. wraps each leaf module's forward (and any SwiGLU-style MLP module, or gated MLP the
   call-site matcher matched, as a whole) in a `record_function` range named
   `nn.Module: <Class>`, so that an op written as several aten calls (an RMSNorm made of
   pow/mean/rsqrt/mul) is attributed to its module, and a module-level rotary function
   (HF's `apply_rotary_pos_emb`, for the duration) in `nn.Module: apply_rotary_pos_emb`;
   then records `iterations` forward passes under
   torch.profiler with CUDA activity on a GPU (CPU activity otherwise), `record_shapes=True`
   and no Python stacks (`autokernel profile --iterations N` sets `iterations`: CPU
   timings are noisy, and more passes average them out);
5. exports the Chrome trace to `trace_path` and returns a small JSON-serialisable summary,
   with the model's call sites.

Errors the user can fix (file or class not found, constructor failed, unknown config field,
inputs rejected) are raised as `ModelError`, whose message says what to change.
"""

import argparse
import difflib
import importlib
import importlib.util
import inspect
import json
import os
import re
import sys
import time

MODULE_PREFIX = "nn.Module: "  # must match autokernel_profiler::MODULE_PREFIX
_MLP_NAME = re.compile(r"(mlp|swiglu|feedforward|ffn)", re.IGNORECASE)


class ModelError(Exception):
    """The model could not be loaded or run; the message says what to change."""


# --- loading ---------------------------------------------------------------------------


def _load_file_module(path):
    if not os.path.isfile(path):
        raise ModelError(f"model file `{path}` does not exist")
    name = "autokernel_model_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModelError(f"`{path}` cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # the user's file failed to import
        raise ModelError(f"importing `{path}` failed: {type(e).__name__}: {e}") from e
    return module


def _module_classes(module):
    import torch

    return sorted(
        n for n, v in vars(module).items()
        if isinstance(v, type) and issubclass(v, torch.nn.Module) and v.__module__ == module.__name__
    )


def _get_class(module, class_name, where):
    import torch

    cls = getattr(module, class_name, None)
    found = ", ".join(_module_classes(module)) or "none"
    if cls is None:
        raise ModelError(f"class `{class_name}` not found in {where} (nn.Module classes there: {found})")
    # a class that is not a module (collections:OrderedDict) would fail later with a
    # traceback about a missing `.to`; a function (a factory such as torchvision's
    # resnet18) may still return a module, which load_model checks after the call
    if isinstance(cls, type) and not issubclass(cls, torch.nn.Module):
        raise ModelError(
            f"`{class_name}` in {where} is `{cls.__module__}.{cls.__qualname__}`, not a torch.nn.Module "
            f"subclass (nn.Module classes there: {found})")
    if not callable(cls):
        raise ModelError(f"`{class_name}` in {where} is a {type(cls).__name__}, not a torch.nn.Module class")
    return cls


def _user_frame(exc):
    """` (at FILE:LINE)` of the innermost traceback frame in the user's code (not this
    script, not an installed package such as torch), or "" when there is none."""
    here = os.path.abspath(__file__)
    found = ""
    tb = exc.__traceback__
    while tb is not None:
        path = os.path.abspath(tb.tb_frame.f_code.co_filename)
        installed = any(part in path for part in ("site-packages", "dist-packages"))
        if path != here and not installed and not path.startswith("<"):
            found = f" (at {path}:{tb.tb_lineno})"
        tb = tb.tb_next
    return found


def _config_fields(config_class):
    """The keyword arguments `config_class` knows, or None when they cannot be told."""
    names = set()
    try:
        names.update(n for n in inspect.signature(config_class.__init__).parameters if n not in ("self", "kwargs"))
    except (TypeError, ValueError):
        pass
    fields = getattr(config_class, "__dataclass_fields__", None) or {}
    names.update(fields)
    names.update(getattr(config_class, "attribute_map", None) or {})
    try:
        default = config_class()
    except Exception:  # noqa: BLE001 - a config without defaults: the names above only
        default = None
    if default is not None:
        names.update(n for n in vars(default) if not n.startswith("_"))
    return names or None, default


def check_config_kwargs(config_class, kwargs):
    """Raises ModelError for a key of `kwargs` that `config_class` does not have: transformers
    configs take any keyword silently, so `n_layers` for `n_layer` would build the default
    model."""
    names, default = _config_fields(config_class)
    if names is None:
        return
    for key in kwargs:
        # properties (num_labels) and init-only keywords kept privately (attn_implementation)
        known = key in names or (default is not None and (hasattr(default, key) or hasattr(default, "_" + key)))
        if known:
            continue
        close = difflib.get_close_matches(key, sorted(names), n=1, cutoff=0.6)
        hint = f": did you mean {close[0]}?" if close else ""
        raise ModelError(
            f"--model-kwargs key `{key}` is not a field of `{config_class.__name__}`{hint}\n"
            f"hint: the keys of a transformers model are its config's fields")


def _construct(cls, kwargs, pretrained=None):
    config_class = getattr(cls, "config_class", None)
    is_config = config_class is not None and isinstance(config_class, type)
    if is_config:
        check_config_kwargs(config_class, kwargs)
    try:
        if pretrained is not None:
            if not callable(getattr(cls, "from_pretrained", None)):
                raise ModelError(f"`{cls.__name__}` has no from_pretrained, so --pretrained cannot load it")
            if not os.path.isdir(pretrained):
                raise ModelError(f"--pretrained `{pretrained}` is not a folder (a checkpoint saved with save_pretrained)")
            # a local folder only: never a download
            return cls.from_pretrained(pretrained, local_files_only=True, **kwargs)
        if is_config:
            # transformers: Model(Config(**kwargs)), random weights
            return cls(config_class(**kwargs))
        return cls(**kwargs)
    except ModelError:
        raise
    except Exception as e:
        how = f"from `{pretrained}`" if pretrained is not None else f"with kwargs {json.dumps(kwargs)}"
        raise ModelError(
            f"constructing `{cls.__name__}` {how} failed: "
            f"{type(e).__name__}: {e}{_user_frame(e)}"
        ) from e


def load_model(model, model_kwargs, examples_dir, pretrained=None):
    """Returns (nn.Module, default input shape or None, class name); `pretrained`, a local
    checkpoint folder, loads its weights with `from_pretrained`."""
    source = model.get("source")
    kwargs = dict(model_kwargs or {})
    default_shape = None
    if source == "file":
        module = _load_file_module(model["path"])
        cls = _get_class(module, model["class"], f"`{model['path']}`")
    elif source == "import":
        try:
            module = importlib.import_module(model["module"])
        except Exception as e:
            hint = ""
            local = model["module"].replace(".", os.sep) + ".py"
            if isinstance(e, ModuleNotFoundError) and os.path.isfile(local):
                # `m:Class` beside m.py: the current folder is not on sys.path
                hint = (f"\nhint: `{local}` is in the current folder, which is not on the import path: "
                        f"pass `--model {local} --class {model['class']}`, or add the folder to PYTHONPATH")
            raise ModelError(f"cannot import module `{model['module']}`: {type(e).__name__}: {e}{hint}") from e
        cls = _get_class(module, model["class"], f"module `{model['module']}`")
    elif source == "example":
        name = model["name"]
        path = os.path.join(examples_dir or "", f"{name}.py")
        if not os.path.isfile(path):
            have = sorted(f[:-3] for f in os.listdir(examples_dir or ".") if f.endswith(".py")) if examples_dir and os.path.isdir(examples_dir) else []
            raise ModelError(f"no bundled example `{name}` (examples: {', '.join(have) or 'none'})")
        module = _load_file_module(path)
        example = getattr(module, "EXAMPLE", None) or {}
        cls = _get_class(module, example.get("class", ""), f"example `{name}`")
        kwargs = {**example.get("kwargs", {}), **kwargs}
        default_shape = example.get("input_shape")
    else:
        raise ModelError(f"unknown model source `{source}`; expected file, import or example")
    net = _construct(cls, kwargs, pretrained)
    import torch

    if not isinstance(net, torch.nn.Module):
        kind = type(net)
        raise ModelError(f"calling `{cls.__name__}` gave a `{kind.__module__}.{kind.__qualname__}`, not a torch.nn.Module")
    return net, default_shape, cls.__name__


# --- inputs ----------------------------------------------------------------------------


def _vocab_size(model):
    import torch

    config = getattr(model, "config", None)
    v = getattr(config, "vocab_size", None)
    if isinstance(v, int) and v > 0:
        return v
    for m in model.modules():
        if isinstance(m, torch.nn.Embedding):
            return m.num_embeddings
    return None


def make_inputs(model, shape, dtype, device, g=None):
    """The positional input of `shape`: token ids for a language model, else floats."""
    import torch

    g = g or torch.Generator(device="cpu").manual_seed(0)
    vocab = _vocab_size(model)
    if vocab is not None and len(shape) <= 2:
        return torch.randint(0, vocab, tuple(shape), generator=g, dtype=torch.long).to(device), vocab
    return torch.randn(tuple(shape), generator=g, dtype=torch.float32).to(device=device, dtype=dtype), None


_INT_DTYPES = ("int64", "int32")
_FLOAT_DTYPES = ("float16", "bfloat16", "float32")


def make_named_input(model, name, shape, dtype_name, model_dtype, device, g):
    """One keyword input of `shape`, by its name and dtype (`None`: from the name):

    - a mask (`attention_mask`, `decoder_attention_mask`, any `*_mask`): all ones (int64,
      or the dtype given), i.e. nothing masked;
    - `token_type_ids`: zeros (one segment); `position_ids`: 0..n-1 along the last dim;
    - other ids (`input_ids`, `decoder_input_ids`, any `*_ids`, or dtype int64/int32):
      random token ids in `[0, vocab)`, the vocab being `config.vocab_size` (or the first
      `nn.Embedding`'s size);
    - anything else: random normal floats in the model's dtype (or the dtype given);
      `bool`: all True.
    """
    import torch

    shape = tuple(int(d) for d in shape)
    torch_of = {"int64": torch.long, "int32": torch.int32, "bool": torch.bool,
                "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
    if dtype_name is not None and dtype_name not in torch_of:
        raise ModelError(f"input `{name}`: unknown dtype `{dtype_name}`; expected one of {', '.join(torch_of)}")
    if name.endswith("_mask"):
        dt = torch_of[dtype_name or "int64"]
        return torch.ones(shape, dtype=dt, device=device), "ones"
    if dtype_name == "bool":
        return torch.ones(shape, dtype=torch.bool, device=device), "ones"
    is_ids = name.endswith("_ids") or dtype_name in _INT_DTYPES
    if is_ids and (dtype_name is None or dtype_name in _INT_DTYPES):
        dt = torch_of[dtype_name or "int64"]
        if name == "token_type_ids":
            return torch.zeros(shape, dtype=dt, device=device), "zeros"
        if name == "position_ids":
            n = shape[-1] if shape else 1
            return torch.arange(n, dtype=dt, device=device).expand(shape).contiguous(), "positions"
        vocab = _vocab_size(model)
        if vocab is None:
            raise ModelError(
                f"input `{name}` takes token ids, but the model has no config.vocab_size or nn.Embedding to "
                f"draw them from\nhint: give it a float dtype (`--input {name}=...:float32`) or build the "
                f"inputs yourself with --inputs FILE.py:FUNC")
        return torch.randint(0, vocab, shape, generator=g, dtype=torch.long).to(device=device, dtype=dt), "token ids"
    dt = torch_of[dtype_name] if dtype_name else model_dtype
    return torch.randn(shape, generator=g, dtype=torch.float32).to(device=device, dtype=dt), "random normal"


def _check_input_names(model, names):
    """A keyword input that forward has no parameter for is an error naming the closest
    one (forward taking **kwargs accepts names with no close match)."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return
    named = [n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    takes_any = any(p.kind == p.VAR_KEYWORD for p in params.values())
    for name in names:
        if name in named:
            continue
        close = difflib.get_close_matches(name, named, n=1, cutoff=0.6)
        if close or not takes_any:
            hint = f"did you mean {close[0]}?" if close else f"its parameters: {', '.join(named) or 'none'}"
            raise ModelError(f"--input `{name}`: `{type(model).__name__}.forward` has no parameter `{name}`; {hint}")


def _load_inputs_fn(spec, model, device, dtype):
    path, function = spec["path"], spec["function"]
    module = _load_file_module(path)
    fn = getattr(module, function, None)
    if not callable(fn):
        have = sorted(n for n, v in vars(module).items() if inspect.isfunction(v) and v.__module__ == module.__name__)
        raise ModelError(f"--inputs: no function `{function}` in `{path}` (functions there: {', '.join(have) or 'none'})")
    try:
        params = inspect.signature(fn).parameters
        takes_any = any(p.kind == p.VAR_KEYWORD for p in params.values())
        extra = {k: v for k, v in (("device", device), ("dtype", dtype)) if takes_any or k in params}
        out = fn(model, **extra)
    except Exception as e:
        raise ModelError(f"--inputs `{path}:{function}` failed: {type(e).__name__}: {e}{_user_frame(e)}") from e
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], (list, tuple)) and isinstance(out[1], dict)):
        raise ModelError(
            f"--inputs `{path}:{function}` returned a {type(out).__name__}; it must return (args, kwargs): "
            f"a list or tuple of positional inputs and a dict of keyword inputs, e.g. `return (pixels,), {{}}`")
    return list(out[0]), dict(out[1])


class Call:
    """How the model is called: `model(*args, **kwargs)`, with a line saying what the inputs are."""

    def __init__(self, args, kwargs, describe, shape=(), kind=None):
        self.args, self.kwargs, self.describe = args, kwargs, describe
        # the positional input built from --input-shape, when there is one
        self.shape, self.kind = list(shape), kind

    def __call__(self, model):
        return model(*self.args, **self.kwargs)


def _shape_text(t):
    import torch

    if isinstance(t, torch.Tensor):
        return "x".join(str(d) for d in t.shape) + f" {str(t.dtype).replace('torch.', '')}"
    return type(t).__name__


def build_call(model, shape, inputs, inputs_fn, dtype, device):
    """The inputs of one forward (a `Call`), the same for profiling and verification: one
    generator seeded once, the positional input first, then the keyword inputs in order."""
    import torch

    if inputs_fn:
        args, kwargs = _load_inputs_fn(inputs_fn, model, device, dtype)
        parts = [_shape_text(a) for a in args] + [f"{k}={_shape_text(v)}" for k, v in kwargs.items()]
        return Call(args, kwargs, f"{inputs_fn['path']}:{inputs_fn['function']} -> {', '.join(parts) or 'nothing'}")
    g = torch.Generator(device="cpu").manual_seed(0)
    args, parts, kind = [], [], None
    if shape:
        x, vocab = make_inputs(model, shape, dtype, device, g)
        args.append(x)
        kind = "token_ids" if vocab else "float"
        parts.append(f"{'x'.join(map(str, shape))} {'token ids' if vocab else str(dtype).replace('torch.', '')}")
    kwargs = {}
    _check_input_names(model, [i["name"] for i in inputs or []])
    for i in inputs or []:
        t, what = make_named_input(model, i["name"], i["shape"], i.get("dtype"), dtype, device, g)
        kwargs[i["name"]] = t
        parts.append(f"{i['name']}={'x'.join(map(str, i['shape']))} {what}")
    return Call(args, kwargs, ", ".join(parts), shape, kind)


def load_for_call(model, model_kwargs=None, examples_dir=None, pretrained=None, input_shape=None,
                  inputs=None, inputs_fn=None, dtype=None, device="cpu"):
    """The model on `device` in `dtype`, in eval mode, and its `Call`; `profile` and the
    verification script both load through here so that they run the same model on the same
    inputs. Returns (model, call, class name)."""
    if inputs_fn and (input_shape or inputs):
        raise ModelError("--inputs builds all of forward's inputs: pass it without --input-shape and --input")
    net, default_shape, class_name = load_model(model, model_kwargs, examples_dir, pretrained)
    shape = list(input_shape or [])
    if not shape and not inputs and not inputs_fn:
        shape = list(default_shape or [])
    if not shape and not inputs and not inputs_fn:
        raise ModelError(
            f"no inputs for `{class_name}`; pass --input-shape (e.g. 1,1024), --input NAME=SHAPE "
            f"(e.g. --input input_ids=1,16) or --inputs FILE.py:FUNC")
    net = net.to(device=device, dtype=dtype).eval()
    return net, build_call(net, shape, inputs, inputs_fn, dtype, device), class_name


# --- module ranges ---------------------------------------------------------------------


def _is_swiglu(m):
    import torch

    if not _MLP_NAME.search(type(m).__name__):
        return False
    if any(isinstance(c, torch.nn.SiLU) for c in m.modules()):
        return True
    try:
        return "silu" in inspect.getsource(type(m).forward)
    except (OSError, TypeError):
        return False


def wrap_modules(model, whole=()):
    """Wraps leaf modules (and SwiGLU MLPs and the modules in `whole`, as a whole: the gated
    MLPs the call-site matcher matched) in `nn.Module: <Class>` ranges."""
    import torch

    whole = set(map(id, whole))

    wrapped = 0

    def wrap(m):
        nonlocal wrapped
        name = MODULE_PREFIX + type(m).__name__
        forward = m.forward

        def ranged(*args, **kwargs):
            with torch.profiler.record_function(name):
                return forward(*args, **kwargs)

        m.forward = ranged
        wrapped += 1

    def visit(m, is_root):
        children = list(m.children())
        if not is_root and (not children or id(m) in whole or _is_swiglu(m)):
            wrap(m)
            return
        for c in children:
            visit(c, False)

    visit(model, True)
    return wrapped


def _ranged_function(original):
    """`original` (a module-level function the call-site matcher records, such as HF's
    ``apply_rotary_pos_emb``) run inside an `nn.Module: <function name>` range: its ops are
    grouped as one op named like its call sites (``call_sites.rotary_call_sites``)."""
    import torch

    name = MODULE_PREFIX + getattr(original, "__name__", "function")

    def ranged(*args, **kwargs):
        with torch.profiler.record_function(name):
            return original(*args, **kwargs)

    return ranged


# --- profiling -------------------------------------------------------------------------


def _call_sites():
    """``call_sites.py``, beside this file (its folder put on ``sys.path``, as verification's
    scripts folder is)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    return importlib.import_module("call_sites")


def profile(model, trace_path, model_kwargs=None, input_shape=None, dtype="float32",
            device="auto", examples_dir=None, warmup=2, iterations=3, dtype_is_default=False,
            inputs=None, inputs_fn=None, pretrained=None):
    """Profiles the model and writes the Chrome trace to `trace_path`; returns a summary.

    `model` is {"source": "file", "path", "class"} | {"source": "import", "module", "class"}
    | {"source": "example", "name"}. `input_shape` empty or None (and no `inputs` or
    `inputs_fn`) takes the example's default; `inputs`, `inputs_fn` and `pretrained` as
    `load_for_call` takes them. On the CPU a default half dtype becomes float32
    (`dtype_is_default`).
    """
    import torch

    has_cuda = torch.cuda.is_available()
    if device == "cuda" and not has_cuda:
        raise ModelError("device `cuda` was requested but torch.cuda.is_available() is False; use --device cpu")
    on_gpu = has_cuda and device != "cpu"
    dev = torch.device("cuda" if on_gpu else "cpu")
    if not on_gpu and dtype_is_default and dtype in ("float16", "bfloat16"):
        dtype = "float32"
    torch_dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}.get(dtype)
    if torch_dtype is None:
        raise ModelError(f"unknown dtype `{dtype}`; expected float16, bfloat16 or float32")

    net, call, class_name = load_for_call(model, model_kwargs, examples_dir, pretrained, input_shape,
                                          inputs, inputs_fn, torch_dtype, dev)
    params = sum(p.numel() for p in net.parameters())
    sites = _call_sites()

    def step():
        with torch.no_grad():
            call(net)

    try:
        for _ in range(max(1, int(warmup))):
            step()
        # a gated MLP the matcher matched is one fused_mlp call site, timed as a whole: its
        # projections are not matmul call sites
        mlp_sites, mlps = sites.mlp_call_sites(net, step)
        call_sites = sites.norm_call_sites(net, step) + sites.add_norm_call_sites(net, step) + mlp_sites
        call_sites += sites.matmul_call_sites(net, step, skip=sites.mlp_linears(mlps))
        call_sites += sites.attention_call_sites(net, step)
        call_sites += sites.rotary_call_sites(net, step)
    except Exception as e:
        raise ModelError(
            f"`{class_name}` rejected its inputs ({call.describe}): "
            f"{type(e).__name__}: {e}{_user_frame(e)}"
        ) from e
    if on_gpu:
        torch.cuda.synchronize()
    wrapped = wrap_modules(net, whole=mlps)

    activities = [torch.profiler.ProfilerActivity.CPU]
    if on_gpu:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    started = time.perf_counter()
    # a module-level rotary function (HF's apply_rotary_pos_emb) is timed as one op named
    # after it, the call site's name, while profiling only
    with sites.hf_rotary_function(net, _ranged_function), \
            torch.profiler.profile(activities=activities, record_shapes=True, with_stack=False) as prof:
        for _ in range(max(1, int(iterations))):
            step()
        if on_gpu:
            torch.cuda.synchronize()
    elapsed = time.perf_counter() - started
    os.makedirs(os.path.dirname(os.path.abspath(trace_path)), exist_ok=True)
    prof.export_chrome_trace(trace_path)
    launches = sites.kernel_launches(prof) / max(1, int(iterations)) if on_gpu else None
    return {
        "trace_path": os.path.abspath(trace_path),
        "device": "cuda" if on_gpu else "cpu",
        "device_name": torch.cuda.get_device_name() if on_gpu else "cpu",
        "model_class": class_name,
        "parameters": params,
        "input_shape": call.shape,
        "input_kind": call.kind,
        "inputs": call.describe,
        "vocab_size": _vocab_size(net),
        "dtype": dtype,
        "wrapped_modules": wrapped,
        "iterations": int(iterations),
        # kernels the model's forward launches (None on the CPU: no kernels there)
        "launches_per_forward": launches,
        "profiled_s": round(elapsed, 3),
        "call_sites": call_sites,
    }


def main(argv=None):
    p = argparse.ArgumentParser(description="Profile a model and write a Chrome trace.")
    p.add_argument("--example")
    p.add_argument("--examples-dir")
    p.add_argument("--file")
    p.add_argument("--class", dest="cls")
    p.add_argument("--import", dest="imp", help="module:Class")
    p.add_argument("--model-kwargs", default="{}")
    p.add_argument("--input-shape", default="")
    p.add_argument("--input", action="append", default=[], help="NAME=DIMS[:DTYPE], repeatable")
    p.add_argument("--inputs", help="FILE.py:FUNC returning (args, kwargs)")
    p.add_argument("--pretrained", help="a local checkpoint folder")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--device", default="auto")
    p.add_argument("--out", required=True)
    p.add_argument("--warmup", type=int, default=2, help="forward passes before recording")
    p.add_argument("--iterations", type=int, default=3, help="forward passes recorded")
    a = p.parse_args(argv)
    if a.example:
        model = {"source": "example", "name": a.example}
    elif a.file:
        model = {"source": "file", "path": a.file, "class": a.cls}
    else:
        module, _, cls = a.imp.partition(":")
        model = {"source": "import", "module": module, "class": cls}
    shape = [int(s) for s in a.input_shape.split(",") if s.strip()]
    inputs = []
    for text in a.input:
        name, _, rest = text.partition("=")
        dims, _, dt = rest.partition(":")
        inputs.append({"name": name, "shape": [int(d) for d in dims.split(",")], "dtype": dt or None})
    inputs_fn = None
    if a.inputs:
        path, _, function = a.inputs.rpartition(":")
        inputs_fn = {"path": path, "function": function}
    print(json.dumps(profile(model, a.out, json.loads(a.model_kwargs), shape, a.dtype, a.device,
                             a.examples_dir, warmup=a.warmup, iterations=a.iterations,
                             inputs=inputs, inputs_fn=inputs_fn, pretrained=a.pretrained)))


if __name__ == "__main__":
    main()

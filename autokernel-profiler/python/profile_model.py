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
3. wraps each leaf module's forward (and any SwiGLU-style MLP module, as a whole) in a
   `record_function` range named `nn.Module: <Class>`, so that an op written as several
   aten calls (an RMSNorm made of pow/mean/rsqrt/mul) is attributed to its module;
4. warms up (`warmup` forward passes), then records `iterations` forward passes under
   torch.profiler with CUDA activity on a GPU (CPU activity otherwise), `record_shapes=True`
   and no Python stacks (`autokernel profile --iterations N` sets `iterations`: CPU
   timings are noisy, and more passes average them out);
5. exports the Chrome trace to `trace_path` and returns a small JSON-serialisable summary.

Errors the user can fix (file or class not found, constructor failed, unknown config field,
inputs rejected) are raised as `ModelError`, whose message says what to change.
"""

import argparse
import contextlib
import difflib
import importlib
import importlib.util
import inspect
import json
import math
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


def wrap_modules(model):
    """Wraps leaf modules (and SwiGLU MLPs, as a whole) in `nn.Module: <Class>` ranges."""
    import torch

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
        if not is_root and (not children or _is_swiglu(m)):
            wrap(m)
            return
        for c in children:
            visit(c, False)

    visit(model, True)
    return wrapped


# --- profiling -------------------------------------------------------------------------


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
    wrapped = wrap_modules(net)

    def step():
        with torch.no_grad():
            call(net)

    try:
        for _ in range(max(1, int(warmup))):
            step()
        call_sites = norm_call_sites(net, step) + matmul_call_sites(net, step)
        call_sites += attention_call_sites(net, step)
    except Exception as e:
        raise ModelError(
            f"`{class_name}` rejected its inputs ({call.describe}): "
            f"{type(e).__name__}: {e}{_user_frame(e)}"
        ) from e
    if on_gpu:
        torch.cuda.synchronize()

    activities = [torch.profiler.ProfilerActivity.CPU]
    if on_gpu:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    started = time.perf_counter()
    with torch.profiler.profile(activities=activities, record_shapes=True, with_stack=False) as prof:
        for _ in range(max(1, int(iterations))):
            step()
        if on_gpu:
            torch.cuda.synchronize()
    elapsed = time.perf_counter() - started
    os.makedirs(os.path.dirname(os.path.abspath(trace_path)), exist_ok=True)
    prof.export_chrome_trace(trace_path)
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


# --- norm call sites: parameters read from each module, decided by its own forward ------

# The variants a norm module may compute, in the order a tie is decided (defaults first):
# rmsnorm's weight offset (Gemma: 1 + w) and cast order (catalogue.rmsnorm_model_code).
_RMS_VARIANTS = [(o, c) for o in (0, 1) for c in ("float32", "llama", "t5")]


def norm_kind(m):
    """`layernorm` for an nn.LayerNorm, `rmsnorm` for an RMS norm module (an nn.RMSNorm, a
    class whose name says RMSNorm, or one with a 1-D weight and a `variance_epsilon`, as
    T5LayerNorm), else None."""
    import torch

    if isinstance(m, torch.nn.LayerNorm):
        return "layernorm"
    w = getattr(m, "weight", None)
    rms = isinstance(m, getattr(torch.nn, "RMSNorm", ())) or "rmsnorm" in type(m).__name__.lower() \
        or hasattr(m, "variance_epsilon")
    if rms and isinstance(w, torch.Tensor) and w.dim() == 1:
        return "rmsnorm"
    return None


def _tolerance(kind, dtype):
    """(atol, rtol) of the catalogue for `kind` in `dtype` (the judge's elementwise bound)."""
    import catalogue

    t = catalogue.spec(kind)["tolerances"][str(dtype).replace("torch.", "")]
    return t["atol"], t["rtol"]


def _excess(out, ref, kind):
    """How far `out` is from `ref` beyond the kind's tolerance in ref's dtype: the largest
    |out − ref| − (atol + rtol·|ref|) (≤ 0 within tolerance), and the largest |out − ref|."""
    import torch

    atol, rtol = _tolerance(kind, ref.dtype if ref.dtype != torch.float32 else out.dtype)
    o, r = out.detach().float(), ref.detach().float()
    if o.shape != r.shape:
        return float("inf"), float("inf")
    diff = (o - r).abs().nan_to_num(float("inf"))
    return float((diff - (atol + rtol * r.abs())).max()), float(diff.max())


def _own_forward(m, x):
    """The module's class forward on x: what the model computes, whatever replaced the
    instance's forward (a profiler range, a plug)."""
    import torch

    with torch.no_grad():
        return type(m).forward(m, x)


def norm_params(m, x):
    """The catalogue parameters of norm module `m` called on `x` [..., cols]:
    ``(kind, params, None)`` when the module's own forward matches the kind's model code
    (``catalogue.rmsnorm_model_code``, ``F.layer_norm``) at those parameters within the
    kind's tolerance, else ``(kind, None, reason)`` with the measured error.

    eps and the bias come from the module's attributes (`eps`, `variance_epsilon`,
    `bias`); rmsnorm's weight offset and cast order cannot be read from an attribute and are
    decided by running the module: the variant with the smallest error on `x`, and among
    cast orders that tie (x and the weight in one dtype, where LlamaRMSNorm and T5LayerNorm
    agree) the one that matches a float32-weight copy of the module called on x in float16,
    where the three orders differ.
    """
    import copy

    import torch
    import torch.nn.functional as F

    import catalogue

    kind = norm_kind(m)
    out = _own_forward(m, x)
    if not isinstance(out, torch.Tensor):
        return kind, None, f"{type(m).__name__} returns {type(out).__name__}, not a tensor"
    if kind == "layernorm":
        if m.weight is None or len(m.normalized_shape) != 1:
            return kind, None, f"{type(m).__name__} without an affine weight or over several dims"
        params = {"eps": float(m.eps), "has_bias": m.bias is not None}
        ref = F.layer_norm(x, m.normalized_shape, m.weight, m.bias, m.eps)
        excess, err = _excess(out, ref, kind)
        if excess > 0:
            return kind, None, f"{type(m).__name__}'s forward differs from F.layer_norm by {err:.3g}"
        return kind, params, None
    eps = getattr(m, "eps", getattr(m, "variance_epsilon", None))
    if eps is None:  # nn.RMSNorm(eps=None) uses the dtype's machine epsilon
        eps = torch.finfo(x.dtype).eps
    eps = float(eps)
    scored = []
    for offset, order in _RMS_VARIANTS:
        ref = catalogue.rmsnorm_model_code(x, m.weight, eps, offset, order)
        excess, err = _excess(out, ref, kind)
        if excess <= 0:
            scored.append((err, offset, order))
    if not scored:
        best = min(_excess(out, catalogue.rmsnorm_model_code(x, m.weight, eps, o, c), kind)[1]
                   for o, c in _RMS_VARIANTS)
        return kind, None, (f"{type(m).__name__} (eps {eps:g}) matches no rmsnorm variant "
                            f"(weight offset 0/1, cast order float32/llama/t5): error {best:.3g} at best")
    least = min(s[0] for s in scored)
    tied = [s for s in scored if s[0] == least]
    offset, order = tied[0][1], tied[0][2]
    if len({s[2] for s in tied}) > 1:
        # a copy with a float32 weight that is not all ones (an initialised Llama's is),
        # called in float16: the orders then differ in rounding and in the output dtype
        probe = copy.deepcopy(m).float()
        g = torch.Generator(device=x.device).manual_seed(0)
        with torch.no_grad():
            probe.weight.copy_(1.0 + 0.5 * torch.randn(probe.weight.shape, generator=g, device=x.device))
        xh = x.detach().to(torch.float16)

        def probe_error(o, c):
            ref = catalogue.rmsnorm_model_code(xh, probe.weight, eps, o, c)
            if ref.dtype != pout.dtype:
                return float("inf")
            return (pout.float() - ref.float()).abs().max().item()

        try:
            pout = _own_forward(probe, xh)
            errs = [(probe_error(o, c), i) for i, (_, o, c) in enumerate(tied)]
            offset, order = tied[min(errs)[1]][1:]
        except Exception:  # noqa: BLE001 - a module that rejects the probe keeps the tie's first
            pass
    return kind, {"eps": eps, "weight_offset": offset, "cast_order": order}, None


def capture_module_inputs(model, forward, select, problem_of):
    """Runs `forward()` once with a pre-hook on every module of `model` that `select(m)`
    accepts; returns ``{module: (first input, problem shapes, dtype name, calls)}`` for each
    that was called, its problem shapes (``problem_of(m, x)``, in first-seen order) and its
    calls in that one forward pass."""
    seen = {}
    hooks = []

    def hook(m, args):
        if not args or not hasattr(args[0], "shape") or args[0].dim() < 1:
            return
        x = args[0]
        problem = problem_of(m, x)
        entry = seen.setdefault(m, [x.detach().clone(), [], str(x.dtype).replace("torch.", ""), 0])
        if problem not in entry[1]:
            entry[1].append(problem)
        entry[3] += 1

    for m in model.modules():
        if select(m):
            hooks.append(m.register_forward_pre_hook(hook))
    try:
        forward()
    finally:
        for h in hooks:
            h.remove()
    return {m: tuple(v) for m, v in seen.items()}


def capture_norm_inputs(model, forward):
    """:func:`capture_module_inputs` of the norm modules, problem shapes (rows, cols)."""
    return capture_module_inputs(
        model, forward, norm_kind, lambda m, x: (x.numel() // x.shape[-1], int(x.shape[-1])))


def norm_call_sites(model, forward):
    """The norm call sites of `model` in one `forward()`: one entry per (class, kind,
    parameters, shape, dtype) with the module instances and calls behind it, each either
    pluggable (`params`) or not (`reason`, with the measured error). What the planner
    plans norm targets from (``autokernel_profiler::rank``)."""
    sites = {}
    for m, (x, shapes, dtype, calls) in capture_norm_inputs(model, forward).items():
        try:
            kind, params, reason = norm_params(m, x)
        except Exception as e:  # noqa: BLE001 - a module the matcher cannot run is not pluggable
            kind, params, reason = norm_kind(m), None, f"its forward raised {type(e).__name__}: {e}"
        for shape in shapes:
            key = (type(m).__name__, kind, json.dumps(params, sort_keys=True), shape, dtype, reason)
            site = sites.setdefault(key, {"module": type(m).__name__, "kind": kind, "params": params,
                                          "shape": list(shape), "dtype": dtype, "reason": reason,
                                          "instances": 0, "calls": 0})
            site["instances"] += 1
            site["calls"] += calls
    return list(sites.values())


# --- matmul call sites ---------------------------------------------------------------


def matmul_layout(m):
    """How matmul module `m` hands its weight over as B [K, N]: ``"b_transposed"`` for an
    nn.Linear (``x @ weight.T``, weight stored [out, in]), ``"contiguous"`` for GPT-2's
    ``Conv1D`` (``addmm(bias, x, weight)``, weight stored [in, out]); None for any other
    module."""
    import torch

    if isinstance(m, torch.nn.Linear):
        return "b_transposed"
    w = getattr(m, "weight", None)
    if type(m).__name__ == "Conv1D" and isinstance(w, torch.Tensor) and w.dim() == 2 \
            and getattr(m, "nf", None) == w.shape[1]:
        return "contiguous"
    return None


def matmul_plug_math(m, x, layout):
    """What a matmul plug computes for module `m` on `x` [..., K]: ``A @ B (+ bias)`` with
    A = x as [M, K] and B the module's weight in `layout` (torch's own matmul standing in
    for the kernel), reshaped to x's leading dims."""
    import torch

    a = x.reshape(-1, x.shape[-1])
    b = m.weight.t() if layout == "b_transposed" else m.weight
    out = a @ b
    if m.bias is not None:
        out = out + m.bias
    return out.reshape(*x.shape[:-1], b.shape[1])


def matmul_params(m, x):
    """``(layout, params, None)`` when matmul module `m`'s own forward on `x` matches
    ``A @ B (+ bias)`` in its layout within matmul's tolerance (params: ``has_bias``), else
    ``(layout, None, reason)`` with the measured error."""
    import torch

    layout = matmul_layout(m)
    out = _own_forward(m, x)
    if not isinstance(out, torch.Tensor):
        return layout, None, f"{type(m).__name__} returns {type(out).__name__}, not a tensor"
    with torch.no_grad():
        ref = matmul_plug_math(m, x, layout)
    excess, err = _excess(out, ref, "matmul")
    if excess > 0:
        return layout, None, f"{type(m).__name__}'s forward differs from A @ B (+ bias) by {err:.3g}"
    return layout, {"has_bias": m.bias is not None}, None


def matmul_call_sites(model, forward):
    """The matmul call sites of `model` in one `forward()` (nn.Linear and GPT-2's Conv1D):
    one entry per (class, layout, parameters, problem shape [M, N, K], dtype) with the
    module instances and calls behind it, each pluggable (`params`: ``has_bias``) or not
    (`reason`). The planner plans one matmul target per matched site
    (``autokernel_profiler::rank``)."""
    def problem_of(m, x):
        k = int(x.shape[-1])
        n = int(m.weight.shape[0 if matmul_layout(m) == "b_transposed" else 1])
        return (x.numel() // max(k, 1), n, k)

    seen = capture_module_inputs(model, forward, matmul_layout, problem_of)
    sites = {}
    for m, (x, shapes, dtype, calls) in seen.items():
        try:
            layout, params, reason = matmul_params(m, x)
        except Exception as e:  # noqa: BLE001 - a module the matcher cannot run is not pluggable
            layout, params, reason = matmul_layout(m), None, f"its forward raised {type(e).__name__}: {e}"
        for shape in shapes:
            key = (type(m).__name__, layout, json.dumps(params, sort_keys=True), shape, dtype, reason)
            site = sites.setdefault(key, {"module": type(m).__name__, "kind": "matmul", "params": params,
                                          "layout": layout, "shape": list(shape), "dtype": dtype,
                                          "reason": reason, "instances": 0, "calls": 0})
            site["instances"] += 1
            site["calls"] += calls
    return list(sites.values())


# --- attention call sites: causal, scale, K/V heads and mask read from each call ----------

# The call site name of a direct `torch.nn.functional.scaled_dot_product_attention` call.
SDPA_SITE = "F.scaled_dot_product_attention"


def _masked(m):
    """Where an additive mask drops a key: −inf, or a value below half the dtype's lowest
    (transformers fills with `finfo.min`)."""
    import torch

    return (m == float("-inf")) | (m <= torch.finfo(m.dtype).min / 2)


def attention_params(q, k, v, mask, dropout, causal, scale):
    """The flash_attention parameters of one attention call: ``(params, padding, None)``
    when the kernel computes it (``padding`` the additive ``[batch, seq]`` mask to hand it,
    or None), else ``(None, None, reason)``.

    q [batch, heads, q_len, head_dim] and k, v [batch, kv_heads, k_len, head_dim] as the
    attention function receives them; `mask` as it passes them on to SDPA (None, boolean:
    True keeps a key, or additive) and `causal` the causal flag SDPA gets. A mask constant
    along the query (BERT's padding, `[b,1,1,k]` or `[b,1,q,k]`) becomes the kernel's
    ``[batch, seq]`` additive mask (a boolean one as ``where(m, 0, -inf)``); a mask that is
    exactly the causal pattern becomes ``causal``; any other mask, dropout, differing query
    and key lengths or head dims are not supported, and the reason says which.
    """
    import torch

    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return None, None, f"Q/K/V of {q.dim()}/{k.dim()}/{v.dim()} dims, not [batch, heads, seq, head_dim]"
    b, h, s, d = q.shape
    if dropout:
        return None, None, f"dropout {dropout:g}"
    if k.shape[2] != s:
        return None, None, f"query length {s} and key length {k.shape[2]} differ (a KV cache or cross-attention)"
    if tuple(v.shape) != tuple(k.shape) or k.shape[0] != b or k.shape[3] != d:
        return None, None, f"Q {tuple(q.shape)}, K {tuple(k.shape)} and V {tuple(v.shape)} do not fit one problem"
    if h % k.shape[1]:
        return None, None, f"{k.shape[1]} K/V heads do not divide {h} query heads"
    default = 1.0 / math.sqrt(d)
    params = {"causal": bool(causal),
              "scale": None if scale is None or math.isclose(float(scale), default, rel_tol=1e-6) else float(scale),
              "kv_heads": int(k.shape[1]) if k.shape[1] < h else None,
              "has_mask": False}
    if mask is None:
        return params, None, None
    if mask.dtype == torch.bool:
        add = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(~mask, float("-inf"))
    else:
        add = mask
    m = add.reshape((1,) * (4 - add.dim()) + tuple(add.shape)) if add.dim() <= 4 else add
    if m.dim() != 4 or m.shape[1] != 1 or m.shape[0] not in (1, b) or m.shape[3] != s or m.shape[2] not in (1, s):
        return None, None, f"a {str(mask.dtype).replace('torch.', '')} mask of shape {list(mask.shape)}"
    if causal:
        return None, None, "a mask together with is_causal"
    masked = _masked(m)
    if m.shape[2] != 1 and not bool(((m == m[:, :, :1]) | (masked & masked[:, :, :1])).all()):
        tril = torch.ones(s, s, dtype=torch.bool, device=m.device).tril()
        if bool((masked == ~tril).all()) and bool((m.masked_fill(masked, 0) == 0).all()):
            params["causal"] = True  # the causal pattern spelled out as a mask
            return params, None, None
        if bool((masked | tril).all()):
            return None, None, f"a padding mask combined with causal masking ({list(mask.shape)})"
        return None, None, f"a mask of shape {list(mask.shape)} that varies along the query"
    row = m[:, 0, 0, :]
    padding = row.masked_fill(_masked(row), float("-inf")).to(q.dtype).expand(b, s).contiguous()
    params["has_mask"] = True
    return params, padding, None


def _hf_attention(model):
    """``(configs, interface, mask interface)`` when `model` is a transformers model whose
    attention goes through the attention-function registry (``config._attn_implementation``),
    else None. `configs` are the distinct configs of the model's modules, each with the
    implementation its attention modules look up."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "_attn_implementation"):
        return None
    try:
        from transformers.masking_utils import AttentionMaskInterface
        from transformers.modeling_utils import AttentionInterface
    except ImportError:
        return None
    configs = {}
    for m in model.modules():
        c = getattr(m, "config", None)
        if c is not None and hasattr(c, "_attn_implementation"):
            configs[id(c)] = c
    return list(configs.values()), AttentionInterface, AttentionMaskInterface


@contextlib.contextmanager
def hf_attention_function(model, make):
    """Routes `model`'s attention through ``make(original)`` for the duration: a function
    registered under a name of its own in transformers' attention registry (and the mask
    function of the model's implementation under the same name, so that the model builds
    the masks it built before), with the model's configs pointed at it, restored after.
    `original(module, query, key, value, attention_mask, **kwargs)` is what the model
    called before. Other models keep theirs: the name is this model's only. Yields False
    (and changes nothing) when the model does not go through the registry."""
    import sys

    hf = _hf_attention(model)
    if hf is None:
        yield False
        return
    configs, interface, mask_interface = hf
    before = [(c, c._attn_implementation) for c in configs]
    name = f"autokernel_{next(_HF_NAMES)}"

    def original(module, *args, **kwargs):
        impl = before[0][1] or "eager"
        if impl == "eager" or impl not in interface._global_mapping:
            own = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
            fn = interface._global_mapping.get(impl, own)
        else:
            fn = interface._global_mapping[impl]
        return fn(module, *args, **kwargs)

    impl = before[0][1] or "eager"
    mask_fn = mask_interface._global_mapping.get(impl, mask_interface._global_mapping.get("sdpa"))
    interface._global_mapping[name] = make(original)
    mask_interface._global_mapping[name] = mask_fn
    try:
        for c in configs:
            c._attn_implementation_internal = name
        yield True
    finally:
        for c, was in before:
            c._attn_implementation_internal = was
        interface._global_mapping.pop(name, None)
        mask_interface._global_mapping.pop(name, None)


# The numbers of the names `hf_attention_function` registers: one per use, never reused.
_HF_NAMES = __import__("itertools").count()


def _hf_call(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """What transformers' SDPA attention (``sdpa_attention_forward``) hands SDPA for one call
    through the registry: ``(mask, dropout, causal, scale, reason)``; `reason` names what the
    kernel cannot take (a position bias)."""
    if kwargs.get("position_bias") is not None:
        return None, dropout, False, scaling, "a position bias (T5-style relative attention)"
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = bool(query.shape[2] > 1 and attention_mask is None and causal)
    return attention_mask, dropout, causal, scaling, None


class _AttentionCall:
    """One captured attention call: the site it belongs to (`site`, a key), the module that
    made it (`owner`, None for a direct SDPA call) and, for the first call of each site,
    what a plug check needs: `params`, the problem `q`, `k`, `v`, the additive `padding`
    mask (or None) and `out`, the model's own attention output as [batch, heads, seq,
    head_dim] (None for the later calls of a site, to keep one forward's activations only
    once per site)."""

    def __init__(self, site, owner, params=None, q=None, k=None, v=None, padding=None, out=None):
        self.site, self.owner, self.params = site, owner, params
        self.q, self.k, self.v, self.padding, self.out = q, k, v, padding, out


def capture_attention_calls(model, forward):
    """Runs `forward()` once recording every attention call of `model`: through
    transformers' attention registry (the model's own function wrapped, see
    `hf_attention_function`), and direct ``F.scaled_dot_product_attention`` calls outside
    it. Returns a list of ``(site key, site fields, call)`` with `call` an `_AttentionCall`
    whose first of each site keeps its inputs."""
    import torch
    import torch.nn.functional as F

    calls = []
    seen = set()
    inside = [0]

    def record(site_name, owner, q, k, v, mask, dropout, causal, scale, reason, out):
        padding = None
        if reason is None:
            params, padding, reason = attention_params(q, k, v, mask, dropout, causal, scale)
        else:
            params = None
        dtype = str(q.dtype).replace("torch.", "")
        shape = [int(x) for x in q.shape]
        key = (site_name, json.dumps(params, sort_keys=True), tuple(shape), dtype, reason)
        call = _AttentionCall(key, owner)
        if key not in seen and params is not None:
            seen.add(key)
            call = _AttentionCall(key, owner, params, q.detach().clone(), k.detach().clone(), v.detach().clone(),
                                  padding, out.detach().clone())
        calls.append((key, {"module": site_name, "kind": "flash_attention", "params": params, "shape": shape,
                            "dtype": dtype, "reason": reason}, call))

    def make(original):
        def captured(module, query, key, value, attention_mask, *args, **kwargs):
            inside[0] += 1
            try:
                out = original(module, query, key, value, attention_mask, *args, **kwargs)
            finally:
                inside[0] -= 1
            named = dict(zip(("dropout", "scaling"), args), **kwargs)
            mask, dropout, causal, scale, reason = _hf_call(module, query, key, value, attention_mask, **named)
            # transformers' functions return (output [batch, seq, heads, head_dim], weights)
            record(type(module).__name__, module, query, key, value, mask, dropout, causal, scale, reason,
                   out[0].transpose(1, 2))
            return out
        return captured

    sdpa = F.scaled_dot_product_attention

    def direct(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
        out = sdpa(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                   **kw)
        if not inside[0]:
            reason = None
            if not kw.get("enable_gqa", False) and key.shape[1] != query.shape[1]:
                reason = "K/V with fewer heads than Q without enable_gqa"
            record(SDPA_SITE, None, query, key, value, attn_mask, dropout_p, is_causal, scale, reason, out)
        return out

    F.scaled_dot_product_attention = direct
    try:
        with hf_attention_function(model, make):
            with torch.no_grad():
                forward()
    finally:
        F.scaled_dot_product_attention = sdpa
    return calls


def attention_call_sites(model, forward):
    """The attention call sites of `model` in one `forward()`: one entry per (function or
    attention module class, parameters, shape [batch, heads, seq, head_dim], dtype) with
    its calls, each either pluggable (`params`) or not (`reason`). What the planner plans
    flash_attention targets from (``autokernel_profiler::rank``)."""
    sites, owners = {}, {}
    for key, fields, call in capture_attention_calls(model, forward):
        site = sites.setdefault(key, dict(fields, instances=0, calls=0))
        site["calls"] += 1
        # a direct SDPA call has no module: each call counts as its own instance
        mine = owners.setdefault(key, set())
        mine.add(id(call.owner) if call.owner is not None else len(mine))
        site["instances"] = len(mine)
    return list(sites.values())

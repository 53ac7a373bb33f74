"""Judging kernel files through `autokernel bench --json`, for the check scripts: the real
judge (every stage, the catalogue's shapes and tolerances), never a copy of it.

The binary is `--autokernel`, else `$AUTOKERNEL_BIN`, else the workspace's
`target/debug/autokernel` (build it with `cargo build`)."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def binary(given=None) -> str:
    """The autokernel binary to run; raises FileNotFoundError naming where it looked."""
    path = given or os.environ.get("AUTOKERNEL_BIN") or str(REPO / "target" / "debug" / "autokernel")
    if not Path(path).exists():
        raise FileNotFoundError(f"no autokernel binary at `{path}`: run `cargo build` or pass --autokernel")
    return path


def judge(paths, device="cpu", quick=False, exe=None, extra=()):
    """Judges `paths` on one warm worker (`extra`: more `bench` options, e.g. `--shape`);
    returns one `bench --json` object per file, with its `path`. Raises RuntimeError when
    the command fails other than by a verdict."""
    cmd = [binary(exe), "bench", "--json", "--device", device, *(["--quick"] if quick else []),
           *extra, *[str(p) for p in paths]]
    env = dict(os.environ)
    # the interpreter running this script has torch and triton: the worker adopts it
    env.setdefault("AUTOKERNEL_PYTHON", sys.executable)
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [l for l in out.stdout.splitlines() if l.strip()]
    if len(paths) == 1 and lines:
        results = [json.loads(out.stdout)]
    else:
        results = [json.loads(l) for l in lines]
    if out.returncode not in (0, 1) or len(results) != len(paths):
        raise RuntimeError(f"`{' '.join(cmd)}` exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
    return results

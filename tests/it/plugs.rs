//! `python/plugs.py`'s plugs, exercised in the project's Python: a kernel takes only
//! the calls at its target's shapes, and two targets of one kind each keep their own.

use std::path::Path;
use std::process::Command;

/// The Python the worker would use (as `util::autokernel` picks it).
fn python() -> std::path::PathBuf {
    std::env::var_os("AUTOKERNEL_PYTHON")
        .map(Into::into)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python"))
}

const SCRIPT: &str = r#"
import sys
sys.path[:0] = sys.argv[1:]
import torch, torch.nn as nn
import plugs

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 16, bias=False)   # problem 4x16x8
        self.b = nn.Linear(16, 8, bias=False)   # problem 4x8x16
    def forward(self, x):
        return self.b(self.a(x))

calls = []
def kernel(tag):
    def fn(A, B):
        calls.append((tag, tuple(A.shape), tuple(B.shape)))
        return A @ B
    return fn

net = Net()
x = torch.randn(4, 8)
ref = net(x)
first = plugs.Plug("01-matmul", "matmul", kernel("01"), [[4, 16, 8]])
second = plugs.Plug("02-matmul", "matmul", kernel("02"), [[4, 8, 16]])
# the modules the plug check (`check_matmul`) would find: every Linear, as given here
first.modules = second.modules = [net.a, net.b]
with first.installed(net), second.installed(net), torch.no_grad():
    out = net(x)
assert torch.allclose(out, ref, atol=1e-5), (out, ref)
assert calls == [("01", (4, 8), (8, 16)), ("02", (4, 16), (16, 8))], calls
assert (first.calls, second.calls) == (1, 1)
# a shape the plan never saw goes to PyTorch
calls.clear()
other = plugs.Plug("03-matmul", "matmul", kernel("03"), [[99, 16, 8]])
other.modules = [net.a, net.b]
with other.installed(net), torch.no_grad():
    net(x)
assert calls == [] and other.calls == 0, calls
# a call that needs gradients (the kernels have no backward) goes to PyTorch
with first.installed(net):
    net(x)
assert calls == [] and first.calls == 1, calls
# after the plugs are gone the model is itself again
assert "forward" not in net.a.__dict__ and "forward" not in net.b.__dict__
print("ok")
"#;

/// A host that slows down steadily (each timing 1 ms longer than the one before) must not
/// make one variant of the model look faster than another: the variants are timed in
/// turns, round after round, so each median sits one step from the other's. Timed one after
/// the other (all of eager, then all of the next), the medians would be 2 and 7.
const INTERLEAVED: &str = r#"
import contextlib, sys
sys.path[:0] = sys.argv[1:]
import model_modes
import verify_model as vm

order, current = [], [None]
def installing(selected):
    @contextlib.contextmanager
    def install():
        current[0] = tuple(selected)
        yield
        current[0] = None
    return install

# each timing: the variant installed while it ran, and a clock one step later than the last
model_modes.loop_ms = lambda run, on_gpu, count: (order.append(current[0]), float(len(order) - 1))[1]
model_modes.loop_count = lambda run, on_gpu: 1
medians = vm._time_variants_ms([[], ["k"]], "eager", None, lambda net: None, installing, on_gpu=True)
assert order == [(), ("k",)] * vm.TIMING_ROUNDS, order
assert vm.TIMING_ROUNDS == 5 and medians == [4.0, 5.0], medians
order.clear()
assert vm._time_variants_ms([[], ["k"]], "eager", None, lambda net: None, installing, on_gpu=False) == [0.0, 1.0]
print("ok")
"#;

/// A kernel goes into the model only if the model alone with it is at least 1% faster than
/// eager: 2% faster is kept; 0.5% faster and 2% slower are left out, each with its reason.
const GAIN: &str = r#"
import sys
sys.path[:0] = sys.argv[1:]
import plugs as plugs_module
import verify_model as vm

plugs = [plugs_module.Plug(t, "rmsnorm", None) for t in ("01-a", "02-b", "03-c")]
kept, excluded = vm._gainers(plugs, [9.8, 9.95, 10.2], 10.0)
assert [p.target_id for p in kept] == ["01-a"], kept
assert excluded == [
    {"target": "02-b", "reason": "makes the model less than 1% faster: 9.950 ms with it alone, 10.000 ms eager"},
    {"target": "03-c", "reason": "makes the model slower: 10.200 ms with it alone, 10.000 ms eager"},
], excluded
print("ok")
"#;

fn run_python(script: &str) {
    // plugs.py beside verify_model.py, and the call-site matcher it imports
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(python())
        .arg("-c")
        .arg(script)
        .arg(root.join("python"))
        .arg(root.join("autokernel-profiler/python"))
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
}

#[test]
fn each_plugged_kernel_takes_only_the_calls_at_its_targets_shapes() {
    run_python(SCRIPT);
}

#[test]
fn model_variants_are_timed_in_turns_so_host_drift_falls_on_all_alike() {
    run_python(INTERLEAVED);
}

#[test]
fn a_kernel_goes_into_the_model_only_when_it_makes_it_at_least_one_percent_faster() {
    run_python(GAIN);
}

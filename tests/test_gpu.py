"""GPU tests: every shipped variant and a sample of random validator-accepted specs, byte-exact
against the Torch reference on the same GPU; plus launch mechanics (streams, CUDA graphs, N == 0,
arch errors, the CLI). Marked `gpu`; skipped cleanly without a CUDA GPU.

Run on the device machine: `python3 -m pytest -m gpu -q` (scripts/device_run.sh does it).
KGEN_GPU_SAMPLES (default 16) and KGEN_GPU_SEED (default 0) size and seed the random sample.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kgen import arch, runtime

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
REASON = runtime.gpu_problem()

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=f"needs a CUDA GPU: {REASON}")]

SHIPPED_TOKENS = (1, 7, 64, 4097, 65536)
SAMPLE_TOKENS = (1, 7, 300, 4097)
N_SAMPLES = int(os.environ.get("KGEN_GPU_SAMPLES", "16"))
SEED = int(os.environ.get("KGEN_GPU_SEED", "0"))


def _shipped():
    from kgen.validate import validate_paths

    seen, out = set(), []
    for s in validate_paths(sorted((ROOT / "specs").glob("*.yaml"))).specs():
        if s.name not in seen:
            seen.add(s.name)
            out.append(s)
    return out


SHIPPED = _shipped()


def _assert_ok(c):
    assert c.error is None, c.error
    assert c.ok, f"{c.variant} N={c.tokens}: {c.reason}; examples {c.examples[:4]}"


@pytest.fixture(scope="module", autouse=True)
def _precompile():
    if REASON is not None:
        return
    from kgen.gpurun import precompile

    precompile(SHIPPED + _samples())  # warms the cache in parallel; a failure shows in its own test


@functools.lru_cache(maxsize=1)
def _samples():
    from kgen.sample import sample_specs

    return sample_specs(N_SAMPLES, SEED)


@pytest.mark.parametrize("n", SHIPPED_TOKENS)
@pytest.mark.parametrize("spec", SHIPPED, ids=lambda s: s.name)
def test_shipped_variant_byte_exact(spec, n):
    from kgen.gpurun import run_case

    _assert_ok(run_case(spec, n, seed=n))


@pytest.mark.parametrize("i", range(N_SAMPLES))
def test_random_valid_spec_byte_exact(i):
    """Whatever the validator accepts must write the right bytes."""
    from kgen.gpurun import run_case

    spec = _samples()[i]
    for n in SAMPLE_TOKENS:
        c = run_case(spec, n, seed=100 + n)
        assert c.ok, f"{spec.model_dump_json(exclude_defaults=True)} N={n}: {c.reason}; {c.examples[:4]}"


def _strategies():
    sys.path.insert(0, str(HERE))
    try:
        import strategies  # tests/strategies.py (hypothesis), if present

        return getattr(strategies, "valid_specs", None)
    except ImportError:
        return None
    finally:
        sys.path.remove(str(HERE))


def test_hypothesis_valid_specs_byte_exact():
    valid_specs = _strategies()
    if valid_specs is None:
        pytest.skip("tests/strategies.py valid_specs() not available")
    import torch
    from hypothesis import HealthCheck, given, note, settings

    from kgen.gpurun import run_case, spec_yaml
    from kgen.spec import Spec

    cap = tuple(torch.cuda.get_device_capability())
    here = arch.name(cap) + ("a" if cap[0] >= 9 else "")

    @settings(max_examples=int(os.environ.get("KGEN_GPU_HYPOTHESIS", "8")), deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(valid_specs(max_page_size=256))
    def check(data):
        spec = data if isinstance(data, Spec) else Spec.model_validate(data)  # the strategy yields dicts
        if arch.pick(cap, list(spec.targets)) is None:  # a spec for other GPUs: test it here too
            spec = spec.model_copy(update={"targets": [*spec.targets, here]})
        note(f"spec:\n{spec_yaml(spec)}")
        for n in (7, 300):
            c = run_case(spec, n, seed=n)
            assert c.ok, f"{spec.model_dump_json(exclude_defaults=True)} N={n}: {c.reason}"

    check()


# ---------------------------------------------------------------------------------------------
# launch mechanics


def _spec(name="dsv4_indexer_fp8"):
    return next(s for s in SHIPPED if s.name == name)


def _inputs(spec, n, seed=0):
    from kgen import inputs as I
    from kgen.gpurun import kernel_args

    inp = I.make_inputs(spec, n, seed=seed, device="cuda")
    *tensors, cache = kernel_args(spec, inp)
    return tuple(tensors), cache


def test_zero_tokens_is_a_noop():
    import torch

    from kgen import ops

    spec = _spec()
    (x, w, b, f, p, loc), cache = _inputs(spec, 5)
    before = cache.clone()
    ops.norm_rope_store(spec, x[:0], w, b, f, p[:0], loc[:0], cache)
    torch.cuda.synchronize()
    assert torch.equal(cache, before)


def test_side_stream_and_cuda_graph_write_the_same_bytes():
    import torch

    from kgen import ops, reference

    spec = _spec()
    (x, w, b, f, p, loc), cache = _inputs(spec, 4097, seed=2)
    ref = cache.clone()
    reference.norm_rope_store(spec, x, w, b, f, p, loc, ref)
    # on a side stream
    side_cache = cache.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        ops.norm_rope_store(spec, x, w, b, f, p, loc, side_cache)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    assert torch.equal(side_cache, ref)
    # captured in a CUDA graph, replayed
    g_cache = cache.clone()
    run = ops.prepare(spec, x, w, b, f, p, loc, g_cache)
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run()  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(s)
    g_cache.copy_(cache)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        run()
    assert torch.equal(g_cache, cache)  # capture does not execute
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(g_cache, ref)


def test_kernel_abi_and_resources():
    from kgen.abi import NORM_ROPE_STORE
    from kgen.runtime import load

    loaded = load(_spec())
    # one parameter: the Params struct, as large as kgen.abi packs it (None: a driver older than 12.4)
    sizes = loaded.kernel.param_sizes
    assert sizes is None or sizes == (NORM_ROPE_STORE.size,), sizes
    assert loaded.compiled.abi == NORM_ROPE_STORE.manifest()
    assert loaded.registers() and loaded.registers() <= 255
    assert load(_spec()) is loaded  # cached in-process


def test_wrong_arch_is_a_clear_error():
    import torch

    from kgen.arch import name as arch_name
    from kgen.diagnostics import KgenError
    from kgen.runtime import load

    cap = torch.cuda.get_device_capability()
    other = "sm_120a" if cap[0] != 12 else "sm_90a"
    spec = _spec().model_copy(update={"targets": [other], "name": "arch_probe"})
    with pytest.raises(KgenError) as e:
        load(spec)
    msg = e.value.problems[0].message
    assert torch.cuda.get_device_name() in msg and arch_name(cap) in msg and other in msg


def test_wrong_device_tensor_is_named():
    import torch

    from kgen import ops

    spec = _spec()
    (x, w, b, f, p, loc), cache = _inputs(spec, 3)
    with pytest.raises(ops.ArgumentError, match=r"^out_loc: expected a CUDA tensor"):
        ops.norm_rope_store(spec, x, w, b, f, p, loc.cpu(), cache)
    torch.cuda.synchronize()


def test_cli_test_json():
    r = subprocess.run([sys.executable, "-m", "kgen.cli", "test", "specs/indexer_bf16.yaml", "--tokens", "64",
                        "--tokens", "4097", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["ok"] and [e["tokens"] for e in out["results"]] == [64, 4097]
    for e in out["results"]:
        assert {"variant", "tokens", "equal_bytes", "total_bytes", "fraction", "max_code_distance", "ok"} <= set(e)
        assert e["fraction"] == 1.0


def test_bench_smoke(tmp_path):
    from kgen.bench import bench_command

    out = tmp_path / "bench.json"
    rc = bench_command([ROOT / "specs" / "indexer_bf16.yaml"], [64], out, use_compile=False)
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["copy"]["gbps"] > 100
    e = data["results"][0]
    assert e["kgen"]["peak_extra_bytes"] == 0
    assert e["kgen"]["graph"]["ms"] > 0 and e["kgen"]["cold"]["ms"] > 0
    assert "floor" in e and data["byte_model"] and data["command"]
    host = e["kgen"]["host_us_per_call"]  # the writer's host record, also in the read side's shape
    assert set(host["us_per_call"]) == set(host["us_per_call_gpu_busy"]) >= {"op", "dispatch_floor"}
    assert host["us_per_call"]["op"] == host["op"] and host["us_per_call_gpu_busy"] == host["gpu_busy"]["us_per_call"]


def _plan_spec(source: str, ratio: int):
    """The GPU test spec reading SGLang's plan rows of `source` (decode_plan | compress_plan) in place of
    positions."""
    base = _spec()
    name = {"decode_plan": "gpu_plan", "compress_plan": "gpu_cplan"}[source]
    return base.model_copy(update={"name": f"{name}_r{ratio}",
                                   "positions": base.positions.model_copy(update={"source": source,
                                                                                  "compress_ratio": ratio})})


@pytest.mark.parametrize("ratio", [4, 128])
def test_decode_plan_input_byte_exact(ratio):
    """SGLang's DecodePlan in place of positions: only the emitting tokens are written, at
    position seq_len - ratio, every cache byte equal to the reference's (reference.plan_positions)."""
    from kgen.gpurun import run_case

    for n in (1, 7, 4097, 65536):
        _assert_ok(run_case(_plan_spec("decode_plan", ratio), n, seed=n))


@pytest.mark.parametrize("ratio", [4, 128])
def test_compress_plan_input_byte_exact(ratio):
    """SGLang's prefill CompressPlan in place of positions (rows laid out like its planner: keys in
    arbitrary order, then padding): key i stored at out_loc[ragged_id], position seq_len - ratio,
    every cache byte equal to the reference's (reference.compress_plan_slots)."""
    from kgen.gpurun import run_case

    for n in (1, 7, 4097, 65536):
        _assert_ok(run_case(_plan_spec("compress_plan", ratio), n, seed=n))


def test_pdl_waits_for_the_previous_kernel_in_a_graph():
    """With PDL the kernel may start before the kernel before it ends; its griddepcontrol.wait must
    still see that kernel's writes. Each step a torch copy writes x, then kgen reads it: captured
    back to back in one CUDA graph (and run eagerly), every cache equals the reference of its own x."""
    import torch

    from kgen import ops, reference
    from kgen.runtime import load

    spec = _spec()
    cap = torch.cuda.get_device_capability()
    assert load(spec).pdl == (cap[0] >= 9)  # on by default where the arch has it
    n, steps = 4097, 6
    (x, w, b, f, p, loc), cache = _inputs(spec, n, seed=5)
    xs = [torch.randn_like(x) * (1 + i) for i in range(steps)]
    caches = [cache.clone() for _ in range(steps)]
    refs = []
    for i in range(steps):
        r = cache.clone()
        reference.norm_rope_store(spec, xs[i], w, b, f, p, loc, r)
        refs.append(r)
    runs = [ops.prepare(spec, x, w, b, f, p, loc, c) for c in caches]

    def body():
        for i in range(steps):
            x.copy_(xs[i])  # the producer kernel right before kgen's launch
            runs[i]()

    body()  # eager, on the current stream
    torch.cuda.synchronize()
    assert all(torch.equal(c, r) for c, r in zip(caches, refs))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    for c in caches:
        c.copy_(cache)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        body()
    for c in caches:
        c.copy_(cache)
    torch.cuda.synchronize()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(c, r) for c, r in zip(caches, refs))

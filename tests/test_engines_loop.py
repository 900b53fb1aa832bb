"""The engine in the loop: SGLang 0.5.23 as released, patched by `kgen patch`, its own modules
imported and its patched code paths run with the arguments SGLang passes (CPU here; the same probe
on CUDA with kgen's kernels is the `gpu` test at the end).

The release tree comes from `make releases` (tests/releases.py: missing -> fail; KGEN_SKIP_RELEASES=1
outside make -> skip). The probe runs in a fresh interpreter with tests/engine_harness.py, which
replaces only what cannot be imported here; every stand-in and why:

- third-party packages not installed (engine_harness.THIRD_PARTY): triton, tvm_ffi (SGLang's JIT
  FFI), sgl_kernel, flashinfer, torch_memory_saver, pynvml (compiled or GPU-only); msgspec, orjson,
  pybase64, zmq, psutil, requests, starlette, tqdm (the server and launcher); dill (pickles logit
  processors at import); transformers, huggingface_hub, sentencepiece, torchvision, torchcodec
  (model configs, downloads, multimodal); IPython. Only those an imported SGLang file names and
  the machine lacks are replaced; the test asserts the set is within that list.
- SGLang modules at the edge of the import chain (engine_harness.BOUNDARIES): forward_batch_info
  (the scheduler's batch), layers.linear (weight loading), configs.model_config (HF configs),
  models.deepseek_v2 (the model): the probe builds the objects the code under test reads instead.
- inside the probe: `compress_forward`, SGLang's JIT compression kernel (compiled on first call, CUDA
  only), returns the compressed rows the test chose, and the engine's JIT store
  `compress_norm_rope_store` records its call (flag off); the server's config bag `get_exec` that
  kgen_indexer reads is a namespace with the two flags (publishing a real one needs a parsed
  ServerArgs); C4Indexer's projection `wq_b` and `weights_proj` are the test's tensors (weights
  loading is not under test).

What runs as SGLang wrote it (patched): DeepSeekV4IndexerPool.__init__ / get_bytes_per_token /
_create_buffer, DeepSeekV4TokenToKVPool._make_indexer_pool (C4 and force_fp4 low-ratio),
get_dsv4_indexer_bytes_per_token as the budget calls it, PagedIndexerMetadata.__post_init__,
CompressorBackendMixin._forward_compress_all_in_one with CompressorDecodePlan /
CompressorPrefillPlan rows, C4IndexerBackendMixin._forward_prepare_normal (the query) and
_can_use_nonpaged_indexer, pd_kv_layout; then the scorer as forward_c4_indexer calls `fn`.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import engine_harness  # noqa: E402
import releases  # noqa: E402

from strategies import subprocess_pythonpath  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PLAN = ROOT / "specs" / "sglang" / "indexer_bf16_plan.yaml"
RELEASE = "sglang-0.5.23"
PY = sys.executable

PROBE = textwrap.dedent('''
    import json, sys, types
    tests, root, device, mode = sys.argv[1:5]
    sys.path.insert(0, tests)
    import engine_harness
    harness = engine_harness.install(root)
    import torch
    from kgen import reference as R
    from kgen.ops import resolve_spec
    from sglang import kgen_indexer
    from sglang.srt.mem_cache import deepseek_v4_memory_pool as P
    from sglang.srt.layers.attention.dsv4 import compressor_v2 as C, indexer as I, metadata as M
    from sglang.kernels.ops.attention.dsv4.compress import CompressorDecodePlan, CompressorPrefillPlan

    flags = types.SimpleNamespace(enable_kgen_indexer=mode == "on", enable_deepseek_v4_fp4_indexer=False)
    config = lambda: types.SimpleNamespace(kernel=flags)  # noqa: E731
    for module in list(sys.modules.values()):  # every SGLang module that bound the config bag's reader
        if getattr(module, "__name__", "").startswith("sglang") and "get_exec" in vars(module):
            module.get_exec = config
    out = {"stubbed": sorted(harness.stubbed)}
    spec = resolve_spec(kgen_indexer.SPEC)
    ns = types.SimpleNamespace

    # the pools: the C4 pool through the factory, the low-ratio pool (force_fp4), a direct one
    tok = object.__new__(P.DeepSeekV4TokenToKVPool)
    c4 = tok._make_indexer_pool(64 * 10, 64, torch.bfloat16, 128, 2, device, False, global_page_size=256)
    low = tok._make_indexer_pool(64 * 10, 64, torch.bfloat16, 128, 2, device, False, force_fp4=True)
    direct = P.DeepSeekV4IndexerPool(640, 64, torch.bfloat16, 128, 1, device, False, use_fp4_indexer=False)
    out["pools"] = {name: [p.get_bytes_per_token(), list(p.index_k_with_scale_buffer[0].shape),
                           bool(getattr(p, "use_kgen_indexer", False))] for name, p in
                    (("c4", c4), ("low", low), ("direct", direct))}
    tok.c4_indexer_kv_pool = c4
    out["in_use"] = kgen_indexer.in_use(tok)
    # the budget's call and the low-ratio budget's, as DSV4PoolConfigurator.__init__ makes them
    out["budget"] = P.get_dsv4_indexer_bytes_per_token(128, False, use_kgen_indexer=kgen_indexer.enabled())
    out["low_budget"] = P.get_dsv4_indexer_bytes_per_token(128, use_fp4_indexer=True)
    meta = M.PagedIndexerMetadata(page_size=256, compressed_page_size=64, page_table=torch.zeros(1, 1),
                                  compressed_seq_lens=torch.ones(1), use_topk_v2=False) \\
        if mode == "on" else None
    out["deep_gemm_metadata"] = None if meta is None else repr(meta.deep_gemm_metadata)

    # the store: SGLang's plans, its cache, its norm
    g = torch.Generator().manual_seed(5)
    n = 6
    kv = torch.randn(n, 128, generator=g)
    norm = ns(weight=torch.rand(128, generator=g) + 0.5, variance_epsilon=1e-6)
    freqs = torch.polar(torch.ones(4096, 32), torch.rand(4096, 32, generator=g) * 6.28)  # complex freqs_cis
    cache = c4.get_index_k_with_scale_buffer(0)
    seq = torch.tensor([4, 8, 12, 64, 68, 640], dtype=torch.int32)
    plan_d = R.make_decode_plan(seq, torch.arange(n, dtype=torch.int32), torch.zeros(n, dtype=torch.int32),
                                torch.zeros(n, dtype=torch.int32)).to(device)
    out_loc = torch.tensor([0, 70, 131, 200, 321, 600], dtype=torch.int64, device=device)
    calls = []
    C.compress_forward = lambda **kw: kv.to(device)
    C.compress_norm_rope_store = lambda *a, **kw: calls.append("engine-store")
    backend = object.__new__(C.CompressorBackendMixin)
    backend.token_to_kv_pool = tok
    backend.forward_metadata = ns()

    def store(plan):
        backend._get_paged_compress_metadata = lambda ratio: plan
        backend._forward_compress_all_in_one(
            kv_score_buffer=torch.zeros(8, 4, 512, device=device), kv_score_input=torch.zeros(1, device=device),
            ape=torch.zeros(4, 128, device=device), head_dim=128, norm=ns(weight=norm.weight.to(device),
            variance_epsilon=1e-6), freqs_cis_cache=freqs.to(device), kv_cache=cache, is_indexer=True,
            rotate=True, compress_ratio=4, page_size=64, out_loc=out_loc)

    store(CompressorDecodePlan(4, plan_d))
    out["decode_cache"] = cache.cpu().tolist() if mode == "on" else None
    plan_c = R.make_compress_plan(seq, torch.arange(n, dtype=torch.int32), torch.zeros(n, dtype=torch.int32),
                                  torch.zeros(n, dtype=torch.int32), torch.zeros(n, dtype=torch.int32)).to(device)
    cache.zero_()
    store(CompressorPrefillPlan(4, plan_c, torch.zeros(n, 8, dtype=torch.uint8, device=device)))
    out["prefill_cache"] = cache.cpu().tolist() if mode == "on" else None
    out["engine_store_calls"] = calls
    store(CompressorDecodePlan(4, plan_d))  # the decode keys stay for the scorer

    # the query, as _forward_prepare_normal makes it
    T, H = 3, 64
    q_raw = torch.randn(T, H * 128, generator=g)
    w_raw = torch.randn(T, H, generator=g)
    c4i = object.__new__(I.C4Indexer)
    object.__setattr__(c4i, "_modules", {})
    for k, v in dict(wq_b=lambda x: (q_raw.to(device), None), weights_proj=lambda x: (w_raw.to(device), None),
                     n_local_heads=H, head_dim=128, weight_scale=0.125, freqs_cis=freqs.to(device),
                     use_fp4_indexer=False, layer_id=0).items():
        object.__setattr__(c4i, k, v)
    reader = object.__new__(I.C4IndexerBackendMixin)
    reader.token_to_kv_pool = tok
    positions = torch.tensor([5, 66, 600], device=device)
    if mode == "on":
        q, weights = reader._forward_prepare_normal(x=torch.zeros(T, 1, device=device),
                                                    q_lora=torch.zeros(T, 1, device=device), c4_indexer=c4i,
                                                    positions=positions, forward_batch=None, skip_compressor=True)
        out["q"] = [str(q.dtype), list(q.shape), list(weights.shape), str(weights.dtype)]
        out["nonpaged"] = reader._can_use_nonpaged_indexer(c4_indexer=c4i, forward_batch=None, indexer_metadata=None)
        # forward_c4_indexer's scorer call: q.unsqueeze(1), the [pages, 64, 1, W] view, weights.squeeze(2),
        # lengths unsqueezed to [B, 1] for DeepGEMM, the page table, the (absent) schedule
        view = cache.view(cache.shape[0], 64, 1, kgen_indexer.host.BYTES_PER_TOKEN)
        lens = torch.tensor([8, 70, 160], dtype=torch.int32, device=device).unsqueeze(-1)
        table = torch.tensor([[0, 1, 2], [1, 2, 3], [0, 4, 9]], dtype=torch.int32, device=device)
        logits = kgen_indexer.logits(q.unsqueeze(1), view, weights.squeeze(2), lens, table, None, 192, False)
        out["logits"] = logits.cpu().tolist()
        out["q_values"] = q.float().cpu().tolist()
        out["weights"] = weights.squeeze(2).cpu().tolist()
        out["pd"] = P.DeepSeekV4TokenToKVPool.pd_kv_layout.__code__.co_names.count("kgen_indexer")
    print(json.dumps(out))
''')


def _env(**extra: str) -> dict[str, str]:
    """A bare environment: this checkout first, then the caller's PYTHONPATH (where the GPU machine carries
    pydantic and the other wheels kgen needs), nothing else of the caller's."""
    return {"PATH": "/usr/bin:/bin", "PYTHONPATH": subprocess_pythonpath(), **extra}


@pytest.fixture(scope="module")
def patched(tmp_path_factory):
    """A copy of the release tree patched with the plan-reading bf16 variant."""
    root = tmp_path_factory.mktemp("loop") / RELEASE
    shutil.copytree(releases.tree(RELEASE), root)
    r = subprocess.run([PY, "-m", "kgen", "patch", "--engine", "sglang", "--root", str(root), str(PLAN), "--apply",
                        "-o", str(root.parent / "patch.diff")], cwd=ROOT, capture_output=True, text=True,
                       check=False, timeout=300, env=_env())
    assert r.returncode == 0, r.stderr
    return root


def probe(root: Path, mode: str, device: str = "cpu") -> dict:
    r = subprocess.run([PY, "-c", PROBE, str(ROOT / "tests"), str(root / "python"), device, mode],
                       capture_output=True, text=True, check=False, timeout=300,
                       env=_env(HOME="/tmp"))
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def runs(patched):
    return {mode: probe(patched, mode) for mode in ("off", "on")}


def test_stand_ins_are_the_listed_ones(runs):
    for out in runs.values():
        assert set(out["stubbed"]) <= set(engine_harness.THIRD_PARTY) | set(engine_harness.BOUNDARIES)


def test_pools_flag_on_and_off(runs):
    """Flag off: the C4 pool is SGLang's fp8 pool. Flag on: the C4 pool (built by the factory) is
    kgen's 256 B/token, 16384 B pages; the low-ratio force_fp4 pool stays 68 B/token; a pool built
    directly (no flag argument) reads no server state and is the engine's."""
    off, on = runs["off"]["pools"], runs["on"]["pools"]
    pages = off["c4"][1][0]
    assert off["c4"] == [132, [pages, 8448], False] and off["low"][0] == 68 and off["direct"][0] == 132
    assert on["c4"] == [256, [pages, 16384], True]
    assert on["low"] == off["low"] and on["low"][1][1] == 64 * 68 and on["direct"] == off["direct"]
    assert runs["on"]["in_use"] is True and runs["off"]["in_use"] is False
    assert runs["off"]["budget"] == 132 and runs["on"]["budget"] == 256
    assert runs["on"]["low_budget"] == runs["off"]["low_budget"] == 68
    assert runs["on"]["deep_gemm_metadata"] == "None"  # no DeepGEMM schedule under the flag


def _expected_cache(spec_path: Path, plan_kind: str, pages: int):
    """What kgen's Torch reference writes for the probe's inputs (same seeds, same tensors)."""
    import torch

    from kgen import ops
    from kgen import reference as R

    g = torch.Generator().manual_seed(5)
    n = 6
    kv = torch.randn(n, 128, generator=g)
    weight = torch.rand(128, generator=g) + 0.5
    freqs = torch.polar(torch.ones(4096, 32), torch.rand(4096, 32, generator=g) * 6.28)
    real = torch.view_as_real(freqs).flatten(-2)
    seq = torch.tensor([4, 8, 12, 64, 68, 640], dtype=torch.int32)
    zeros = torch.zeros(n, dtype=torch.int32)
    if plan_kind == "decode":
        plan = R.make_decode_plan(seq, torch.arange(n, dtype=torch.int32), zeros, zeros)
    else:
        plan = R.make_compress_plan(seq, torch.arange(n, dtype=torch.int32), zeros, zeros, zeros)
    out_loc = torch.tensor([0, 70, 131, 200, 321, 600], dtype=torch.int64)
    cache = torch.zeros(pages, 16384, dtype=torch.uint8)
    ops.norm_rope_store(str(spec_path), kv, weight, None, real, plan, out_loc, cache)
    return cache, (g, real)


def test_store_with_sglang_plans(runs, patched):
    """The patched store, given SGLang's CompressorDecodePlan / CompressorPrefillPlan, writes what
    kgen's reference writes for those rows (decode: the variant; prefill: its CompressPlan twin);
    flag off, the engine's own JIT store is called instead (three times: decode, prefill, decode)."""
    import torch

    pkg = patched / "python" / "sglang" / "kgen_indexer"
    on, off = runs["on"], runs["off"]
    pages = len(on["decode_cache"])
    want_d, _ = _expected_cache(pkg / "spec.yaml", "decode", pages)
    want_p, _ = _expected_cache(pkg / "spec_prefill.yaml", "prefill", pages)
    got_d, got_p = torch.tensor(on["decode_cache"], dtype=torch.uint8), torch.tensor(on["prefill_cache"],
                                                                                    dtype=torch.uint8)
    assert torch.equal(got_d, want_d) and int(got_d.count_nonzero()) > 0
    assert torch.equal(got_p, want_p) and int(got_p.count_nonzero()) > 0
    assert on["engine_store_calls"] == [] and off["engine_store_calls"] == ["engine-store"] * 3


def test_query_and_scorer_equal_the_torch_reference(runs, patched):
    """Under the flag the query is bf16 (no fp8 quantization), weights fp32 [T, H] scaled by the
    indexer's weight_scale; the non-paged fp8 path is off; the scorer, called as forward_c4_indexer
    calls `fn`, returns the logits kgen's Torch reference computes from the stored keys."""
    import torch

    from kgen.score import indexer_logits_torch

    on = runs["on"]
    assert on["q"] == ["torch.bfloat16", [3, 64, 128], [3, 64, 1], "torch.float32"]
    assert on["nonpaged"] is False
    q = torch.tensor(on["q_values"], dtype=torch.float32).to(torch.bfloat16).unsqueeze(1)
    weights = torch.tensor(on["weights"], dtype=torch.float32)
    cache = torch.tensor(on["decode_cache"], dtype=torch.uint8)
    table = torch.tensor([[0, 1, 2], [1, 2, 3], [0, 4, 9]], dtype=torch.int32)
    lens = torch.tensor([8, 70, 160], dtype=torch.int32)
    spec = patched / "python" / "sglang" / "kgen_indexer" / "spec.yaml"
    want = indexer_logits_torch(str(spec), q, weights, cache, table, lens, 192, accum=torch.float64)
    got = torch.tensor(on["logits"], dtype=torch.float32)
    finite = torch.isfinite(want)
    assert torch.equal(finite, torch.isfinite(got)) and int(finite.sum()) == 8 + 70 + 160
    assert torch.allclose(got[finite], want[finite], rtol=1e-5, atol=1e-4)
    assert on["pd"] >= 1  # pd_kv_layout names kgen's layout when the C4 pool holds it


def test_flag_off_ast_unchanged_and_no_new_global_read(patched):
    """Every edited engine function, with kgen's branches taken out, is the release's own AST, and
    the only new reads of server state are kgen_indexer.enabled() calls in the C4 factory and the
    budget (start-up); the hot paths ask the pool (in_use), not the config."""
    original = releases.tree(RELEASE)
    for p in sorted((patched / "python").rglob("*.py")):
        rel = p.relative_to(patched)
        if "kgen_indexer" in rel.parts or not (original / rel).is_file():
            continue
        old_text, new_text = (original / rel).read_text(), p.read_text()
        if old_text == new_text:
            continue
        new, old = ast.parse(new_text), ast.parse(old_text)
        assert ast.dump(_strip(new)) == ast.dump(old), rel
        enabled = [n for n in ast.walk(new) if isinstance(n, ast.Call) and ast.unparse(n.func) ==
                   "kgen_indexer.enabled"]
        assert all(_enclosing(new, n) in ("_make_indexer_pool", "__init__") for n in enabled), rel


def _enclosing(tree: ast.AST, node: ast.AST) -> str:
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and any(n is node for n in ast.walk(fn)):
            inner = [f for f in ast.walk(fn) if isinstance(f, ast.FunctionDef) and f is not fn
                     and any(n is node for n in ast.walk(f))]
            if not inner:
                return fn.name
    return ""


def _strip(tree: ast.AST) -> ast.AST:
    """The module without kgen's additions: its import, its `if` branches (an `if kgen...` whose
    orelse holds the engine's code becomes that code), its parameters and keywords, its ternaries."""

    def mentions(node) -> bool:
        return "kgen" in ast.unparse(node)

    class Strip(ast.NodeTransformer):
        def visit_If(self, node):
            self.generic_visit(node)
            if mentions(node.test):
                return node.orelse or None
            return node

        def visit_IfExp(self, node):
            self.generic_visit(node)
            return node.orelse if mentions(node.test) else node

        def visit_ImportFrom(self, node):
            return None if any(a.name == "kgen_indexer" for a in node.names) else node

        def visit_Assign(self, node):
            self.generic_visit(node)
            return None if any(mentions(t) for t in node.targets) else node

        def visit_AnnAssign(self, node):
            return None if ast.unparse(node.target) == "enable_kgen_indexer" else node

        def visit_Call(self, node):
            self.generic_visit(node)
            node.keywords = [k for k in node.keywords if k.arg != "use_kgen_indexer"]
            return node

        def visit_arguments(self, node):
            keep = [i for i, a in enumerate(node.args) if a.arg != "use_kgen_indexer"]
            cut = len(node.args) - len(node.defaults)
            node.defaults = [d for i, d in enumerate(node.defaults) if cut + i in keep]
            node.args = [node.args[i] for i in keep]
            return node

        def visit_Constant(self, node):
            return node

    stripped = Strip().visit(tree)
    for n in ast.walk(stripped):  # the field-order tuple: kgen's appended name
        if isinstance(n, ast.Tuple):
            n.elts = [e for e in n.elts if not (isinstance(e, ast.Constant) and e.value == "enable_kgen_indexer")]
    return ast.fix_missing_locations(stripped)


@pytest.mark.gpu
def test_engine_loop_on_cuda_with_kgens_kernels(patched):
    """The same probe on the GPU: the store and the scorer run kgen's CUDA kernels through
    torch.ops.kgen; the pools and routing as on the CPU; logits equal the Torch reference."""
    from kgen import runtime

    reason = runtime.gpu_problem()
    if reason is not None:
        pytest.skip(f"needs a CUDA GPU: {reason}")
    import torch

    from kgen.score import indexer_logits_torch

    on = probe(patched, "on", "cuda")
    assert on["pools"]["c4"][0] == 256 and on["pools"]["c4"][1][1] == 16384 and on["pools"]["low"][0] == 68
    pkg = patched / "python" / "sglang" / "kgen_indexer"
    want_d, _ = _expected_cache(pkg / "spec.yaml", "decode", len(on["decode_cache"]))
    assert torch.equal(torch.tensor(on["decode_cache"], dtype=torch.uint8), want_d)
    q = torch.tensor(on["q_values"], dtype=torch.float32).to(torch.bfloat16).unsqueeze(1)
    weights = torch.tensor(on["weights"], dtype=torch.float32)
    cache = torch.tensor(on["decode_cache"], dtype=torch.uint8)
    table = torch.tensor([[0, 1, 2], [1, 2, 3], [0, 4, 9]], dtype=torch.int32)
    lens = torch.tensor([8, 70, 160], dtype=torch.int32)
    want = indexer_logits_torch(str(pkg / "spec.yaml"), q, weights, cache, table, lens, 192, accum=torch.float64)
    got = torch.tensor(on["logits"], dtype=torch.float32)
    finite = torch.isfinite(want)
    assert torch.equal(finite, torch.isfinite(got))
    assert torch.allclose(got[finite], want[finite], rtol=1e-3, atol=1e-2)

"""The engine in the loop for vLLM: vLLM 0.33.0 as released, patched by `kgen patch --engine vllm`
(specs/vllm_indexer_bf16.yaml), its own modules imported and its patched code paths run with the
arguments vLLM passes (CPU here; the same probe on CUDA with kgen's kernels is the `gpu` test).

The release tree comes from `make releases` (tests/releases.py). The probe runs in a fresh
interpreter with tests/engine_harness.py (package `vllm`), which replaces only what cannot be
imported here; every stand-in and why:

- third-party packages not installed (engine_harness.VLLM_THIRD_PARTY): triton, flashinfer,
  torchcodec (GPU-only or compiled); regex, cbor2, msgspec, pybase64 (compiled codecs); zmq,
  psutil, cpuinfo, uvloop, aiohttp, requests, urllib3, cloudpickle (the server, its IPC and its
  workers: distributed setup); openai, openai_harmony, prometheus_client (the API server);
  cachetools, einops, safetensors, transformers, huggingface_hub, tqdm (model loading). Only
  those an imported vLLM file names and the machine lacks are replaced; the test asserts the set
  is within that list. vLLM's own compiled extension (vllm._C) is optional at import in vLLM.
- inside the probe, each replaced by the test's own object:
  `current_platform.is_cuda` answers True once the CPU refusal has been checked (the platform
  detection sees this machine); `get_current_vllm_config` and `get_forward_context` (the engine's
  config context and per-step forward context, set by its model runner) return what the step
  needs; `current_workspace_manager` (the runner's preallocated workspace) allocates;
  `vllm.models.deepseek_v4.amd.rocm` is a module holding only `compress_pool` (the real module
  reads the GPU's architecture at import; compress_pool is a Triton kernel: it writes the pooled
  rows the test chose, on the GPU too) ; vLLM's compiled top-k (`get_indexer_topk`,
  `ops.top_k_per_row_prefill`) records the logits it is handed.

What runs as vLLM wrote it (patched): dsa_indexer_uses_fp4, DeepseekV4Attention._get_indexer_cls,
the indexer's _get_cache_cls / _get_compressor_cls / _get_attn_cls / _q_rope_quant hooks,
DeepseekV4IndexerCache.__init__ / get_kv_cache_spec and MLAAttentionSpec's page math,
DeepseekCompressor._compress_norm_rope_store (kgen's override) with vLLM's CompressorMetadata,
SparseAttnIndexer.forward_cuda through torch.ops.vllm.sparse_attn_indexer with vLLM's
DeepseekV32IndexerMetadata (two decode rows, a prefill chunk of two requests).
"""

from __future__ import annotations

import ast
import json
import os
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
SPEC = ROOT / "specs" / "vllm_indexer_bf16.yaml"
RELEASE = "vllm-0.33.0"
PY = sys.executable
PREFIX = "model.layers.0.attn.indexer.k_cache"
PAGES = 12
# the probe's Python path: this tree first, then what the caller's path adds (the GPU machine's
# carried wheels), nothing of the machine's other environment
PYTHONPATH = subprocess_pythonpath()

PROBE = textwrap.dedent('''
    import json, sys, types
    tests, root, device, mode = sys.argv[1:5]
    sys.path.insert(0, tests)
    import engine_harness
    harness = engine_harness.install(root, "vllm", *engine_harness.STAND_INS["vllm"])
    import torch
    from vllm import kgen_indexer
    from vllm.config.attention import AttentionConfig
    from vllm.platforms import current_platform
    from vllm.v1.attention.backends.mla import indexer as B
    from vllm.model_executor.layers import sparse_attn_indexer as S
    from vllm.models.deepseek_v4 import attention as A
    from vllm.models.deepseek_v4.compressor import CompressorMetadata

    ns = types.SimpleNamespace
    out = {"stubbed": sorted(harness.stubbed), "platform": str(current_platform.device_type)}

    def config(dtype, model="deepseek_v4"):
        return ns(attention_config=AttentionConfig(indexer_kv_dtype=dtype),
                  model_config=ns(hf_config=ns(model_type=model)),
                  parallel_config=ns(decode_context_parallel_size=1, prefill_context_parallel_size=1),
                  cache_config=ns(cache_dtype="fp8_ds_mla", block_size=256))

    def refusal(cfg):
        try:
            kgen_indexer.enabled(cfg)
        except ValueError as e:
            return str(e)
        return None

    cfg = config("kgen" if mode == "on" else "auto")
    out["refused_here"] = refusal(cfg) if device == "cpu" else None  # this machine's platform, unpatched
    current_platform.is_cuda = lambda: True
    out["refused_v32"] = refusal(config("kgen", "deepseek_v32"))
    out["gate"] = B.dsa_indexer_uses_fp4(cfg)
    indexer_cls = A.DeepseekV4Attention._get_indexer_cls(None, cfg)  # abstract class; the hook reads no self
    indexer = object.__new__(indexer_cls)
    out["indexer"] = indexer_cls.__name__
    ops = {"sparse_attn_indexer": S.sparse_attn_indexer}
    if mode == "on":
        ops.update(kgen_indexer_store=kgen_indexer._store, kgen_indexer_query=kgen_indexer._query)
    out["ops"] = sorted(n for n in ops if hasattr(torch.ops.vllm, n))
    lib = torch.library.Library("vllm", "IMPL")  # noqa: TOR901
    for name, fn in ops.items():
        if device == "cuda" and not torch._C._dispatch_has_kernel_for_dispatch_key(f"vllm::{name}", "CUDA"):
            # the harness's platform detection registered the op for another device: register it
            # for CUDA as vLLM's CudaPlatform does (same function)
            lib.impl(name, fn, "CUDA")

    # the cache, as DeepseekV4Indexer.__init__ builds it, and its spec (the memory accounting's page)
    A.get_current_vllm_config = lambda: ns(compilation_config=ns(static_forward_context={}))
    cache_layer = indexer._get_cache_cls()(head_dim=132, dtype=torch.uint8, prefix=PREFIX,
                                           cache_config=cfg.cache_config, compress_ratio=4)
    spec = cache_layer.get_kv_cache_spec(cfg)
    out["cache"] = [type(cache_layer).__name__, spec.head_size, spec.page_size_bytes, spec.num_states]
    out["layer_variant"] = indexer._get_attn_cls().kgen_variant
    if mode != "on":
        print(json.dumps(out))
        sys.exit(0)

    # vLLM's cache tensor: pages of page_size_bytes, viewed [pages, 64, head_size]
    page = spec.page_size_bytes
    g = torch.Generator().manual_seed(7)
    raw = (torch.randn(PAGES * page // 2, generator=g) * 0.5).to(torch.bfloat16).view(torch.uint8)
    raw = raw.to(device)
    kv_cache = raw.as_strided((PAGES, 64, spec.head_size), (page, spec.head_size, 1))
    out["cache_before"] = raw.cpu().tolist()

    # the store: kgen's compressor override, with the pooled rows compress_pool writes
    tokens = [(0, p) for p in range(8)] + [(1, p) for p in range(60, 64)] + [(2, 131), (3, 130)]
    table = torch.tensor([[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]], dtype=torch.int32)
    positions = torch.tensor([p for _, p in tokens], dtype=torch.int64)
    # the compressed slot of each token's group (non-boundary tokens too: the store must skip them)
    slots = torch.tensor([int(table[r, (p // 4) // 64]) * 64 + (p // 4) % 64 for r, p in tokens])
    pooled = torch.randn(len(tokens), 128, generator=g).to(torch.bfloat16)
    boundary = (positions + 1) % 4 == 0
    pool_calls = []

    def compress_pool(state_cache, token_to_req, pos, kv_slot_mapping, block_table, block_size, pooled_k,
                      state_width, compress_ratio, overlap):
        pool_calls.append([str(pooled_k.dtype), list(pooled_k.shape), state_width, compress_ratio, overlap,
                           block_size, int(kv_slot_mapping.numel())])
        pooled_k.fill_(float("nan"))  # rows compress_pool leaves alone are garbage to the store
        pooled_k[boundary.to(pooled_k.device)] = pooled.to(pooled_k.device)[boundary]

    sys.modules["vllm.models.deepseek_v4.amd.rocm"] = types.SimpleNamespace(compress_pool=compress_pool)
    comp = object.__new__(indexer._get_compressor_cls())
    weight = (torch.rand(128, generator=g) + 0.5).to(torch.bfloat16)
    max_pos = 4096
    angles = torch.rand(max_pos, 32, generator=g) * 6.28
    cos_sin = torch.cat((angles.cos(), angles.sin()), dim=-1)  # vLLM's cos_sin_cache: cosines, then sines
    for k, v in dict(k_cache_prefix=PREFIX, head_dim=128, compress_ratio=4, overlap=True,
                     rms_norm_eps=1e-6, norm=ns(weight=weight.to(device)),
                     _static_forward_context={PREFIX: ns(kv_cache=kv_cache)}).items():
        object.__setattr__(comp, k, v)
    state = CompressorMetadata(block_table=table.to(device), slot_mapping=slots.to(device), block_size=4,
                               token_to_req_indices=torch.tensor([r for r, _ in tokens], dtype=torch.int32,
                                                                 device=device))
    comp._compress_norm_rope_store(state, torch.zeros(8, 4, 1024, device=device), 512, positions.to(device),
                                   ns(cos_sin_cache=cos_sin.to(device)),
                                   {PREFIX: ns(slot_mapping=slots.to(device))}, {})
    out["pool_calls"] = pool_calls
    out["cache_after"] = raw.cpu().tolist()
    out["store_inputs"] = dict(tokens=tokens, slots=slots.tolist(), pooled=pooled.float().tolist(),
                               weight=weight.float().tolist(), cos_sin=cos_sin.tolist())
    try:
        kgen_indexer.store(pooled.to(device), positions.to(device), slots.to(device), weight.to(device), 1e-5,
                           cos_sin.to(device), kv_cache, 4)
        out["eps_refused"] = None
    except ValueError as e:
        out["eps_refused"] = str(e)

    # the query, as DeepseekV4Indexer.forward asks its _q_rope_quant hook
    T, H = 5, 64
    q_raw = torch.randn(T, H, 128, generator=g).to(torch.bfloat16)
    w_raw = torch.randn(T, H, generator=g).to(torch.bfloat16)
    qpos = torch.tensor([131, 70, 11, 47, 250])
    object.__setattr__(indexer, "softmax_scale", 128 ** -0.5)
    object.__setattr__(indexer, "n_head", H)
    q, weights = indexer._q_rope_quant(qpos.to(device), q_raw.to(device), ns(cos_sin_cache=cos_sin.to(device)),
                                       w_raw.to(device))
    out["q"] = [str(q.dtype), list(q.shape), str(weights.dtype), list(weights.shape)]
    out["q_values"] = q.float().cpu().tolist()
    out["weights"] = weights.cpu().tolist()
    out["q_inputs"] = dict(q=q_raw.float().tolist(), w=w_raw.float().tolist(), pos=qpos.tolist())
    # under torch.compile (vLLM compiles the model's forward) the query is one op, no graph break
    compiled = torch.compile(lambda p, x, c, w: kgen_indexer.query(p, x, c, w, 128 ** -0.5, H ** -0.5),
                             backend="eager", fullgraph=True)
    q2, w2 = compiled(qpos.to(device), q_raw.to(device), cos_sin.to(device), w_raw.to(device))
    out["compiled_query"] = bool(torch.equal(q2, q) and torch.equal(w2, weights))

    # the scorer: SparseAttnIndexer.forward_cuda -> torch.ops.vllm.sparse_attn_indexer, vLLM's metadata
    i32 = dict(dtype=torch.int32, device=device)
    dec_table, dec_lens = torch.tensor([[2, 5, 0], [7, 1, 9]], **i32), torch.tensor([[33], [150]], **i32)
    decode = B.DeepSeekV32IndexerDecodeMetadata(
        block_table=dec_table, seq_lens=dec_lens, decode_lens=torch.tensor([1, 1], **i32), requires_padding=False,
        schedule_metadata=torch.empty(0, **i32))
    lens_a, lens_b = 70, 20
    cu = torch.tensor([0, lens_a, lens_a + lens_b], **i32)
    ks, ke = torch.tensor([0, 0, lens_a], **i32), torch.tensor([40, lens_a, lens_a + lens_b], **i32)
    chunk = B.DeepseekV32IndexerPrefillChunkMetadata(
        block_table=torch.tensor([[4, 8, 3], [11, 0, 6]], **i32), cu_seqlen_ks=ks, cu_seqlen_ke=ke, cu_seq_lens=cu,
        token_to_seq=torch.cat((torch.zeros(lens_a, **i32), torch.ones(lens_b, **i32))),
        total_seq_lens=lens_a + lens_b, max_seqlen_k=lens_a, token_start=2, token_end=5, num_reqs=2,
        local_cu_seq_lens=cu, local_total_seq_lens=lens_a + lens_b, max_local_total_seq_lens=lens_a + lens_b)
    meta = B.DeepseekV32IndexerMetadata(
        seq_lens=torch.tensor([33, 150, 70, 20], **i32), max_seq_len=150, slot_mapping=torch.zeros(T, **i32),
        num_decodes=2, num_decode_tokens=2, num_prefills=2, num_prefill_tokens=3, decode=decode,
        prefill=B.DeepseekV32IndexerPrefillMetadata(chunks=[chunk]))
    S.get_forward_context = lambda: ns(attn_metadata={PREFIX: meta}, cudagraph_runtime_mode=None)
    S.current_workspace_manager = lambda: ns(get_simultaneous=lambda *specs: [
        torch.empty(shape, dtype=dtype, device=device) for shape, dtype in specs])
    scored, gathers = {}, []
    S.get_indexer_topk = lambda backend: (lambda logits, lens, next_n, idx, k, max_len:
                                          scored.update(decode=[logits.cpu().tolist(), lens.cpu().tolist()]))
    S.ops = ns(top_k_per_row_prefill=lambda logits, starts, ends, *a: scored.update(
                   prefill=[logits.cpu().tolist(), starts.cpu().tolist(), ends.cpu().tolist()]),
               cp_gather_indexer_k_quant_cache=lambda *a: gathers.append("fp8 gather"))
    layer = object.__new__(indexer._get_attn_cls())
    for k, v in dict(k_cache=ns(prefix=PREFIX, kv_cache=kv_cache), quant_block_size=128, scale_fmt="ue8m0",
                     topk_tokens=16, head_dim=128, max_model_len=192, max_total_seq_len=1024,
                     topk_indices_buffer=torch.zeros(T, 16, **i32), skip_k_cache_insert=True, use_pcp=False,
                     pcp_shard_decode_requests=False, dense_mha_metadata_layer_name="", use_fp4_cache=False,
                     dcp_rank=0, dcp_world_size=1, _parallel_config=ns(cp_kv_cache_interleave_size=1),
                     candidate_blocks=None, candidate_block_size=0, candidate_write=False,
                     topk_backend="auto").items():
        object.__setattr__(layer, k, v)
    layer.forward_cuda(torch.zeros(T, 16, device=device), q, None, weights)
    out["scored"] = scored
    out["gathers"] = gathers
    out["tables"] = dict(decode=dec_table.tolist(), decode_lens=dec_lens.tolist(), prefill=chunk.block_table.tolist(),
                         ks=ks.tolist(), ke=ke.tolist())
    print(json.dumps(out))
''').replace("PREFIX", repr(PREFIX)).replace("PAGES", str(PAGES))


@pytest.fixture(scope="module")
def patched(tmp_path_factory):
    """A copy of the release tree patched with specs/vllm_indexer_bf16.yaml."""
    root = tmp_path_factory.mktemp("vllm-loop") / RELEASE
    shutil.copytree(releases.tree(RELEASE), root)
    r = subprocess.run([PY, "-m", "kgen", "patch", "--engine", "vllm", "--root", str(root), str(SPEC), "--apply",
                        "-o", str(root.parent / "patch.diff")], cwd=ROOT, capture_output=True, text=True,
                       check=False, timeout=300, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": PYTHONPATH})
    assert r.returncode == 0, r.stderr
    return root


def probe(root: Path, mode: str, device: str = "cpu") -> dict:
    # the CUDA toolchain's places, where the caller has them (the kernels compile in the probe)
    keep = ("LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "KGEN_CACHE_DIR")
    cuda = {k: os.environ[k] for k in keep if k in os.environ}
    r = subprocess.run([PY, "-c", PROBE, str(ROOT / "tests"), str(root), device, mode],
                       capture_output=True, text=True, check=False, timeout=300,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": PYTHONPATH, "HOME": "/tmp", **cuda})
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def runs(patched):
    return {mode: probe(patched, mode) for mode in ("off", "on")}


def _spec():
    from kgen.ops import resolve_spec

    return resolve_spec(str(SPEC))


def _freqs(cos_sin):
    """vLLM's cos_sin_cache (cosines, then sines) as kgen's interleaved (cos, sin) pairs."""
    import torch

    cos, sin = torch.tensor(cos_sin).chunk(2, dim=-1)
    return torch.stack((cos, sin), dim=-1).flatten(-2)


def _pages(values: list[int], page: int):
    import torch

    return torch.tensor(values, dtype=torch.uint8).view(PAGES, page)


def test_stand_ins_are_the_listed_ones(runs):
    for out in runs.values():
        assert set(out["stubbed"]) <= set(engine_harness.VLLM_THIRD_PARTY)


def test_option_off_is_vllms_indexer_and_on_is_kgens(runs):
    """indexer_kv_dtype "auto": vLLM's gate says fp8, vLLM's indexer, cache and layer (132 B/token,
    8640-B pages). "kgen": the gate admits it, the hook returns kgen's indexer, whose cache spec
    gives vLLM's memory accounting kgen's 256 B/token and 16704-B pages (64 keys each), and whose
    scoring layer names the variant; refused on this CPU machine and for DeepSeek-V3.2."""
    off, on = runs["off"], runs["on"]
    assert off["gate"] is False and off["indexer"] == "DeepseekV4Indexer" and off["refused_here"] is None
    assert off["cache"] == ["DeepseekV4IndexerCache", 132, 8640, 64] and off["layer_variant"] is None
    assert on["gate"] is False and on["indexer"] == "KgenDeepseekV4Indexer"
    assert on["cache"] == ["KgenIndexerCache", 256, 16704, 64] and on["layer_variant"] == _spec().name
    assert "CUDA kernels" in on["refused_here"] and "deepseek_v32" in on["refused_v32"]
    # kgen's store and query are vLLM custom ops once kgen's indexer is built, and not before
    assert off["ops"] == ["sparse_attn_indexer"]
    assert on["ops"] == ["kgen_indexer_query", "kgen_indexer_store", "sparse_attn_indexer"]


def test_store_after_compress_pool_equals_the_torch_reference(runs):
    """kgen's compressor override calls compress_pool as vLLM's ROCm compressor does (a bf16
    [tokens, 128] buffer, vLLM's state width, ratio and overlap), then stores exactly what kgen's
    reference stores for the boundary tokens' pooled rows (RoPE at each group's first position, at
    each token's slot); the other tokens' rows (garbage) write nothing; a model eps other than the
    spec's is refused."""
    import torch

    from kgen import reference

    on = runs["on"]
    assert on["pool_calls"] == [["torch.bfloat16", [14, 128], 512, 4, True, 4, 14]]
    inp = on["store_inputs"]
    pos = torch.tensor([p for _, p in inp["tokens"]], dtype=torch.int64)
    ends = (pos + 1) % 4 == 0
    page = on["cache"][2]
    want = _pages(on["cache_before"], page).clone()
    rows = torch.tensor(inp["pooled"], dtype=torch.float32).to(torch.bfloat16)[ends]
    weight = torch.tensor(inp["weight"]).to(torch.bfloat16)
    reference.norm_rope_store(_spec(), rows, weight, None, _freqs(inp["cos_sin"]), (pos[ends] // 4) * 4,
                              torch.tensor(inp["slots"])[ends], want)
    got = _pages(on["cache_after"], page)
    assert torch.equal(got, want)
    changed = (got != _pages(on["cache_before"], page)).view(PAGES, -1)[:, : 64 * 256].reshape(PAGES * 64, 256)
    assert sorted(changed.any(dim=1).nonzero().flatten().tolist()) == sorted(
        torch.tensor(inp["slots"])[ends].tolist())
    assert "eps 1e-06" in on["eps_refused"]


def test_query_is_bf16_with_the_variants_rope(runs):
    import torch

    from kgen import reference

    on = runs["on"]
    assert on["q"] == ["torch.bfloat16", [5, 64, 128], "torch.float32", [5, 64]]
    assert on["compiled_query"] is True  # torch.compile(fullgraph=True) traces it as one op
    inp = on["q_inputs"]
    q = torch.tensor(inp["q"]).reshape(-1, 128)
    at = torch.tensor(inp["pos"]).repeat_interleave(64)
    want = reference.rope(_spec(), q, _freqs(on["store_inputs"]["cos_sin"]), at).to(torch.bfloat16).view(5, 64, 128)
    assert torch.equal(torch.tensor(on["q_values"]).to(torch.bfloat16), want)
    w = torch.tensor(inp["w"]) * (128 ** -0.5 * 64 ** -0.5)
    assert torch.allclose(torch.tensor(on["weights"]), w, rtol=1e-6, atol=0)


def _check_scores(on: dict, rtol: float, atol: float) -> None:
    """The decode logits equal kgen's Torch reference over the stored pages; the prefill logits
    equal the indexer formula over each request's keys read from its own pages (columns = the
    request's compressed positions, -inf past each row's visible length)."""
    import torch

    from kgen.score import indexer_logits_torch

    page = on["cache"][2]
    cache = _pages(on["cache_after"], page)
    q = torch.tensor(on["q_values"]).to(torch.bfloat16)
    w = torch.tensor(on["weights"])
    t = on["tables"]
    assert on["gathers"] == []  # vLLM's fp8 gather never reads kgen's pages
    logits, lens = on["scored"]["decode"]
    assert lens == t["decode_lens"]
    want = indexer_logits_torch(_spec(), q[:2].unsqueeze(1), w[:2], cache, torch.tensor(t["decode"], dtype=torch.int32),
                                torch.tensor(t["decode_lens"], dtype=torch.int32)[:, 0], 192, accum=torch.float64)
    got = torch.tensor(logits)
    finite = torch.isfinite(want)
    assert torch.equal(finite, torch.isfinite(got)) and int(finite.sum()) == 33 + 150
    assert torch.allclose(got[finite], want[finite], rtol=rtol, atol=atol)
    logits, starts, ends = on["scored"]["prefill"]
    ks, ke = t["ks"], t["ke"]
    assert starts == [0, 0, 0] and ends == [e - s for s, e in zip(ks, ke)]
    got = torch.tensor(logits)
    assert list(got.shape) == [3, max(ends)]
    keys = cache[:, : 64 * 256].contiguous().view(torch.bfloat16).view(PAGES, 64, 128).double()
    for i, (row, req) in enumerate(zip(range(2, 5), [0, 0, 1])):
        k = keys[torch.tensor(t["prefill"][req])].reshape(-1, 128)[: ends[i]]
        score = (torch.relu(q[row].double() @ k.T) * w[row].double()[:, None]).sum(0)
        assert torch.allclose(got[i, : ends[i]].double(), score, rtol=rtol, atol=atol), i
        assert bool(torch.isneginf(got[i, ends[i]:]).all())


def test_scorer_call_sites_equal_the_torch_reference(runs):
    _check_scores(runs["on"], rtol=1e-5, atol=1e-4)


def test_option_off_ast_unchanged_and_no_new_global_read(patched):
    """Every edited vLLM function, with kgen's branches taken out, is the release's own AST, and
    the only new reads of the option are kgen_indexer.enabled(...) in the dtype gate and the
    indexer hook (start-up); the op reads only its own argument."""
    original = releases.tree(RELEASE)
    edited = 0
    for p in sorted((patched / "vllm").rglob("*.py")):
        rel = p.relative_to(patched)
        if "kgen_indexer" in rel.parts or not (original / rel).is_file():
            continue
        old_text, new_text = (original / rel).read_text(), p.read_text()
        if old_text == new_text:
            continue
        edited += 1
        new, old = ast.parse(new_text), ast.parse(old_text)
        assert ast.dump(_strip(new)) == ast.dump(old), rel
        enabled = [n for n in ast.walk(new) if isinstance(n, ast.Call) and ast.unparse(n.func) ==
                   "kgen_indexer.enabled"]
        assert all(_enclosing(new, n) in ("dsa_indexer_uses_fp4", "_get_indexer_cls") for n in enabled), rel
    assert edited == 3


def _enclosing(tree: ast.AST, node: ast.AST) -> str:
    inner = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and any(n is node for n in ast.walk(f))]
    return min(inner, key=lambda f: len(list(ast.walk(f)))).name if inner else ""


def _strip(tree: ast.AST) -> ast.AST:
    """The module without kgen's additions: its import, its `if`/`elif` branches, the operand it
    adds to a condition, its parameter, keyword and class attribute."""

    def mentions(node) -> bool:
        return "kgen" in ast.unparse(node)

    class Strip(ast.NodeTransformer):
        def visit_If(self, node):
            self.generic_visit(node)
            if mentions(node.test):
                return node.orelse or None
            return node

        def visit_BoolOp(self, node):
            self.generic_visit(node)
            kept = [v for v in node.values if not mentions(v)]
            return kept[0] if len(kept) == 1 else node.__class__(op=node.op, values=kept)

        def visit_ImportFrom(self, node):
            return None if any(a.name == "kgen_indexer" for a in node.names) else node

        def visit_AnnAssign(self, node):
            return None if ast.unparse(node.target) == "kgen_variant" else node

        def visit_Call(self, node):
            self.generic_visit(node)
            node.keywords = [k for k in node.keywords if k.arg != "kgen_variant"]
            return node

        def visit_arguments(self, node):
            keep = [i for i, a in enumerate(node.args) if a.arg != "kgen_variant"]
            cut = len(node.args) - len(node.defaults)
            node.defaults = [d for i, d in enumerate(node.defaults) if cut + i in keep]
            node.args = [node.args[i] for i in keep]
            return node

    return ast.fix_missing_locations(Strip().visit(tree))


@pytest.mark.gpu
def test_engine_loop_on_cuda_with_kgens_kernels(patched):
    """The same probe on the GPU: the store and both scorers run kgen's CUDA kernels through
    torch.ops.kgen from vLLM's call sites; bytes equal the reference, logits within fp32 error."""
    from kgen import runtime

    reason = runtime.gpu_problem()
    if reason is not None:
        pytest.skip(f"needs a CUDA GPU: {reason}")
    on = probe(patched, "on", "cuda")
    assert on["cache"] == ["KgenIndexerCache", 256, 16704, 64]
    test_store_after_compress_pool_equals_the_torch_reference({"on": on})
    _check_scores(on, rtol=1e-3, atol=1e-2)

"""The real kernel source under AddressSanitizer + UBSan on the CPU (tests/emulate.py, tests/cpu_shim/run.cc):
every argument is its own exactly sized heap allocation (x [N, head_dim], weight/bias [head_dim] or
nullptr, freqs [max_pos, rope_dim] and positions [N] or nullptr, out_loc [N], cache [num_pages,
page_bytes]) and the whole grid of `kgen.layout.launch_shape` runs, partial last block included,
so any load or store outside the buffers fails the test; the bytes are compared with the Torch
reference too. This is what a GPU's "illegal memory access" looks like on the CPU, with the line."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, note, settings

import emulate
from kgen.spec import Spec
from strategies import SPECS, valid_specs

TOKENS = (1, 7, 37, 129)

needs_asan = pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")


def build(spec: Spec, work: Path) -> Path:
    return emulate.build(spec, work, sanitize=True)


def run(spec: Spec, exe: Path, work: Path, n: int, seed: int = 0) -> tuple[int, list]:
    return emulate.launch(spec, exe, work, n, seed=seed)


def check(spec: Spec, work: Path, tokens=TOKENS, seed: int = 0) -> None:
    pytest.importorskip("torch")
    exe = build(spec, work)
    for n in tokens:
        assert run(spec, exe, work, n, seed=seed + n) == (0, []), f"{spec.name} N={n}"


def _shipped() -> list[Spec]:
    from kgen.load import load_document

    seen: dict[str, Spec] = {}
    for p in sorted(SPECS.glob("*.yaml")):
        for v in load_document(p).variants:
            seen.setdefault(v.spec.name, v.spec)
    return [seen[k] for k in sorted(seen)]


# Specs the GPU hypothesis test (tests/test_gpu.py, derandomized) runs, and corners of the launch
# shape and lane mapping: head_dim 32 (V = 1: 2-B fp16 / 4-B fp32 lane loads, neox partners one
# lane apart, 1-byte fp8 lanes), head_dim 1024 (V = 32: 128-B lane loads), 32 x 8 tokens per block
# (N = 1: 255 of 256 token slots past the end), rope at either end, kept RoPE dims, strided scales.
EXPLICIT = {
    "gpu_hyp_j_go4i": {"kgen": 1, "name": "j_go4i", "input_dtype": "fp16", "head_dim": 32,
                       "norm": {"kind": "layernorm", "eps": 1e-05},
                       "rope": {"dim": 2, "style": "neox", "placement": "first"},
                       "store": {"dtype": "fp8_e4m3", "scale": "fp32_pow2", "block": 8, "amax_floor": 1e-06,
                                 "bf16_roundtrip": True, "scale_math": "reciprocal"},
                       "layout": {"page_size": 16, "scale_stride": 20, "page_align": 576},
                       "launch": {"warps_per_block": 1, "tokens_per_warp": 4}, "targets": ["sm_90a"]},
    "gpu_hyp_h2ql": {"kgen": 1, "name": "h2ql7h03iwfad", "input_dtype": "fp32", "head_dim": 128,
                     "norm": {"kind": "none"},
                     "rope": {"dim": 8, "style": "neox", "placement": "first"}, "hadamard": True,
                     "store": {"dtype": "fp16", "amax_floor": 0.5}, "layout": {"page_size": 32, "page_align": 4096},
                     "launch": {"warps_per_block": 8, "tokens_per_warp": 2}, "targets": ["sm_90a"]},
    "v1_fp32_rmsnorm_full_block": {"kgen": 1, "name": "a", "input_dtype": "fp32", "head_dim": 32,
                                   "rope": {"dim": 32, "style": "neox", "placement": "last"},
                                   "store": {"dtype": "fp8_e4m3", "scale": "ue8m0", "block": 32},
                                   "layout": {"page_size": 1}, "launch": {"warps_per_block": 32, "tokens_per_warp": 8},
                                   "targets": ["sm_90a"]},
    "v32_kept_rope_first": {"kgen": 1, "name": "big", "input_dtype": "fp32", "head_dim": 1024,
                            "norm": {"kind": "layernorm", "eps": 1e-05},
                            "rope": {"dim": 64, "style": "neox", "placement": "first"},
                            "store": {"dtype": "fp8_e4m3", "scale": "fp32", "block": 64, "rope_dtype": "bf16"},
                            "layout": {"page_size": 2, "scale_stride": 64, "page_align": 16},
                            "launch": {"warps_per_block": 3, "tokens_per_warp": 5}, "targets": ["sm_90a"]},
    # SGLang's DecodePlan in place of positions (C4: ratio 4; and a C128-style ratio), each plan a
    # 16-B vector load; a third of the tokens do not emit (mid-group, before the first key, padded)
    "plan_indexer_fp8": {"kgen": 1, "name": "plan", "input_dtype": "fp32", "head_dim": 128,
                         "rope": {"dim": 64, "style": "interleaved", "placement": "last"}, "hadamard": True,
                         "positions": {"source": "decode_plan", "compress_ratio": 4},
                         "store": {"dtype": "fp8_e4m3", "scale": "fp32", "block": 128}, "layout": {"page_size": 64},
                         "launch": {"warps_per_block": 4, "tokens_per_warp": 4}, "targets": ["sm_90a"]},
    "plan_latent_r128": {"kgen": 1, "name": "plan2", "input_dtype": "bf16", "head_dim": 512,
                         "rope": {"dim": 64, "style": "neox", "placement": "last"},
                         "positions": {"source": "decode_plan", "compress_ratio": 128},
                         "store": {"dtype": "fp8_e4m3", "scale": "ue8m0", "block": 64, "rope_dtype": "bf16"},
                         "layout": {"page_size": 2, "page_align": 576},
                         "launch": {"warps_per_block": 2, "tokens_per_warp": 3}, "targets": ["sm_90a"]},
    # the per-N launch shape (launch.large_min_tokens): N = 1, 7 take the small shape (1 token per warp), N = 37
    # and 129 the large one (4 per warp, a partial last warp and block); both against the reference
    "large_n_indexer_fp8": {"kgen": 1, "name": "large", "input_dtype": "fp32", "head_dim": 128,
                            "rope": {"dim": 64, "style": "interleaved", "placement": "last"}, "hadamard": True,
                            "store": {"dtype": "fp8_e4m3", "scale": "fp32", "block": 128}, "layout": {"page_size": 64},
                            "launch": {"warps_per_block": 4, "tokens_per_warp": 1, "large_min_tokens": 8,
                                       "large_tokens_per_warp": 4}, "targets": ["sm_90a"]},
    "large_n_latent_neox": {"kgen": 1, "name": "large2", "input_dtype": "bf16", "head_dim": 512,
                            "norm": {"kind": "layernorm", "eps": 1e-05},
                            "rope": {"dim": 64, "style": "neox", "placement": "first"},
                            "store": {"dtype": "fp8_e4m3", "scale": "ue8m0", "block": 64, "rope_dtype": "bf16"},
                            "layout": {"page_size": 2, "page_align": 576},
                            "launch": {"warps_per_block": 2, "tokens_per_warp": 3, "large_min_tokens": 37,
                                       "large_tokens_per_warp": 8}, "targets": ["sm_90a"]},
    # launch.stage_tokens: the large shape's 8 tokens per warp in groups of 3 (3 + 3 + 2, each group's loads
    # one group ahead), a partial last warp at N = 37 and 129; the small shape (2 per warp) is no stage
    "large_n_staged_dsv32": {"kgen": 1, "name": "staged", "input_dtype": "bf16", "head_dim": 128,
                             "norm": {"kind": "layernorm", "eps": 1e-06},
                             "rope": {"dim": 64, "style": "neox", "placement": "first"}, "hadamard": True,
                             "store": {"dtype": "fp8_e4m3", "scale": "fp32_pow2", "block": 128},
                             "layout": {"page_size": 64},
                             "launch": {"warps_per_block": 4, "tokens_per_warp": 2, "large_min_tokens": 8,
                                        "large_tokens_per_warp": 8, "stage_tokens": 3}, "targets": ["sm_90a"]},
    "large_n_staged_latent": {"kgen": 1, "name": "staged2", "input_dtype": "fp32", "head_dim": 512,
                              "rope": {"dim": 64, "style": "interleaved", "placement": "last"},
                              "store": {"dtype": "fp8_e4m3", "scale": "ue8m0", "block": 64, "bf16_roundtrip": True,
                                        "rope_dtype": "bf16"},
                              "layout": {"page_size": 64, "scale_stride": 8, "page_align": 576},
                              "launch": {"warps_per_block": 2, "tokens_per_warp": 4, "stage_tokens": 1},
                              "targets": ["sm_90a"]},
}


@needs_asan
@pytest.mark.parametrize("name", sorted(EXPLICIT))
def test_explicit_specs_under_asan(name, tmp_path):
    check(Spec.model_validate(EXPLICIT[name]), tmp_path,
          tokens=TOKENS if name.startswith(("gpu_", "plan_", "large_")) else (1, 37))


@needs_asan
@pytest.mark.parametrize("spec", _shipped(), ids=lambda s: s.name)
def test_shipped_specs_under_asan(spec, tmp_path):
    check(spec, tmp_path, tokens=(1, 37))


@needs_asan
@settings(max_examples=int(os.environ.get("KGEN_ASAN_EXAMPLES", "4")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=valid_specs(max_page_size=64))
def test_accepted_specs_under_asan(data, tmp_path_factory):
    data["name"] = "asan"
    spec = Spec.model_validate(data)
    note(f"spec: {spec.model_dump_json(exclude_defaults=True)}")
    check(spec, tmp_path_factory.mktemp("asan"), tokens=(1, 7, 37))


@needs_asan
def test_asan_catches_a_kernel_run_on_another_specs_tensors(tmp_path):
    """The harness itself: the kernel of one spec on the tensors of another spec with the same name
    (what kgen.runtime did before it keyed loaded modules by cubin) reads outside them, and ASan says so."""
    pytest.importorskip("torch")
    old = Spec.model_validate({"kgen": 1, "name": "a", "input_dtype": "fp32", "head_dim": 256,
                               "rope": {"dim": 64}, "store": {"dtype": "bf16"}, "layout": {"page_size": 4},
                               "targets": ["sm_90a"]})
    new = old.model_copy(update={"head_dim": 128, "norm": old.norm.model_copy(update={"kind": "none"})})
    exe = build(old, tmp_path / "old")
    with pytest.raises(AssertionError, match="AddressSanitizer|SEGV"):
        run(new, exe, tmp_path, 7)


FAST = {  # numerics fast: fp8 stores with scale fp32 or none (rule numerics)
    "rmsnorm_interleaved_hadamard_fp32": EXPLICIT["large_n_indexer_fp8"],
    "layernorm_neox_fp32_blocks": {**EXPLICIT["large_n_latent_neox"], "name": "fast2", "layout": {"page_size": 2},
                                   "store": {"dtype": "fp8_e4m3", "scale": "fp32", "block": 64,
                                             "bf16_roundtrip": True}},
    "none_hadamard_fp8_unscaled": {**EXPLICIT["gpu_hyp_h2ql"], "name": "fast3", "store": {"dtype": "fp8_e4m3"}},
}


@needs_asan
@pytest.mark.parametrize("name", sorted(FAST))
def test_fast_numerics_within_tolerance_under_asan(name, tmp_path):
    """numerics fast: the fused multiply-adds and the folded Hadamard scale keep every value within one
    code of the exact reference and fp32 scales within kgen.compare.FAST_SCALE_ULPS (interleaved and
    NeoX RoPE, rmsnorm, layernorm and none, fp32 block scales and unscaled fp8)."""
    check(Spec.model_validate({**FAST[name], "numerics": "fast"}), tmp_path)

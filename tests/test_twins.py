"""Every validator rule that protects the kernel has a static_assert twin in the rendered source.

For each rule with twin=True: a spec that breaks that rule (and, where the rules allow it, nothing
else) is rejected by `kgen validate` with the rule's id, AND, rendered with --no-validate and compiled
for sm_90a, fails in NVRTC with a log containing `[rule-id]` (the twin's static_assert message).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kgen.rules import RULES  # noqa: E402
from kgen.validate import validate_path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TWINS = sorted(r for r, rule in RULES.items() if rule.twin)

# the bf16 indexer (specs/indexer_bf16.yaml without its host section)
BASE = {"kgen": 1, "name": "twin", "input_dtype": "fp32", "head_dim": 128,
        "norm": {"kind": "rmsnorm", "eps": 1e-6}, "rope": {"dim": 64, "style": "interleaved", "placement": "last"},
        "hadamard": True, "store": {"dtype": "bf16", "scale": "none"}, "layout": {"page_size": 64},
        "targets": ["sm_90a"]}
FP8 = {"dtype": "fp8_e4m3", "scale": "fp32", "block": 128}
ROPE64 = {"dim": 64, "style": "interleaved", "placement": "last"}

# rule -> (fields to change, every rule the validator must report). Two rules cannot break alone:
# every head_dim the head-dim rule accepts is a power of two (so hadamard holds), and no page the
# page-size and page-align rules accept reaches 2^31 bytes.
MUTATIONS: dict[str, tuple[dict, set[str]]] = {
    "head-dim": ({"head_dim": 2048}, {"head-dim"}),
    "rope-dim": ({"rope": {**ROPE64, "dim": 256}}, {"rope-dim"}),
    "rope-lanes": ({"rope": {**ROPE64, "dim": 2}}, {"rope-lanes"}),
    "hadamard": ({"head_dim": 96, "rope": {"dim": 0}}, {"hadamard", "head-dim"}),
    "norm-eps": ({"norm": {"kind": "rmsnorm", "eps": 0.0}}, {"norm-eps"}),
    "store-scale": ({"store": {"dtype": "bf16", "scale": "fp32"}}, {"store-scale"}),
    "store-block": ({"store": {**FP8, "block": 96}}, {"store-block"}),
    "store-rope-dtype": ({"store": {"dtype": "bf16", "scale": "none", "rope_dtype": "bf16"}}, {"store-rope-dtype"}),
    "store-amax-floor": ({"store": {**FP8, "amax_floor": 0.0}}, {"store-amax-floor"}),
    "page-size": ({"layout": {"page_size": 48}}, {"page-size"}),
    "page-align": ({"layout": {"page_size": 64, "page_align": 0}}, {"page-align"}),
    "scale-stride": ({"store": FP8, "layout": {"page_size": 64, "scale_stride": 2}}, {"scale-stride"}),
    "layout-align": ({"store": {"dtype": "fp4_e2m1", "scale": "ue8m0", "block": 32},
                      "layout": {"page_size": 1, "scale_stride": 5}}, {"layout-align"}),
    "page-bytes-limit": ({"head_dim": 1024, "layout": {"page_size": 1 << 20}}, {"page-bytes-limit", "page-size"}),
    "launch": ({"launch": {"warps_per_block": 64}}, {"launch"}),
    "launch-large": ({"launch": {"large_min_tokens": 4096, "large_tokens_per_warp": 9}}, {"launch-large"}),
    "positions": ({"positions": {"source": "decode_plan", "compress_ratio": 0}}, {"positions"}),
}


def twin_spec(rule: str) -> dict:
    d = copy.deepcopy(BASE)
    d.update(copy.deepcopy(MUTATIONS[rule][0]))
    d["name"] = "twin_" + rule.replace("-", "_")
    return d


@pytest.fixture(scope="module")
def twin_files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("twins")
    out = {}
    for rule in MUTATIONS:
        p = d / f"{rule}.yaml"
        p.write_text(json.dumps(twin_spec(rule), indent=1) + "\n")  # JSON is YAML
        out[rule] = p
    return out


@pytest.fixture(scope="module")
def compiled(twin_files, tmp_path_factory) -> tuple[int, dict, str]:
    """All twins compiled in one `kgen compile --no-validate --arch sm_90a --json` (in parallel)."""
    cache = tmp_path_factory.getbasetemp() / "kgen-cache"
    env = {**os.environ, "KGEN_CACHE_DIR": str(cache)}
    r = subprocess.run([sys.executable, "-m", "kgen.cli", "compile", *map(str, twin_files.values()),
                        "--arch", "sm_90a", "--no-validate", "--json"], capture_output=True, text=True, env=env,
                       cwd=ROOT)
    return r.returncode, json.loads(r.stdout), r.stderr


def test_every_twin_rule_has_a_mutation():
    assert set(MUTATIONS) == set(TWINS), "add a mutation for each new twin=True rule"


@pytest.mark.parametrize("rule", TWINS)
def test_validator_rejects_with_the_rule(rule, twin_files):
    r = validate_path(twin_files[rule])
    assert not r.valid
    assert {p.rule for p in r.errors} == MUTATIONS[rule][1]


def test_cli_validate_rejects_every_twin(twin_files):
    r = subprocess.run([sys.executable, "-m", "kgen.cli", "validate", "--json", *map(str, twin_files.values())],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 1
    by_path = {x["path"]: {e["rule"] for e in x["errors"]} for x in json.loads(r.stdout)["results"]}
    for rule, path in twin_files.items():
        assert rule in by_path[str(path)]


@pytest.mark.parametrize("rule", TWINS)
def test_nvrtc_twin_fires_without_validation(rule, compiled):
    code, doc, err = compiled
    assert code == 1
    rows = {x["variant"]: x for x in doc["results"]}
    row = rows[twin_spec(rule)["name"]]
    assert row["ok"] is False and row["arch"] == "sm_90a"
    assert f"[{rule}]" in row["log"], f"no static_assert twin for [{rule}] fired:\n{row['log'][:3000]}"
    assert "static assertion failed" in row["log"]
    assert "Traceback" not in err


def test_twin_failure_is_reported_like_the_validator(compiled, twin_files):
    """The compile error names the rule and points at the spec file (single-rule twins)."""
    _, _, err = compiled
    for rule, (_, expected) in MUTATIONS.items():
        if expected == {rule}:
            assert f"{twin_files[rule]}:" in err and f"error[{rule}]" in err, rule

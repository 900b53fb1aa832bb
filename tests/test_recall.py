"""`kgen recall`: tests that pin the method (identical formats agree exactly, a zeroed channel loses
the needles planted on it, agreement grows with mantissa bits, CPU and GPU agree) and the command."""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kgen import recall as RC  # noqa: E402
from kgen import reference as R  # noqa: E402
from kgen.diagnostics import KgenError  # noqa: E402
from kgen.score import dense_logits  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"
FP8 = SPECS / "dsv4" / "indexer_fp8.yaml"


def small(**kw) -> RC.Settings:
    base = dict(contexts=[2048], topk=128, queries=6, heads=16, margin=0.1, seed=3, device="cpu")
    base.update(kw)
    return RC.Settings(**base)


def with_store(spec, name: str, **store):
    return spec.model_copy(update={"name": name, "host": None, "store": spec.store.model_copy(update=store)})


# ---------------------------------------------------------------------------------------------
# the method


def test_identical_formats_agree_exactly():
    spec = R.load_spec(FP8)
    [r] = RC.measure([spec], small(), reference=spec)
    assert r["agreement"] == 1.0 and r["agreement_min"] == 1.0 and r["agreement_std"] == 0.0
    assert r["needles"] == 6 and r["needle_recall"] == 1.0 == r["needle_recall_full_precision"]
    assert r["score_error_rms_sigma"] == 0.0 and r["score_error_max_sigma"] == 0.0


def test_against_full_precision_the_needles_sit_at_the_margin():
    spec = R.load_spec(FP8)
    [r] = RC.measure([spec], small(margin=0.25))
    assert r["needle_recall_full_precision"] == 1.0
    assert abs(r["needle_margin_actual"] - 0.25) < 1e-3
    assert 0.5 < r["agreement"] < 1.0 and 0 < r["score_error_rms_sigma"] < 0.1


def test_a_zeroed_channel_loses_the_needles_planted_on_it():
    g = torch.Generator().manual_seed(0)
    S, D, H, Q, k, c, other = 4096, 32, 8, 12, 64, 5, 9
    keys = torch.randn(S, D, generator=g)
    keys[:, c] *= 0.1  # the crowd barely uses channel c
    pos = torch.randperm(S, generator=g)[:Q]
    keys[pos] = 0.05 * torch.randn(Q, D, generator=g)
    keys[pos, c] = 3.0  # needles live on channel c (and not on `other`)
    q, w = RC.draw_queries(g, Q, H, D)
    w[:, 0] = w[:, 0].abs() + 0.1  # at least one head to aim
    qn, placed, sigma = RC.plant_needles(keys, q, w, pos, k, 1.0)
    assert placed.all()
    ref = dense_logits(qn, w, keys, accum=torch.float64)

    def recall_without(channel: int) -> float:
        zeroed = keys.clone()
        zeroed[:, channel] = 0
        var = dense_logits(qn, w, zeroed, accum=torch.float64)
        m = RC.compare(ref, var, ref, var, pos, placed, sigma, k)
        assert m["needle_recall_full_precision"] == 1.0
        return m["needle_recall"]

    assert recall_without(c) == 0.0
    assert recall_without(other) == 1.0


def test_agreement_grows_with_mantissa_bits():
    fp8 = R.load_spec(FP8)
    formats = [  # mantissa bits: 1, 3, 7, 10
        with_store(fp8, "m1_fp4", dtype="fp4_e2m1", scale="ue8m0", block=32),
        fp8,
        with_store(fp8, "m7_bf16", dtype="bf16", scale="none", block=None),
        with_store(fp8, "m10_fp16", dtype="fp16", scale="none", block=None),
    ]
    rows = RC.measure(formats, small(contexts=[4096], topk=256, queries=8))
    agreement = [r["agreement"] for r in rows]
    error = [r["score_error_rms_sigma"] for r in rows]
    assert agreement == sorted(agreement) and len(set(agreement)) == 4, agreement
    assert error == sorted(error, reverse=True) and len(set(error)) == 4, error


def test_hadamard_twin_and_store_twin():
    spec = R.load_spec(FP8)
    twin = RC.hadamard_twin(spec)
    assert twin.name == "dsv4_indexer_fp8_nohadamard" and not twin.hadamard and twin.store == spec.store
    store = RC.store_twin(spec)
    assert store.norm.kind == "none" and store.rope.dim == 0 and store.input_dtype == "fp32"
    assert store.hadamard and store.store == spec.store and store.layout == spec.layout


def test_shipped_variants_split_into_indexer_keys_and_skipped():
    sel = RC.select([SPECS / "dsv4.yaml", SPECS / "dsv32_indexer.yaml", SPECS / "indexer_bf16.yaml"])
    # indexer_bf16.yaml is also a member of dsv4.yaml: measured once
    assert [s.name for s, _ in sel.variants] == ["dsv4_indexer_fp8", "dsv4_indexer_fp4", "dsv4_indexer_bf16",
                                                 "dsv32_indexer_fp8"]
    skipped = {s["variant"]: s["reason"] for s in sel.skipped}
    assert set(skipped) == {"dsv4_latent_fp8_p64", "dsv4_latent_fp8_p2", "dsv4_latent_bf16", "dsv4_latent_fp8_uniform"}
    assert "RoPE dims kept as bf16" in skipped["dsv4_latent_fp8_p64"]
    assert "head_dim 512" in skipped["dsv4_latent_bf16"]


def test_two_different_variants_with_one_name_are_refused(tmp_path):
    text = (SPECS / "indexer_bf16.yaml").read_text().replace("dtype: bf16", "dtype: fp16")
    other = tmp_path / "fp16.yaml"
    other.write_text(text.replace("\nhost:\n  bytes_per_token: 256\n  page_bytes: 16384\n", "\n"))
    with pytest.raises(KgenError, match="two different variants are named 'dsv4_indexer_bf16'"):
        RC.select([SPECS / "indexer_bf16.yaml", other])


def test_parse_contexts():
    assert RC.parse_contexts("4096, 16K,1m") == [4096, 16384, 1048576]
    for bad in ("4096,", "x", "0", "1.5K"):
        with pytest.raises(KgenError) as e:
            RC.parse_contexts(bad)
        assert e.value.exit_code == 2 and "--contexts" in str(e.value)


@pytest.mark.gpu
def test_cpu_and_gpu_paths_give_the_same_numbers():
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    specs = [R.load_spec(SPECS / f) for f in ("dsv4/indexer_fp8.yaml", "dsv4/indexer_fp4.yaml", "indexer_bf16.yaml")]
    cpu = RC.measure(specs, small(contexts=[2048, 4096]))
    gpu = RC.measure(specs, small(contexts=[2048, 4096], device="cuda"))
    for a, b in zip(cpu, gpu):
        for key, v in a.items():
            if key == "seconds":
                continue
            if key == "needle_margin_actual":
                # a small difference of two fp32 scores over the score spread: the needle's aim is solved
                # in fp32 on each device, so cancellation leaves ~1e-5 relative; the metrics are exact
                assert math.isclose(v, b[key], rel_tol=1e-3), (key, v, b[key])
            elif isinstance(v, float) and key not in ("agreement", "agreement_min", "needle_recall"):
                # float64 sums in another order: the last bits of the error statistics may differ
                assert math.isclose(v, b[key], rel_tol=1e-6, abs_tol=1e-9), (key, v, b[key])
            elif isinstance(v, float) and key in ("agreement", "agreement_min"):
                # the same top-k overlaps; their float64 mean is summed in another order on the device
                assert math.isclose(v, b[key], rel_tol=1e-12), (key, v, b[key])
            elif key == "selection":  # per top-k: the same overlaps, their means summed in another order
                assert v.keys() == b[key].keys(), (key, v, b[key])
                for way, metrics in v.items():
                    assert metrics.keys() == b[key][way].keys(), (way, metrics, b[key][way])
                    for name, x in metrics.items():
                        assert math.isclose(x, b[key][way][name], rel_tol=1e-12), (way, name, x, b[key][way][name])
            else:
                assert v == b[key], (key, v, b[key])


# ---------------------------------------------------------------------------------------------
# --keys FILE


def write_safetensors(path: Path, tensors: dict) -> None:
    """A safetensors file written by hand from the format's definition (not by kgen's reader)."""
    header, blobs, at = {}, [], 0
    for name, t in tensors.items():
        data = t.contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [at, at + len(data)]}
        blobs.append(data)
        at += len(data)
    head = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def test_keys_file_safetensors_and_pt_give_the_same_report(tmp_path):
    g = torch.Generator().manual_seed(1)
    keys = torch.randn(3000, 128, generator=g)
    keys[:, 7] *= 20
    queries = torch.randn(5, 16, 128, generator=g)
    weights = torch.randn(5, 16, generator=g)
    st = tmp_path / "k.safetensors"
    write_safetensors(st, {"keys": keys, "queries": queries, "weights": weights})
    pt = tmp_path / "k.pt"
    torch.save({"keys": keys, "queries": queries, "weights": weights}, pt)
    spec = R.load_spec(FP8)
    a = RC.measure([spec], small(contexts=[1024, 3000]), user=RC.load_keys_file(st, 128))
    b = RC.measure([spec], small(contexts=[1024, 3000]), user=RC.load_keys_file(pt, 128))
    for x, y in zip(a, b):
        x.pop("seconds"), y.pop("seconds")
        assert x == y
    assert [r["context"] for r in a] == [1024, 3000] and all(r["queries"] == 5 for r in a)
    bare = tmp_path / "bare.pt"
    torch.save(keys, bare)
    assert RC.load_keys_file(bare, 128)["queries"] is None


@pytest.mark.parametrize("content,message", [
    ({"keys": torch.zeros(10, 64)}, "'keys' is [10, 64] but the variants have head_dim 128"),
    ({"k": torch.zeros(10, 128)}, "expected a tensor named 'keys'"),
    ({"keys": torch.zeros(10, 128, dtype=torch.int32)}, "'keys' must be a floating-point tensor of 2 dims"),
    ({"keys": torch.full((10, 128), float("nan"))}, "'keys' holds non-finite values"),
    ({"keys": torch.zeros(10, 128), "queries": torch.zeros(2, 4, 64)}, "'queries' is [2, 4, 64]"),
    ({"keys": torch.zeros(10, 128), "queries": torch.zeros(2, 4, 128), "weights": torch.zeros(2, 5)},
     "'weights' is [2, 5], expected [Q, H] = [2, 4]"),
    ({"keys": torch.zeros(10, 128), "weights": torch.zeros(2, 5)}, "'weights' given without 'queries'"),
])
def test_bad_keys_file_names_file_and_tensor(tmp_path, content, message):
    path = tmp_path / "bad.pt"
    torch.save(content, path)
    with pytest.raises(KgenError) as e:
        RC.load_keys_file(path, 128)
    assert message in str(e.value) and str(path) in str(e.value)


def test_unreadable_keys_file(tmp_path):
    path = tmp_path / "junk.safetensors"
    path.write_bytes(b"\xff" * 20)
    with pytest.raises(KgenError, match="cannot read it as safetensors"):
        RC.load_keys_file(path, 128)
    with pytest.raises(KgenError) as e:
        RC.load_keys_file(tmp_path / "missing.pt", 128)
    assert e.value.exit_code == 2


# ---------------------------------------------------------------------------------------------
# the command


def kgen(*args, cwd=ROOT):
    env = dict(os.environ, PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="")
    return subprocess.run([sys.executable, "-m", "kgen", "recall", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_command_json_file_plot_and_table(tmp_path):
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    p = kgen(SPECS / "dsv4.yaml", "--contexts", "1024", "--topk", "64", "--queries", "3", "--heads", "8",
             "--json", out, "--plot", png)
    assert p.returncode == 0, p.stderr
    data = json.loads(out.read_text())
    assert [r["variant"] for r in data["results"]] == ["dsv4_indexer_fp8", "dsv4_indexer_fp4", "dsv4_indexer_bf16"]
    for r in data["results"]:  # the contract's fields
        assert r["context"] == 1024 and r["topk"] == 64 and 0 <= r["agreement"] <= 1 and 0 <= r["needle_recall"] <= 1
    assert len(data["skipped"]) == 4 and data["inputs"]["keys"] == "synthetic"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "dsv4_indexer_bf16" in p.stdout and "skipped dsv4_latent_bf16" in p.stdout
    # SGLang's top-k runs on a GPU only: the report says why it is absent, the table shows the stages measured
    assert data["peers"] == [{"name": "sglang.topk_v2", "present": False, "absent": "the run is on the CPU"}]
    assert "SGLang" not in p.stdout  # no column for a stage no row has


def test_command_json_to_stdout():
    p = kgen(SPECS / "indexer_bf16.yaml", "--contexts", "512", "--topk", "32", "--queries", "2", "--heads", "4",
             "--json")
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert data["results"][0]["variant"] == "dsv4_indexer_bf16" and data["results"][0]["context"] == 512


@pytest.mark.parametrize("args,code,message", [
    (["missing.yaml"], 2, "missing.yaml"),
    ([SPECS / "indexer_bf16.yaml", "--contexts", "4k,x"], 2,
     "kgen recall: error[recall-usage]: --contexts: 'x' is not"),
    ([SPECS / "indexer_bf16.yaml", "--contexts", "512", "--topk", "512"], 2, "512 keys is not more than --topk 512"),
    ([SPECS / "dsv4" / "latent_bf16.yaml"], 1, "no indexer-key variant to measure (skipped: dsv4_latent_bf16)"),
    ([SPECS / "indexer_bf16.yaml", "--keys", "nowhere.pt"], 2, "nowhere.pt: no such file"),
    ([SPECS / "indexer_bf16.yaml", "--plot", "/nonexistent-dir/x.png"], 2, "its directory does not exist"),
    ([SPECS / "indexer_bf16.yaml", "--device", "tpu"], 2, "--device: auto, cpu or cuda"),
    ([SPECS / "indexer_bf16.yaml", "--queries", "0"], 2, "--topk, --queries and --heads must be at least 1"),
])
def test_command_errors_are_one_line(tmp_path, args, code, message):
    from typer.testing import CliRunner

    from kgen.cli import app

    out = tmp_path / "r.json"
    r = CliRunner().invoke(app, ["recall", *map(str, args), "--json", str(out)])
    assert r.exit_code == code, (r.exit_code, r.output)
    assert message in r.output and "Traceback" not in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    assert len(r.output.strip().splitlines()) == 1
    assert not out.exists()


def test_command_without_gpu_refuses_cuda():
    p = kgen(SPECS / "indexer_bf16.yaml", "--device", "cuda")
    assert p.returncode == 2 and "kgen recall: error[no-gpu]: no GPU:" in p.stderr and "Traceback" not in p.stderr


def test_an_interrupted_run_reports_what_it_measured(tmp_path, monkeypatch):
    real = RC.measure

    def stop_after_first(specs, settings, **kw):
        def progress(text):
            if kw["results"]:
                raise KeyboardInterrupt
        return real(specs, settings, **{**kw, "progress": progress})

    monkeypatch.setattr(RC, "measure", stop_after_first)
    out = tmp_path / "r.json"
    code = RC.recall_command([SPECS / "dsv4.yaml", out], contexts="1024", topk=64, queries=2, heads=4,
                             as_json=True, device="cpu")
    data = json.loads(out.read_text())
    assert code == 1 and data["interrupted"] is True
    assert [r["variant"] for r in data["results"]] == ["dsv4_indexer_fp8"]


# ---------------------------------------------------------------------------------------------
# input checks (hostile inputs, round 2): a located one-line error before any work, valid JSON always


def _invoke(*args):
    from typer.testing import CliRunner

    from kgen.cli import app

    return CliRunner().invoke(app, ["recall", *map(str, args)])


@pytest.fixture
def no_measure(monkeypatch):
    """The measurement must not start: the checks come first."""
    def refuse(*a, **k):
        raise AssertionError("measured before the inputs were checked")

    monkeypatch.setattr(RC, "measure", refuse)


def _one_error(r, code: int, *words: str) -> str:
    assert r.exit_code == code, (r.exit_code, r.output)
    assert "Traceback" not in r.output and (r.exception is None or isinstance(r.exception, SystemExit)), r.output
    [line] = [ln for ln in r.output.strip().splitlines() if "error[" in ln]
    for w in words:
        assert w in line, line
    return line


@pytest.mark.parametrize("make, words", [
    (lambda: {"keys": torch.full((2000, 128), 1e300, dtype=torch.float64)}, ["'keys'", "non-finite", "float32"]),
    (lambda: {"keys": torch.full((2000, 128), 1e35)}, ["'keys'", "up to 1e+35"]),
    (lambda: {"keys": torch.zeros(2000, 128).to(torch.float8_e4m3fn)}, ["'keys'", "float8_e4m3fn"]),
    (lambda: {"keys": torch.eye(2000, 128).to_sparse()}, ["'keys'", "sparse"]),
    (lambda: {"keys": torch.randn(2000, 128), "queries": torch.randn(4, 0, 128)}, ["'queries'", "at least 1"]),
    (lambda: {"keys": torch.randn(2000, 128), "queries": torch.randn(0, 4, 128)}, ["'queries'", "at least 1"]),
])
def test_keys_that_the_measurement_cannot_use_are_refused_first(tmp_path, no_measure, make, words):
    path = tmp_path / "k.pt"
    torch.save(make(), path)
    _one_error(_invoke(SPECS / "indexer_bf16.yaml", "--keys", path, "--contexts", "1024", "--topk", "64"), 1,
               str(path), *words)


def test_a_fifo_as_keys_is_named_a_fifo_at_once(tmp_path, no_measure):
    fifo = tmp_path / "k.safetensors"
    os.mkfifo(fifo)
    _one_error(_invoke(SPECS / "indexer_bf16.yaml", "--keys", fifo), 1, "FIFO")


@pytest.mark.parametrize("args", [["--queries", "1000000000000"], ["--contexts", "256M"],
                                  ["--heads", "100000000"]])
def test_runs_that_cannot_fit_in_memory_are_usage_errors(no_measure, args):
    _one_error(_invoke(SPECS / "indexer_bf16.yaml", "--device", "cpu", *args), 2, "GiB")


def test_a_plot_path_that_is_a_directory_fails_before_the_measurement(tmp_path, no_measure):
    (tmp_path / "p.png").mkdir()
    _one_error(_invoke(SPECS / "indexer_bf16.yaml", "--plot", tmp_path / "p.png"), 2, "--plot", "directory")
    os.mkfifo(tmp_path / "r.json")
    _one_error(_invoke(SPECS / "indexer_bf16.yaml", "--json", tmp_path / "r.json"), 2, "--json", "FIFO")


def test_json_on_stdout_carries_the_errors_too():
    p = kgen(SPECS / "indexer_bf16.yaml", "--queries", "0", "--json")
    assert p.returncode == 2
    doc = json.loads(p.stdout)
    assert doc["results"] == [] and doc["errors"][0]["rule"] == "recall-usage"


def test_degenerate_keys_give_strict_json(tmp_path):
    path, out = tmp_path / "k.pt", tmp_path / "r.json"
    torch.save({"keys": torch.zeros(1200, 128)}, path)  # every score 0: the score errors are undefined
    code = RC.recall_command([SPECS / "indexer_bf16.yaml", out], keys=path, contexts="1200", topk=64, queries=2,
                             heads=4, as_json=True, device="cpu")
    assert code == 0

    def strict(name):
        raise ValueError(f"{name} is not JSON")

    data = json.loads(out.read_text(), parse_constant=strict)
    assert data["results"][0]["score_error_rms_sigma"] is None


def test_a_big_keys_file_is_read_only_as_far_as_the_run_uses(tmp_path):
    """A 256 MiB keys file and a 4K-key run: the process stays far below the file's size."""
    keys = torch.randn(1 << 19, 128)
    st, pt = tmp_path / "k.safetensors", tmp_path / "k.pt"
    write_safetensors(st, {"keys": keys})
    torch.save({"keys": keys}, pt)
    del keys
    probe = ("import resource, sys\nfrom pathlib import Path\nfrom kgen import recall_keys\n"
             "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
             "k = recall_keys.load_keys_file(Path(sys.argv[1]), 128, rows=4096)['keys']\n"
             "assert recall_keys.keys_file_rows(Path(sys.argv[1])) == 1 << 19 and tuple(k.shape) == (4096, 128)\n"
             "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)\n")
    for path in (st, pt):
        r = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert r.returncode == 0, r.stderr
        assert int(r.stdout) < 64, (path, r.stdout)  # MiB grown: a few MiB of rows, not the 256 MiB file


class _SglangTopk:
    """SGLang's top-k as kgen.peer_sglang_topk.Peer presents it (topk, record), torch.topk on the CPU; it checks
    what recall hands it: rows of a stride SGLang reads, every row wholly visible."""

    def __init__(self):
        self.calls = 0

    def topk(self, scores, seq_lens, k):
        assert scores.dtype == torch.float32 and scores.stride(0) % 4 == 0 and scores.stride(1) == 1
        assert seq_lens.dtype == torch.int32 and (seq_lens == scores.shape[1]).all()
        self.calls += 1
        return torch.topk(scores, k, dim=1).indices.to(torch.int32)

    def record(self):
        return {"name": "sglang.topk_v2", "present": True, "sglang": "stand-in"}


def test_sglang_topk_is_a_selection_stage_where_it_loads(monkeypatch):
    from kgen import peer_sglang_topk as P
    from kgen.resolve import resolve_spec

    monkeypatch.delenv("KGEN_BENCH_PEER", raising=False)
    stand_in = _SglangTopk()
    monkeypatch.setattr(P.Peer, "load", classmethod(lambda cls, *a, **kw: stand_in))
    peer, record = RC.load_selection_peer(512, "cuda")
    assert peer is stand_in and record["present"] is True
    # the reasons it is absent, each in the report
    assert RC.load_selection_peer(512, "cpu") == (None, {"name": P.NAME, "present": False,
                                                         "absent": "the run is on the CPU"})
    assert RC.load_selection_peer(4096, "cuda")[1]["absent"] == "--topk 4096 is past its largest k, 2048"
    monkeypatch.setenv("KGEN_BENCH_PEER", "0")
    assert RC.load_selection_peer(512, "cuda")[1]["absent"] == "disabled (KGEN_BENCH_PEER=0)"
    monkeypatch.delenv("KGEN_BENCH_PEER")

    def no_kit(cls, *a, **kw):
        raise P.PeerAbsent("no kit at .peers/sglang_topk")

    monkeypatch.setattr(P.Peer, "load", classmethod(no_kit))
    assert RC.load_selection_peer(512, "cuda")[1]["absent"] == "no kit at .peers/sglang_topk"
    # measured beside the others on the same fp32 scores: rows of 1001 keys (a stride SGLang cannot read) padded
    stages = RC.selection_stages(resolve_spec(FP8), 20, stand_in)
    assert set(stages) == {"torch.topk", "kgen.indexer_topk", P.NAME}
    g = torch.Generator().manual_seed(5)
    ref = torch.randn(3, 1001, generator=g, dtype=torch.float64)
    var = ref + 0.05 * torch.randn(3, 1001, generator=g, dtype=torch.float64)
    m = RC.compare(ref, var, ref, var, torch.zeros(3, dtype=torch.long), torch.ones(3, dtype=torch.bool),
                   torch.ones(3), 20, stages)
    assert stand_in.calls == 1 and m["selection"][P.NAME]["agreement_with_exact_selection"] == 1.0
    assert m["selection"][P.NAME]["agreement"] == pytest.approx(m["selection"]["torch.topk"]["agreement"])


def test_a_peer_stage_that_fails_is_reported_and_the_run_goes_on():
    from kgen import peer_sglang_topk as P
    from kgen.resolve import resolve_spec

    class Refusing(_SglangTopk):
        def topk(self, scores, seq_lens, k):
            raise RuntimeError("SGLang's top-k failed: rows past its plan")

    stages = RC.selection_stages(resolve_spec(FP8), 20, Refusing())
    ref = torch.randn(2, 300, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    m = RC.compare(ref, ref, ref, ref, torch.zeros(2, dtype=torch.long), torch.ones(2, dtype=torch.bool),
                   torch.ones(2), 20, stages)
    assert m["selection"][P.NAME] == {"failed": "sglang.topk_v2: SGLang's top-k failed: rows past its plan"}
    assert m["selection"]["torch.topk"]["agreement_with_exact_selection"] == 1.0
    assert RC._stages(m["selection"], ["kgen.indexer_topk", "torch.topk", P.NAME]).endswith(" / -")

"""The engine-code evaluator follows module constants a file imports from another file of the tree
(vLLM's `from vllm.models.deepseek_v4.common.ops.fused_indexer_q import MXFP4_BLOCK_SIZE`), through
absolute re-imports, and ends every cycle or overlong chain as Unknown, never an exception."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgen.engines.pyeval import Evaluator, Function, Unknown
from kgen.engines.tree import MAX_IMPORT_HOPS, EngineTree


def _value(root: Path, files: dict[str, str], fn: str = "f"):
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    scope = EngineTree(root).parse("eng/x.py").scope
    return Evaluator({}).call(Function(scope.functions[fn], scope), [], {})


def test_an_imported_module_constant_is_evaluated_in_its_own_module(tmp_path):
    files = {"eng/x.py": "from eng.ops import BLOCK\n\ndef f():\n    return 128 // 2 + 128 // BLOCK\n",
             "eng/ops.py": "import torch\n\nWIDTH = 64\nBLOCK = WIDTH // 2\n"}
    assert _value(tmp_path, files) == 68


def test_re_imports_are_followed_a_bounded_number_of_modules(tmp_path):
    hops = MAX_IMPORT_HOPS  # x imports from m1, which imports from m2, ...; m{hops} defines it
    files = {"eng/x.py": "from eng.m1 import K\n\ndef f():\n    return K + 4\n"}
    files |= {f"eng/m{i}.py": f"from eng.m{i + 1} import K\n" for i in range(1, hops)}
    files[f"eng/m{hops}.py"] = "K = 128\n"
    assert _value(tmp_path, files) == 132
    (tmp_path / f"eng/m{hops}.py").write_text(f"from eng.m{hops + 1} import K\n")
    (tmp_path / f"eng/m{hops + 1}.py").write_text("K = 128\n")
    with pytest.raises(Unknown):
        _value(tmp_path, {})


def test_an_import_cycle_is_unknown_and_leaves_other_names_readable(tmp_path):
    files = {"eng/x.py": "from eng.a import K, J\n\ndef f():\n    return K\n\ndef g():\n    return J * 2\n",
             "eng/a.py": "from eng.b import K\nJ = 66\n", "eng/b.py": "from eng.a import K\n"}
    with pytest.raises(Unknown):
        _value(tmp_path, files)
    assert _value(tmp_path, {}, "g") == 132


def test_constants_defined_in_terms_of_each_other_across_modules(tmp_path):
    files = {"eng/x.py": "from eng.a import K\n\ndef f():\n    return K\n",
             "eng/a.py": "from eng.b import J\nK = J + 1\n", "eng/b.py": "from eng.a import K\nJ = K\n"}
    with pytest.raises(Unknown, match="defined in terms of itself"):
        _value(tmp_path, files)


def test_a_long_chain_of_constants_across_modules_is_unknown(tmp_path):
    n = 60
    files = {"eng/x.py": "from eng.c0 import K\n\ndef f():\n    return K\n"}
    files |= {f"eng/c{i}.py": f"from eng.c{i + 1} import K as N\nK = N + 1\n" for i in range(n)}
    files[f"eng/c{n}.py"] = "K = 0\n"
    with pytest.raises(Unknown, match="other constants"):
        _value(tmp_path, files)

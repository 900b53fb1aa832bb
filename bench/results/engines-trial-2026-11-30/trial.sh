#!/bin/bash
# The engines trial, run from the kgen repository root (set K to the python that runs kgen).
K="${K:-python -m kgen}"
S=/tmp/sglang-real
V=/tmp/vllm-real
run() { echo "\$ $*"; "$@"; echo "[exit $?]"; }
git -C $S checkout -q . && git -C $S clean -qfdx
echo "== SGLang tree: $(git -C $S rev-parse --short HEAD) (files assembled from the search index)"
run $K audit --engine sglang --root $S specs/dsv4/indexer_fp8.yaml
run $K audit --engine sglang --root $S specs/indexer_bf16.yaml
run $K audit --engine sglang --root $S specs/dsv4/indexer_fp4.yaml
run $K patch --engine sglang --root $S specs/indexer_bf16.yaml -o /tmp/p.diff
run git -C $S apply --check /tmp/p.diff
echo "\$ git -C $S apply --stat /tmp/p.diff"; git -C $S apply --stat /tmp/p.diff
run git -C $S apply /tmp/p.diff
run $K audit --engine sglang --root $S specs/indexer_bf16.yaml specs/dsv4/indexer_fp8.yaml
run $K patch --engine sglang --root $S specs/indexer_bf16.yaml
echo "\$ python -m py_compile <every changed or new .py>"
(cd $S && python3 -m py_compile $(git diff --name-only) $(git ls-files --others --exclude-standard | grep '\.py$')); echo "[exit $?]"
echo "\$ flag-off check: each patched engine module, kgen's additions removed, has the original's AST"
python3 - "$S" <<'PY'
import ast, subprocess, sys
root = sys.argv[1]
def mentions(n): return "kgen_indexer" in ast.unparse(n)
class Strip(ast.NodeTransformer):
    def visit_If(self, n):
        self.generic_visit(n); return (n.orelse or None) if mentions(n.test) else n
    def visit_IfExp(self, n):
        self.generic_visit(n); return n.orelse if mentions(n.test) else n
    def visit_ImportFrom(self, n):
        return None if any(a.name == "kgen_indexer" for a in n.names) else n
    def visit_Assign(self, n):
        self.generic_visit(n); return None if any(mentions(t) for t in n.targets) else n
    def visit_AnnAssign(self, n):
        return None if ast.unparse(n.target) == "enable_kgen_indexer" else n
files = subprocess.run(["git", "-C", root, "diff", "--name-only"], capture_output=True, text=True).stdout.split()
for f in files:
    new = ast.parse(open(f"{root}/{f}").read())
    old = ast.parse(subprocess.run(["git", "-C", root, "show", f"HEAD:{f}"], capture_output=True, text=True).stdout)
    same = ast.dump(ast.fix_missing_locations(Strip().visit(new))) == ast.dump(old)
    ints = lambda t: sorted(x.value for x in ast.walk(t) if isinstance(x, ast.Constant) and type(x.value) is int)
    print(f"  {f}: AST equal with the flag's branches removed: {same}; new integer literals: "
          f"{sorted(set(ints(ast.parse(open(f'{root}/{f}').read()))) - set(ints(old))) or 'none'}")
PY
echo "== vLLM tree: $(git -C $V rev-parse --short HEAD) (files assembled from the search index)"
run $K audit --engine vllm --root $V tests/fixtures/engines/vllm_indexer_fp8.yaml
run $K audit --engine vllm --root $V specs/dsv4/indexer_fp8.yaml
run $K audit --engine vllm --root $V specs/indexer_bf16.yaml
run $K patch --engine vllm --root $V specs/indexer_bf16.yaml

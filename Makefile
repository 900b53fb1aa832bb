# Two commands set up a fresh machine: `make demo` (main job) and `make test` (whole suite).
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
SPECS   := $(wildcard specs/*.yaml)

.PHONY: install releases demo test lint compile-image test-gpu render compile wheels device-check clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[torch,test,lint]'
	touch $(STAMP)

install: $(STAMP)

# The main job: validate, render every shipped spec, compile every variant for every target.
demo: install
	$(BIN)/kgen validate $(SPECS)
	$(BIN)/kgen render $(SPECS)
	$(BIN)/kgen compile $(SPECS)

# The steps of the demo one at a time (each validates first; exit 1 on any problem).
render: install
	$(BIN)/kgen render $(SPECS)

compile: install
	$(BIN)/kgen compile $(SPECS)

# The released engines the engine tests run against (scripts/engine_releases.py, the list in
# tests/fixtures/engines/releases.json): wheels downloaded once into .releases/wheels (git-ignored),
# the files kgen reads unpacked into .releases/trees (a few MiB); a second run downloads nothing.
releases: install
	$(BIN)/python scripts/engine_releases.py

# Tests that need the release trees fail without them here; KGEN_SKIP_RELEASES=1 (outside make
# only) skips them instead.
test: install releases
	KGEN_SKIP_RELEASES= $(BIN)/python -m pytest

# Every shipped kernel compiled by the GPU machine's NVRTC (torch cu130's 13.0; the project pins 13.5): source
# only the newer NVRTC takes fails here, not in a device call (scripts/nvrtc_image.sh fetches it once).
compile-image: install
	PYTHON=$(BIN)/python scripts/nvrtc_image.sh $(BIN)/kgen compile $(SPECS) > /dev/null

# On a GPU machine: every shipped variant against the Torch reference, then the GPU tests of the
# suite. Without a GPU `kgen test` exits 2 with one line saying so (the pytest part would only skip).
test-gpu: install
	$(BIN)/kgen test $(SPECS)
	$(BIN)/python -m pytest -m gpu

# ruff (style, imports, bugbear) and mypy over the package (config: pyproject.toml); clang-format
# (.clang-format, pinned in the lint extra) over the hand-written headers (the reader's parts under reader/)
# and a fresh render of every shipped spec.
CLANG_FORMAT := $(BIN)/clang-format --style=file:.clang-format --dry-run -Werror
lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(CLANG_FORMAT) templates/include/kgen/*.cuh templates/include/kgen/reader/*.cuh
	@out=$$(mktemp -d) && trap 'rm -rf "$$out"' EXIT && \
	  $(BIN)/kgen render $(SPECS) -o "$$out" >/dev/null && \
	  find "$$out" \( -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print0 | xargs -0 $(CLANG_FORMAT) && \
	  echo "clang-format: headers and a fresh render of $(words $(SPECS)) specs are clean"

clean:
	rm -rf $(VENV) .whl build *.egg-info

# ---------------------------------------------------------------------------------------------
# GPU machine (docs/gpu.md). Its image (Python 3.12, torch 2.11 cu130) lacks pydantic, ruamel.yaml,
# libcst, platformdirs...: `make wheels` fetches them as cp312 manylinux wheels into .whl/, at the
# versions installed here (pyproject pins), for the device tool's `carry: [".whl"]`. cuda-core,
# cuda-bindings and cuda-pathfinder are carried too (the versions kgen is tested with; ~15 MiB);
# the 58-MiB nvidia-cuda-nvrtc and the cudart headers are NOT carried: the image's are used, so
# kernels are NVRTC-compiled there (scripts/device_run.sh falls back to the image's cuda-python if
# ours does not work with them). `make wheels DEVICE_CUDA_WHEELS=` carries no cuda-python at all.
WHEEL_DIR          := .whl
DEVICE_WHEELS      ?= pydantic pydantic-core annotated-types typing-inspection typing-extensions \
                      ruamel.yaml libcst platformdirs filelock typer rich jinja2
DEVICE_CUDA_WHEELS ?= cuda-core cuda-bindings cuda-pathfinder
WHEEL_PLATFORMS    := $(foreach n,28 27 24 17,--platform manylinux_2_$(n)_x86_64) \
                      --platform manylinux2014_x86_64 --platform manylinux1_x86_64
WHEEL_MAX_MIB      := 40

wheels: install
	@grep -qxF '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
	@mkdir -p $(WHEEL_DIR)
	@pins=$$($(BIN)/python -c 'import importlib.metadata as m, sys; print(" ".join(f"{n}=={m.version(n)}" for n in sys.argv[1:]))' $(DEVICE_WHEELS) $(DEVICE_CUDA_WHEELS)) && \
	  echo "wheels for the GPU machine (cp312, manylinux x86_64): $$pins" && \
	  rm -f $(WHEEL_DIR)/*.whl && \
	  $(BIN)/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	    $(WHEEL_PLATFORMS) -d $(WHEEL_DIR) $$pins
	@ls $(WHEEL_DIR)/*.whl | sed 's|.*/||' | sed 's/-.*//' | sort | uniq -d | grep . && { echo "two versions of one wheel in $(WHEEL_DIR)"; exit 1; } || true
	@size=$$(du -sm $(WHEEL_DIR) | cut -f1); echo "$(WHEEL_DIR): $$(ls $(WHEEL_DIR)/*.whl | wc -l) wheels, $$size MiB"; \
	  test $$size -lt $(WHEEL_MAX_MIB) || { echo "$(WHEEL_DIR) is over $(WHEEL_MAX_MIB) MiB"; exit 1; }

# Everything that can be checked before spending device time: wheels present and small, the
# tree + wheels + .xfer/pk under the tool's 64 MiB, the device script parses, kgen compiles every shipped
# variant for the H200 (sm_90a) here, and the CPU tests of the GPU path pass. Prints the command.
device-check: wheels
	bash -n scripts/device_run.sh
	@tree=$$( { git ls-files -co --exclude-standard; ls $(WHEEL_DIR)/*.whl; find .xfer/pk -type f 2>/dev/null; } | sort -u | while read -r f; do [ -f "$$f" ] && stat -c %s "$$f"; done | awk '{s+=$$1} END {printf "%d", s/1048576}'); \
	  echo "travels to the device (the tree, the wheels, .xfer/pk): $$tree MiB (limit 64)"; test $$tree -lt 60 || { echo "too large"; exit 1; }
	KGEN_CACHE_DIR=$${KGEN_CACHE_DIR:-/tmp/kgen-device-check} $(BIN)/kgen compile $(SPECS) --arch sm_90a
	$(BIN)/python -m pytest -q tests/test_runtime.py
	@echo; echo "ready. device tool: run(command=\"bash scripts/device_run.sh all\", carry=[\".whl\"], timeout_s=600)"

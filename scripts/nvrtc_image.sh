#!/usr/bin/env bash
# Runs a command with the GPU image's NVRTC (torch 2.11 cu130's, 13.0) in place of the 13.5 the project pins, so that
# a kernel only the newer NVRTC compiles fails here, not in a device call (docs/contributing-gpu.md). The wheel is
# downloaded once into ~/.cache/kgen/nvrtc-VERSION (nothing is installed into the venv); the compile cache keys on the
# toolchain, so the two NVRTCs' cubins do not mix.
#   scripts/nvrtc_image.sh .venv/bin/kgen compile specs/*.yaml
# (`make compile-image`, which CI runs.) $PYTHON: a Python with pip for the download (default python3).
set -euo pipefail
VERSION=${KGEN_IMAGE_NVRTC:-13.0.88}
PY=${PYTHON:-python3}
DIR=${XDG_CACHE_HOME:-$HOME/.cache}/kgen/nvrtc-$VERSION
if [ ! -e "$DIR/nvidia/cu13/lib/libnvrtc.so.13" ]; then
  TMP=$(mktemp -d)
  "$PY" -m pip download -q --no-deps --only-binary=:all: "nvidia-cuda-nvrtc==$VERSION" -d "$TMP" >&2
  rm -rf "$DIR.part"
  "$PY" -m zipfile -e "$TMP"/nvidia_cuda_nvrtc-*.whl "$DIR.part" && mv "$DIR.part" "$DIR" && rm -rf "$TMP"
fi
LIB=$DIR/nvidia/cu13/lib
LD_LIBRARY_PATH=$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} LD_PRELOAD=$LIB/libnvrtc.so.13 exec "$@"

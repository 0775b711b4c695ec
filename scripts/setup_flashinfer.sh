#!/usr/bin/env bash
# Installs the header-only pieces that the wgmma attention prefill (src/backend/cuda/
# attention_prefill_wgmma.cu, CudaOptions::attention_prefill_version = 2) compiles against, into
# .deps/flashinfer-0.3.1 (git-ignored):
#   include/        FlashInfer 0.3.1's C++ headers (Apache-2.0; the Hopper FA3-style prefill kernel
#                   in include/flashinfer/attention/hopper/), from the flashinfer-python sdist on PyPI;
#   cutlass-util/   CUTLASS 4.2's tools/util/include (cutlass/util/*.h, BSD-3-Clause), which
#                   FlashInfer's cutlass_utils.cuh includes, from the nvidia-cutlass wheel that
#                   scripts/setup_cutlass.sh fetched (run that first: CUTLASS's own headers come
#                   from .deps/cutlass-4.2.0).
# Without them CMake compiles attention_prefill_wgmma.cu as a stub and version 2 is refused.
# Skipped when installed. Called by setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
FI_VERSION=0.3.1
FI_SHA256=992017d193dfbbc62e67401a6d5416629bf90b640872d14b7863de45e9371446
CUTLASS_VERSION=4.2.0.0
CUTLASS_SHA256=f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6
PREFIX="$PWD/.deps/flashinfer-$FI_VERSION"
if [ -f "$PREFIX/include/flashinfer/attention/hopper/prefill_sm90.cuh" ] &&
   [ -f "$PREFIX/cutlass-util/cutlass/util/command_line.h" ]; then
  echo "setup_flashinfer: $PREFIX is installed"
  exit 0
fi
work="$PWD/.deps/src"
mkdir -p "$work"
sdist="$work/flashinfer_python-$FI_VERSION.tar.gz"
if [ ! -f "$sdist" ] || ! echo "$FI_SHA256  $sdist" | sha256sum -c --quiet - 2>/dev/null; then
  # pip cannot download this sdist without building its metadata (which needs torch): take the
  # file PyPI's simple index lists (the index pip reads); the hash below pins the bytes.
  echo "setup_flashinfer: fetching the flashinfer-python==$FI_VERSION sdist from PyPI"
  python3 - "$FI_VERSION" "$sdist" <<'PY'
import re, sys, urllib.request
ver, out = sys.argv[1], sys.argv[2]
with urllib.request.urlopen("https://pypi.org/simple/flashinfer-python/", timeout=60) as r:
    html = r.read().decode()
links = re.findall(r'href="([^"]*/flashinfer_python-' + re.escape(ver) + r'\.tar\.gz[^"]*)"', html)
if not links:
    sys.exit("setup_flashinfer: no sdist of flashinfer-python " + ver + " in PyPI's index")
with urllib.request.urlopen(links[0].replace("&amp;", "&"), timeout=300) as r, open(out, "wb") as f:
    f.write(r.read())
PY
fi
echo "$FI_SHA256  $sdist" | sha256sum -c --quiet -
wheel="$work/nvidia_cutlass-$CUTLASS_VERSION-py3-none-any.whl"
if [ ! -f "$wheel" ] || ! echo "$CUTLASS_SHA256  $wheel" | sha256sum -c --quiet - 2>/dev/null; then
  echo "setup_flashinfer: fetching nvidia-cutlass==$CUTLASS_VERSION from PyPI"
  pip=pip
  [ -x .venv/bin/pip ] && pip=.venv/bin/pip
  "$pip" download --quiet --no-deps --only-binary=:all: "nvidia-cutlass==$CUTLASS_VERSION" -d "$work"
fi
echo "$CUTLASS_SHA256  $wheel" | sha256sum -c --quiet -
rm -rf "$PREFIX.part" "$work/fi-x"
mkdir -p "$PREFIX.part" "$work/fi-x"
tar -xzf "$sdist" -C "$work/fi-x" "flashinfer_python-$FI_VERSION/include" "flashinfer_python-$FI_VERSION/LICENSE"
mv "$work/fi-x/flashinfer_python-$FI_VERSION/include" "$PREFIX.part/include"
cp "$work/fi-x/flashinfer_python-$FI_VERSION/LICENSE" "$PREFIX.part/LICENSE"
python3 - "$wheel" "$PREFIX.part/cutlass-util" <<'PY'
import sys, zipfile, os
src = "cutlass_library/source/tools/util/include/"
with zipfile.ZipFile(sys.argv[1]) as z:
    for n in z.namelist():
        if n.startswith(src) and not n.endswith("/"):
            out = os.path.join(sys.argv[2], n[len(src):])
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with open(out, "wb") as f:
                f.write(z.read(n))
PY
rm -rf "$PREFIX" "$work/fi-x" && mv "$PREFIX.part" "$PREFIX"
echo "setup_flashinfer: headers in $PREFIX"

#!/usr/bin/env bash
# Installs every dependency of qwenserve on Debian 12 (bookworm): the C++ toolchain and libraries
# from Debian, and the Python test oracles from PyPI into .venv/. Idempotent; versions pinned.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libboost1.81-dev=1.81.0-5+deb12u1
  nlohmann-json3-dev=3.11.2-2
  libpcre2-dev
  libutf8proc-dev=2.8.0-1
  libfmt-dev=9.1.0+ds1-2
  libgtest-dev=1.12.1-0.2 libgmock-dev=1.12.1-0.2
  libbenchmark-dev=1.7.1-1
  libxxhash-dev=0.8.1-1
  # Image input (src/image): JPEG, PNG and WebP decoders.
  libjpeg62-turbo-dev libpng-dev libwebp-dev
  # Video files (src/image/video_decode) and https URLs (server/remote_fetch); both optional in CMake.
  libavformat-dev libavcodec-dev libswscale-dev libavutil-dev libssl-dev
  openssl  # tests/e2e/test_video_files.py makes its self-signed certificates with the CLI
  python3-venv
  haproxy  # tests/e2e/test_replicas_haproxy.py: replicas behind deploy/haproxy/qwenserve.cfg
  # tests/e2e/test_report_chromium.py opens campaign report's HTML in headless Chromium. About
  # 1.5 min and 25 packages on a fresh Debian 12; not pinned: Debian's security updates replace it.
  chromium
  # scripts/test_sanitizers.sh: clang with its ASan/UBSan/TSan/libFuzzer runtimes and OpenMP.
  clang=1:14.0-55.7~deb12u1 libclang-rt-14-dev=1:14.0.6-12 libomp-dev=1:14.0-55.7~deb12u1
)

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
missing=()
for p in "${APT_PACKAGES[@]}"; do
  name="${p%%=*}"
  want="${p#*=}"
  have=$(dpkg-query -W -f='${Status} ${Version}' "$name" 2>/dev/null || true)
  if [[ "$have" != "install ok installed"* ]] || { [ "$want" != "$p" ] && [[ "$have" != *" $want" ]]; }; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python test oracles (reference implementations), pinned.
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
want_hash=$(sha256sum scripts/requirements-test.txt | cut -d' ' -f1)
if [ "$(cat .venv/.requirements-hash 2>/dev/null)" != "$want_hash" ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check -r scripts/requirements-test.txt
  echo "$want_hash" > .venv/.requirements-hash
fi
# The grammar engine (structured outputs): xgrammar's C++ core from its PyPI sdist, into .deps/.
bash scripts/setup_xgrammar.sh
# CUTLASS 4.2 headers (the MoE prefill grouped GEMM on wgmma/TMA), from its PyPI wheel, into .deps/.
bash scripts/setup_cutlass.sh
# FlashInfer 0.3.1 headers + CUTLASS util headers (the wgmma attention prefill, opt-in), into .deps/.
bash scripts/setup_flashinfer.sh
echo "setup: ok"

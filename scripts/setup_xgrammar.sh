#!/usr/bin/env bash
# Builds xgrammar's C++ core (the grammar engine behind structured outputs, src/grammar/) from
# its PyPI source distribution into .deps/xgrammar-0.2.8/ (git-ignored): the static library and
# its headers (include/xgrammar, include/dlpack, include/picojson.h). Python bindings off, only
# the library target, no LTO. Skipped when the prefix is already there. Called by setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.2.8
SHA256=8305646fd2b319d6c3003f51a1665e54cbbe9cba1fb636bc41d0b46434ccbb80
URL="https://files.pythonhosted.org/packages/03/0f/29f521535729be740779c2c98b630ef6607cf28be9b669895dd2b821ff63/xgrammar-$VERSION.tar.gz"
PREFIX="$PWD/.deps/xgrammar-$VERSION"
if [ -f "$PREFIX/lib/libxgrammar.a" ] && [ -f "$PREFIX/include/xgrammar/xgrammar.h" ]; then
  echo "setup_xgrammar: $PREFIX is built"
  exit 0
fi
work="$PWD/.deps/src"
mkdir -p "$work"
sdist="$work/xgrammar-$VERSION.tar.gz"
if [ ! -f "$sdist" ] || ! echo "$SHA256  $sdist" | sha256sum -c --quiet - 2>/dev/null; then
  echo "setup_xgrammar: fetching $URL"
  curl -fsSL -o "$sdist.part" "$URL"
  mv "$sdist.part" "$sdist"
fi
echo "$SHA256  $sdist" | sha256sum -c --quiet -
rm -rf "$work/xgrammar-$VERSION" && tar -C "$work" -xzf "$sdist"
src="$work/xgrammar-$VERSION"
build="$work/build-$VERSION"
mkdir -p "$build"
# The project's cmake/config.cmake turns the Python bindings on with a plain set(); a
# config.cmake in the build directory is read instead of it.
cat > "$build/config.cmake" <<'CFG'
set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)
set(XGRAMMAR_BUILD_CXX_TESTS OFF)
set(XGRAMMAR_ENABLE_CPPTRACE OFF)
set(XGRAMMAR_ENABLE_COVERAGE OFF)
set(XGRAMMAR_ENABLE_INTERNAL_CHECK OFF)
CFG
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
# -fno-lto: the project's flags ask for -flto=auto, whose slim objects a plain `ar` archive cannot
# index; -Wno-error: its -Werror is for its own CI, not for a newer or older g++;
# XGRAMMAR_LOG_CUSTOMIZE=1: its log calls go to functions src/grammar/ defines, so a schema
# feature it would drop with a warning becomes a 400 instead of a silently looser grammar.
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$PREFIX" \
  -DCMAKE_CXX_FLAGS="-fno-lto -Wno-error -DXGRAMMAR_LOG_CUSTOMIZE=1" -DCMAKE_POSITION_INDEPENDENT_CODE=ON "${launcher[@]}" > "$build/configure.log"
start=$(date +%s)
nice cmake --build "$build" -j"${QS_JOBS:-2}" --target xgrammar
cmake --install "$build" > /dev/null
cp "$src/3rdparty/picojson/picojson.h" "$PREFIX/include/"
cp "$src/LICENSE" "$PREFIX/LICENSE"
echo "setup_xgrammar: built in $(( $(date +%s) - start )) s into $PREFIX"

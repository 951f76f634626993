#!/usr/bin/env bash
# Installs the build into a temporary prefix and uses it from outside, as another project would:
# the installed tree holds the headers, libveloxquant.so (with its SONAME, exporting only the
# public API), the CMake package and the pkg-config file; tests/capi/consumer (examples/generate.c
# in C and kv_direct.cpp in C++) is configured, built and run once through find_package and once
# through pkg-config, and the C example is also built with a plain `cc $(pkg-config ...)` line. The
# example's greedy text with a KIVI cache (an 8-token fp16 window, so that most of the 30 tokens
# are held compressed) must equal `veloxquant generate`'s.
#   install_consumer.sh BUILD_DIR SOURCE_DIR MODEL
set -euo pipefail
build=$1 src=$2 model=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() { echo "FAIL: $*"; exit 1; }

cmake --install "$build" --prefix "$prefix" >/dev/null
pc=$(find "$prefix" -name veloxquant.pc)
[[ -n $pc ]] || fail "no veloxquant.pc installed"
libdir=$(dirname "$(dirname "$pc")")
[[ -f $prefix/include/veloxquant/veloxquant.h && -f $prefix/include/veloxquant/kv/cache.h ]] || fail "headers missing"
[[ -f $libdir/cmake/veloxquant/veloxquantConfigVersion.cmake ]] || fail "CMake package version file missing"
lib=$(readlink -f "$libdir/libveloxquant.so")
soname=$(readelf -d "$lib" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[[ $soname == libveloxquant.so.0.1 && -e $libdir/$soname ]] || fail "SONAME '$soname'"
if grep -rn '#include "src/' "$prefix/include"; then fail "an installed header includes from src/"; fi
# Exported: the C API (vq_*) and the C++ names of the installed headers (vq::...), nothing else
# (no fmt, Highway or engine symbols).
leaked=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^vq_' | c++filt |
         grep -Ev '^(vq::|typeinfo for vq::|typeinfo name for vq::|vtable for vq::|VELOXQUANT_)' |
         grep -Ev '^vq::(engine|eval|cli|serve)::' || true)
[[ -z $leaked ]] || fail "symbols exported beyond the public API: $(echo "$leaked" | head -5)"
if nm -DC --defined-only "$lib" | grep -E ' vq::(engine|eval|serve)::'; then fail "engine symbols exported"; fi

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
prompt="The history of the river"
want=$("$prefix/bin/veloxquant" generate -m "$model" -p "$prompt" -n 24 --kv kivi:residual=8 2>/dev/null)
[[ -n $want ]] || fail "the CLI generated nothing"
for mode in find_package pkg-config; do
  echo "== $mode"
  CMAKE_PREFIX_PATH=$prefix PKG_CONFIG_PATH=$libdir/pkgconfig \
    cmake -S "$src/tests/capi/consumer" -B "$tmp/$mode" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DVQ_CONSUMER_MODE=$mode -DVQ_EXAMPLES_DIR="$src/examples" >/dev/null
  cmake --build "$tmp/$mode" >/dev/null
  # The build's run path points at the installed library; LD_LIBRARY_PATH covers a toolchain that
  # sets none.
  LD_LIBRARY_PATH=$libdir "$tmp/$mode/kv_direct"
  got=$(LD_LIBRARY_PATH=$libdir "$tmp/$mode/generate" "$model" "$prompt" 24 kivi:residual=8 2>"$tmp/stderr")
  grep -q "kv cache kivi:residual=8: [0-9]* bytes resident ([1-9][0-9]* in compressed blocks" "$tmp/stderr" ||
    fail "$mode: nothing held compressed: $(cat "$tmp/stderr")"
  echo "$got"
  [[ $got == "$want" ]] || fail "$mode: examples/generate.c gave '$got', veloxquant generate '$want'"
done
echo "== cc with pkg-config"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Werror -o "$tmp/generate_cc" "$src/examples/generate.c" \
  $(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags --libs veloxquant)
LD_LIBRARY_PATH=$libdir "$tmp/generate_cc" /nonexistent.gguf "x" 1 2>"$tmp/err" && fail "a missing model was accepted"
grep -q "cannot open" "$tmp/err" || fail "missing model: $(cat "$tmp/err")"
got=$(LD_LIBRARY_PATH=$libdir "$tmp/generate_cc" "$model" "$prompt" 24 kivi:residual=8 2>/dev/null)
[[ $got == "$want" ]] || fail "cc build: '$got'"
echo "install consumer: ok"

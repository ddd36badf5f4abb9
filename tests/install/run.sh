#!/usr/bin/env bash
# ctest install_outside_tree: `cmake --install` into a temporary prefix, then programs outside
# kiln's tree (use_kiln.c, use_kiln.cpp) built against the installed kiln through
# find_package(kiln) (this folder's CMakeLists.txt) and through pkg-config, run on
# examples/tiny_cnn against its expected output; and libkiln.so exports exactly the
# functions the installed headers declare.
# run.sh BUILD_DIR SOURCE_DIR WORK_DIR [EXTRA_FLAGS (the build's sanitizer flags)]
set -euo pipefail
build=$1 src=$2 work=$3 extra=${4:-}
cc=${CC:-cc} cxx=${CXX:-c++}
fail() { echo "install test: $*" >&2; exit 1; }

rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "cmake --install failed"; }
pc=$(find "$prefix" -name kiln.pc)
[ -n "$pc" ] || fail "no kiln.pc under $prefix"
libdir=$(dirname "$(dirname "$pc")")
for f in include/kiln.h include/kiln_models.h bin/kiln; do
  [ -f "$prefix/$f" ] || fail "$prefix/$f not installed"
done
for f in libkiln.a libkiln.so libkiln.so.0 cmake/kiln/kilnConfig.cmake cmake/kiln/kilnConfigVersion.cmake \
         cmake/kiln/kilnTargets.cmake; do
  [ -e "$libdir/$f" ] || fail "$libdir/$f not installed"
done
soname=$(readelf -d "$libdir/libkiln.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = libkiln.so.0 ] || fail "libkiln.so's SONAME is '$soname', not libkiln.so.0"

model=$src/examples/tiny_cnn.onnx x=$src/examples/tiny_cnn_x.npy want=$src/examples/tiny_cnn_expected.npy
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1

# find_package(kiln) with CMAKE_PREFIX_PATH (the user package registry left out).
cmake -S "$src/tests/install" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
      -DCMAKE_C_FLAGS="$extra" -DCMAKE_CXX_FLAGS="$extra" -DCMAKE_EXE_LINKER_FLAGS="$extra" \
      >"$work/cmake.log" 2>&1 || { cat "$work/cmake.log"; fail "configuring tests/install failed"; }
kiln_dir=$(sed -n 's/^kiln_DIR:PATH=//p' "$work/cmake/CMakeCache.txt")
[ "$kiln_dir" = "$libdir/cmake/kiln" ] || fail "find_package(kiln) found '$kiln_dir', not $libdir/cmake/kiln"
cmake --build "$work/cmake" -j2 >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "building tests/install failed"; }
grep -q 'NEEDED.*\[libkiln.so.0\]' <<<"$(readelf -d "$work/cmake/use_kiln_c")" || fail "use_kiln_c does not link libkiln.so"
! grep -q 'NEEDED.*libkiln' <<<"$(readelf -d "$work/cmake/use_kiln_static")" || fail "use_kiln_static links libkiln.so"
for p in use_kiln_c use_kiln_cxx use_kiln_static; do
  "$work/cmake/$p" "$model" "$x" "$want" || fail "$p (find_package) failed"
done

# pkg-config: shared, and libkiln.a with --static's dependencies.
export PKG_CONFIG_PATH=$libdir/pkgconfig
flags=$(pkg-config --cflags --libs kiln) || fail "pkg-config --cflags --libs kiln failed"
static_libs=$(pkg-config --static --libs kiln) || fail "pkg-config --static --libs kiln failed"
static_libs=${static_libs/-lkiln /-l:libkiln.a }
$cc $extra -std=c11 -o "$work/pc_c" "$src/tests/install/use_kiln.c" $flags -lm || fail "cc with pkg-config failed"
$cxx $extra -o "$work/pc_cxx" "$src/tests/install/use_kiln.cpp" $flags || fail "c++ with pkg-config failed"
$cc $extra -std=c11 -o "$work/pc_static" "$src/tests/install/use_kiln.c" $(pkg-config --cflags kiln) $static_libs -lm \
  || fail "cc with pkg-config --static failed"
! grep -q 'NEEDED.*libkiln' <<<"$(readelf -d "$work/pc_static")" || fail "pc_static links libkiln.so"
for p in pc_c pc_cxx pc_static; do
  LD_LIBRARY_PATH=$libdir "$work/$p" "$model" "$x" "$want" || fail "$p (pkg-config) failed"
done

# libkiln.so exports exactly the functions declared in the installed headers: every
# kiln_name( that the preprocessor leaves (comments gone).
printf '#include <kiln.h>\n#include <kiln_models.h>\n' | $cc -E -P -I"$prefix/include" - |
  grep -o 'kiln_[a-z0-9_]*[[:space:]]*(' | sed 's/[[:space:]]*($//' | sort -u >"$work/declared.txt"
nm -D --defined-only "$libdir/libkiln.so" | awk '{print $3}' | sed 's/@.*//' | sort -u >"$work/exported.txt"
[ -s "$work/declared.txt" ] || fail "no function found in the installed headers"
extra_syms=$(comm -13 "$work/declared.txt" "$work/exported.txt")
missing=$(comm -23 "$work/declared.txt" "$work/exported.txt")
[ -z "$extra_syms" ] || fail "libkiln.so exports symbols the public headers do not declare:
$extra_syms"
[ -z "$missing" ] || fail "libkiln.so lacks functions the public headers declare:
$missing"
echo "install test: $(wc -l <"$work/exported.txt") symbols exported, all declared in kiln.h/kiln_models.h"

#!/usr/bin/env bash
# python_gpu_pack.sh BUILD_DIR [DEST]: what bench/python_gpu.py needs on the GPU machine,
# from a CUDA build of kiln configured with -DKILN_PYTHON=ON (the extension is built here if
# missing): DEST (default .carry/py) gets _kiln.abi3.so, libkiln.so.0.gz, kiln.gz and lib/
# with the libraries libkiln.so needs that the GPU machine's image lacks (OpenBLAS and its
# Fortran runtime, protobuf-c, libgomp), gzipped; about 25 MB. There, with DEST carried:
#   cd DEST && for f in *.gz lib/*.gz; do gunzip -kf $f; done; cd -
#   . bench/common.sh; kiln_env DEST; python3 bench/python_gpu.py --kiln-build DEST
set -euo pipefail
build=$1 dest=${2:-.carry/py}
[ -f "$build/python/_kiln.abi3.so" ] || cmake --build "$build" --target _kiln -j2
[ -x "$build/kiln" ] || cmake --build "$build" --target kiln_cli -j2
rm -rf "$dest"
mkdir -p "$dest/lib"
cp "$build/python/_kiln.abi3.so" "$dest/"
strip --strip-debug -o "$dest/libkiln.so.0" "$build/libkiln.so.0"
strip --strip-debug -o "$dest/kiln" "$build/kiln"
for l in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0 libprotobuf-c.so.1 libgomp.so.1; do
  p=$(ldd "$build/libkiln.so.0" | awk -v l=$l '$1 == l { print $3 }')
  [ -n "$p" ] && cp -L "$p" "$dest/lib/"
done
gzip -f "$dest/libkiln.so.0" "$dest/kiln" "$dest"/lib/*
du -sh "$dest"

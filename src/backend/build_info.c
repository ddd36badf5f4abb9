/*
 * build_info.c — the build's facts and the autotune cache's path (kiln_tools.h), here and
 * not in src/cuda so that a build without CUDA has them too.
 */
#include "kiln_tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef KILN_HAVE_CUDA
void kiln_cuda_build_info(kiln_build_info *out); /* src/cuda/build_info.c */
#endif

void kiln_get_build_info(kiln_build_info *out) {
    memset(out, 0, sizeof *out);
#ifdef KILN_HAVE_CUDA
    out->cuda = true;
    kiln_cuda_build_info(out);
#endif
}

#define CACHE_FILE_NAME "cudnn-algos.txt"

bool kiln_autotune_cache_path(char *buf, size_t n) {
    const char *dir = getenv("KILN_CACHE_DIR");
    int k;
    if (dir) {
        if (!*dir) return false;
        k = snprintf(buf, n, "%s/" CACHE_FILE_NAME, dir);
    } else if ((dir = getenv("XDG_CACHE_HOME")) && *dir) {
        k = snprintf(buf, n, "%s/kiln/" CACHE_FILE_NAME, dir);
    } else if ((dir = getenv("HOME")) && *dir) {
        k = snprintf(buf, n, "%s/.cache/kiln/" CACHE_FILE_NAME, dir);
    } else {
        return false;
    }
    return k > 0 && (size_t)k < n;
}

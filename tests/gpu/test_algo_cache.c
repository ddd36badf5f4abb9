/* test_algo_cache.c — the on-disk cache of cuDNN algorithm choices (src/cuda/algo_cache.c)
 * without a GPU: where the file goes, round trips, replacement, other GPUs' lines kept,
 * corrupt and truncated lines ignored and dropped on the next write, failures to write.
 * Exits non-zero on any failure. */
#include "cuda/algo_cache.h"
#include "kiln_tools.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fails;

#define CHECK(cond, ...)                                  \
    do {                                                  \
        if (!(cond)) {                                    \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);   \
            printf(__VA_ARGS__);                          \
            printf("\n");                                 \
            fails++;                                      \
        }                                                 \
    } while (0)

static kiln_algo_entry entry(const char *key, int algo, int math, size_t bytes, float ms) {
    kiln_algo_entry e;
    memset(&e, 0, sizeof e);
    snprintf(e.key, sizeof e.key, "%s", key);
    e.algo = algo;
    e.math = math;
    e.bytes = bytes;
    e.ms = ms;
    e.fused = -1;
    return e;
}

static int count_lines(const char *path) {
    FILE *f = fopen(path, "r");
    int n = 0, ch;
    if (!f) return -1;
    while ((ch = fgetc(f)) != EOF) n += ch == '\n';
    fclose(f);
    return n;
}

static void test_paths(void) {
    char buf[512];
    setenv("KILN_CACHE_DIR", "/some/dir", 1);
    CHECK(kiln_autotune_cache_path(buf, sizeof buf) && strcmp(buf, "/some/dir/cudnn-algos.txt") == 0,
          "KILN_CACHE_DIR: %s", buf);
    CHECK(!kiln_autotune_cache_path(buf, 8), "a path that does not fit is no path");
    setenv("KILN_CACHE_DIR", "", 1);
    CHECK(!kiln_autotune_cache_path(buf, sizeof buf), "an empty KILN_CACHE_DIR turns the disk cache off");
    unsetenv("KILN_CACHE_DIR");
    setenv("XDG_CACHE_HOME", "/xdg", 1);
    CHECK(kiln_autotune_cache_path(buf, sizeof buf) && strcmp(buf, "/xdg/kiln/cudnn-algos.txt") == 0,
          "XDG_CACHE_HOME: %s", buf);
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/home/u", 1);
    CHECK(kiln_autotune_cache_path(buf, sizeof buf) && strcmp(buf, "/home/u/.cache/kiln/cudnn-algos.txt") == 0,
          "HOME: %s", buf);
    unsetenv("HOME");
    CHECK(!kiln_autotune_cache_path(buf, sizeof buf), "no HOME, no cache");
    kiln_algo_cache_prefix(buf, sizeof buf, "GPU|odd\nname", 91900);
    CHECK(strcmp(buf, "GPU_odd_name|91900|") == 0, "prefix sanitized: %s", buf);
}

static void test_file(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/a/b/cudnn-algos.txt", dir);
    const char *me = "NVIDIA H200|91900|", *other = "NVIDIA H100 80GB HBM3|90800|";
    kiln_algo_entry *list = NULL;
    int n = 0, cap = 0;
    CHECK(kiln_algo_cache_load(path, me, &list, &n, &cap) == 0 && n == 0, "a missing file is an empty cache");

    kiln_algo_entry e1 = entry("fwd f16 x=NHWC:2x16x9x9 align=16 det=0 tune=find", 1, 1, 4096, 0.125f);
    kiln_algo_entry e2 = entry("fwd f32 x=NCHW:1x3x8x8 align=16 det=1 tune=find", 6, 3, 0, 0.5f);
    kiln_algo_entry e3 = entry("fwd f16 x=NHWC:2x16x9x9 align=16 det=0 tune=find", 7, 1, 123, 0.25f);
    CHECK(kiln_algo_cache_store(path, me, &e1) == 0, "store creates the directories");
    CHECK(kiln_algo_cache_store(path, me, &e2) == 0, "store a second entry");
    CHECK(kiln_algo_cache_store(path, other, &e3) == 0, "store another GPU's entry with the same key");
    CHECK(kiln_algo_cache_load(path, me, &list, &n, &cap) == 2 && n == 2, "two entries for this GPU, %d", n);
    kiln_algo_entry *a = kiln_algo_cache_find(list, n, e1.key);
    CHECK(a && a->algo == 1 && a->math == 1 && a->bytes == 4096 && fabsf(a->ms - 0.125f) < 1e-6f && a->fused == -1,
          "entry round trip");
    a = kiln_algo_cache_find(list, n, e2.key);
    CHECK(a && a->algo == 6 && a->math == 3 && a->bytes == 0, "second entry round trip");
    /* choices timed on the fused call keep whether to run fused or split */
    kiln_algo_entry ef = entry("fwd f16 x=NHWC:2x16x9x9 call=fused", 1, 1, 0, 0.25f), es = ef;
    ef.fused = 1;
    snprintf(es.key, sizeof es.key, "fwd f16 x=NHWC:4x16x9x9 call=fused");
    es.fused = 0;
    CHECK(kiln_algo_cache_store(path, me, &ef) == 0 && kiln_algo_cache_store(path, me, &es) == 0, "store fused choices");
    n = 0;
    CHECK(kiln_algo_cache_load(path, me, &list, &n, &cap) == 4 && n == 4, "four entries, %d", n);
    a = kiln_algo_cache_find(list, n, ef.key);
    CHECK(a && a->fused == 1, "fused=1 round trip");
    a = kiln_algo_cache_find(list, n, es.key);
    CHECK(a && a->fused == 0, "fused=0 round trip");
    a = kiln_algo_cache_find(list, n, e2.key);
    CHECK(a && a->fused == -1, "no fused field: not tried");
    /* back to the two plain entries for the checks below */
    {
        FILE *g = fopen(path, "r");
        char lines[8][1024];
        int k = 0;
        while (g && k < 8 && fgets(lines[k], sizeof lines[k], g))
            if (!strstr(lines[k], "call=fused")) k++;
        if (g) fclose(g);
        g = fopen(path, "w");
        for (int i = 0; g && i < k; i++) fputs(lines[i], g);
        if (g) fclose(g);
    }

    /* the same key again replaces the line */
    kiln_algo_entry e1b = entry(e1.key, 0, 1, 8192, 0.0625f);
    CHECK(kiln_algo_cache_store(path, me, &e1b) == 0, "replace");
    CHECK(count_lines(path) == 4, "header + 3 entries, got %d lines", count_lines(path));
    n = 0;
    CHECK(kiln_algo_cache_load(path, me, &list, &n, &cap) == 2, "still two");
    a = kiln_algo_cache_find(list, n, e1.key);
    CHECK(a && a->algo == 0 && a->bytes == 8192, "replaced in place");
    n = 0;
    CHECK(kiln_algo_cache_load(path, other, &list, &n, &cap) == 1 && list[0].algo == 7, "the other GPU's line kept");

    /* garbage of every kind, then a line cut short by a crash */
    FILE *f = fopen(path, "a");
    CHECK(f != NULL, "append");
    if (f) {
        fputs("garbage\n", f);
        fputs("\n|||\n", f);
        fputs("NVIDIA H200|91900|fwd bad algo|algo=999 math=1 bytes=0 ms=0\n", f);
        fputs("NVIDIA H200|91900|fwd bad ms|algo=1 math=1 bytes=0 ms=nan\n", f);
        fputs("NVIDIA H200|91900|fwd trailing|algo=1 math=1 bytes=0 ms=0 extra\n", f);
        fputs("NVIDIA H200|91900|fwd bad fused|algo=1 math=1 bytes=0 ms=0 fused=2\n", f);
        fputs("NVIDIA H200|91900|fwd fused trailing|algo=1 math=1 bytes=0 ms=0 fused=1 x\n", f);
        fputs("NVIDIA H200|9a900|fwd bad version|algo=1 math=1 bytes=0 ms=0\n", f);
        fputs("NVIDIA H200|91900|fwd two|keys|algo=1 math=1 bytes=0 ms=0\n", f);
        for (int i = 0; i < 3000; i++) fputc('x', f);
        fputs("|algo=1 math=1 bytes=0 ms=0\n", f);
        fputs("NVIDIA H200|91900|fwd cut|algo=1 math=1 bytes=10", f);
        fclose(f);
    }
    n = 0;
    CHECK(kiln_algo_cache_load(path, me, &list, &n, &cap) == 2 && n == 2, "bad lines ignored: %d entries", n);
    CHECK(!kiln_algo_cache_find(list, n, "fwd cut"), "a line without its newline is not trusted");
    kiln_algo_entry e4 = entry("fwd f16 new", 2, 1, 0, 1.f);
    CHECK(kiln_algo_cache_store(path, me, &e4) == 0, "store over a corrupt file");
    CHECK(count_lines(path) == 5, "the rewrite drops bad lines: %d lines", count_lines(path));
    n = 0;
    CHECK(kiln_algo_cache_load(path, me, &list, &n, &cap) == 3, "three entries after the rewrite");

    /* a key that would break the format, and a place that cannot be written */
    kiln_algo_entry bad = entry("fwd a|b", 1, 1, 0, 0.f);
    CHECK(kiln_algo_cache_store(path, me, &bad) != 0, "a key with '|' is refused");
    CHECK(kiln_algo_cache_store("/proc/kiln-no/cudnn-algos.txt", me, &e1) != 0, "an unwritable place fails cleanly");
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    CHECK(access(tmp, F_OK) != 0, "no temporary file left behind");
    free(list);
}

int main(void) {
    char dir[] = "/tmp/kiln-algo-cache-XXXXXX";
    if (!mkdtemp(dir)) {
        printf("FAIL: mkdtemp\n");
        return 1;
    }
    test_paths();
    test_file(dir);
    const char *left[] = {"a/b/cudnn-algos.txt", "a/b", "a", ""};
    for (int i = 0; i < 4; i++) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, left[i]);
        remove(path);
    }
    printf("%s\n", fails ? "FAILED" : "all algorithm cache checks passed");
    return fails ? 1 : 0;
}

/*
 * algo_cache.c — the on-disk cache of cuDNN algorithm choices (see algo_cache.h).
 *
 * One line per choice, readable and safe to edit or delete:
 *
 *   NVIDIA H200|91900|fwd f16 x=NHWC:256x64x56x56 w=NHWC:... ws<=536870912 ...|algo=1 math=1 bytes=0 ms=0.0412
 *
 * Choices timed on cuDNN's fused call (conv + bias + activation + residual) end with
 * " fused=1" (run fused) or " fused=0" (run as a convolution and an epilogue kernel).
 *
 * GPU model | cuDNN version | problem | choice. Finding an algorithm times every candidate
 * (a second or more for a ResNet), so choices outlive the process; the GPU name and the
 * library version scope them, since either changes which algorithm is fastest. Lines
 * are only trusted when complete: a line without its newline (a write cut short) or with
 * anything unexpected is ignored, and dropped the next time the file is written.
 */
#include "algo_cache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LINE_MAX_LEN 1024

void kiln_algo_cache_prefix(char *buf, size_t n, const char *gpu, long version) {
    int k = snprintf(buf, n, "%s|%ld|", gpu, version);
    if (k < 0) return;
    /* only the GPU name can hold odd characters; the two separators are the last '|'s */
    size_t name_len = strlen(gpu) < n ? strlen(gpu) : n - 1;
    for (size_t i = 0; i < name_len && buf[i]; i++)
        if (buf[i] == '|' || (unsigned char)buf[i] < 0x20 || buf[i] == 0x7f) buf[i] = '_';
}

kiln_algo_entry *kiln_algo_cache_find(kiln_algo_entry *list, int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (strcmp(list[i].key, key) == 0) return &list[i];
    return NULL;
}

kiln_algo_entry *kiln_algo_cache_put(kiln_algo_entry **list, int *n, int *cap, const kiln_algo_entry *e) {
    kiln_algo_entry *old = kiln_algo_cache_find(*list, *n, e->key);
    if (old) {
        *old = *e;
        return old;
    }
    if (*n == *cap) {
        int nc = *cap ? 2 * *cap : 32;
        kiln_algo_entry *grown = realloc(*list, (size_t)nc * sizeof *grown);
        if (!grown) return NULL;
        *list = grown;
        *cap = nc;
    }
    (*list)[*n] = *e;
    return &(*list)[(*n)++];
}

/* Parse one complete line (without its newline): "<prefix><key>|<choice>". The prefix is
 * everything up to the second '|'; *key_at is where the key starts. */
static bool parse_line(const char *line, size_t *key_at, kiln_algo_entry *e) {
    const char *bar1 = strchr(line, '|');
    const char *bar2 = bar1 ? strchr(bar1 + 1, '|') : NULL;
    const char *bar3 = bar2 ? strrchr(bar2 + 1, '|') : NULL;
    if (!bar3 || bar3 == bar2 + 1 || (size_t)(bar3 - (bar2 + 1)) >= KILN_ALGO_KEY) return false;
    for (const char *p = bar1 + 1; p < bar2; p++)
        if (*p < '0' || *p > '9') return false;
    if (bar2 == bar1 + 1 || strchr(bar2 + 1, '|') != bar3) return false; /* one key field */
    memset(e, 0, sizeof *e);
    memcpy(e->key, bar2 + 1, (size_t)(bar3 - (bar2 + 1)));
    unsigned long long bytes = 0;
    int consumed = 0;
    if (sscanf(bar3 + 1, "algo=%d math=%d bytes=%llu ms=%f%n", &e->algo, &e->math, &bytes, &e->ms, &consumed) != 4)
        return false;
    e->fused = -1;
    const char *rest = bar3 + 1 + consumed;
    if (*rest) {
        int fused = -1, more = 0;
        if (sscanf(rest, " fused=%d%n", &fused, &more) != 1 || rest[more] != '\0' || (fused != 0 && fused != 1))
            return false;
        e->fused = fused;
    }
    if (e->algo < 0 || e->algo > 63 || e->math < 0 || e->math > 7 || !(e->ms >= 0) || bytes > (1ull << 48))
        return false;
    e->bytes = (size_t)bytes;
    *key_at = (size_t)(bar2 + 1 - line);
    return true;
}

/* Call fn(line, key_at, entry, arg) for every well-formed line of f. */
static int each_line(FILE *f, int (*fn)(const char *, size_t, const kiln_algo_entry *, void *), void *arg) {
    char line[LINE_MAX_LEN + 2];
    while (fgets(line, sizeof line, f)) {
        size_t len = strlen(line);
        if (len == 0 || line[len - 1] != '\n') {
            /* too long (skip the rest of it) or cut short at the end of the file */
            int ch = 0;
            if (len == sizeof line - 1)
                while ((ch = fgetc(f)) != EOF && ch != '\n') {}
            continue;
        }
        line[len - 1] = '\0';
        if (line[0] == '#') continue;
        kiln_algo_entry e;
        size_t key_at = 0;
        if (!parse_line(line, &key_at, &e)) continue;
        if (fn(line, key_at, &e, arg) < 0) return -1;
    }
    return 0;
}

typedef struct load_arg {
    const char *prefix;
    kiln_algo_entry **list;
    int *n, *cap, added;
} load_arg;

static int load_one(const char *line, size_t key_at, const kiln_algo_entry *e, void *arg) {
    load_arg *a = arg;
    const size_t pl = strlen(a->prefix);
    if (key_at != pl || strncmp(line, a->prefix, pl) != 0) return 0;
    if (!kiln_algo_cache_put(a->list, a->n, a->cap, e)) return -1;
    a->added++;
    return 0;
}

int kiln_algo_cache_load(const char *path, const char *prefix, kiln_algo_entry **list, int *n, int *cap) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    load_arg a = {prefix, list, n, cap, 0};
    int r = each_line(f, load_one, &a);
    fclose(f);
    return r < 0 ? -1 : a.added;
}

typedef struct copy_arg {
    FILE *out;
    const char *prefix, *key;
} copy_arg;

static int copy_one(const char *line, size_t key_at, const kiln_algo_entry *e, void *arg) {
    copy_arg *a = arg;
    const size_t pl = strlen(a->prefix);
    if (key_at == pl && strncmp(line, a->prefix, pl) == 0 && strcmp(e->key, a->key) == 0) return 0;
    return fprintf(a->out, "%s\n", line) < 0 ? -1 : 0;
}

/* mkdir -p of the directory part of path */
static int make_dirs(const char *path) {
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir) {
        errno = ENAMETOOLONG;
        return -1;
    }
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return 0;
    *slash = '\0';
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return -1;
    return 0;
}

int kiln_algo_cache_store(const char *path, const char *prefix, const kiln_algo_entry *e) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (strchr(e->key, '|') || strchr(e->key, '\n')) {
        errno = EINVAL;
        return -1;
    }
    if (make_dirs(path) != 0) return -1;
    FILE *out = fopen(tmp, "w");
    if (!out) return -1;
    int r = fprintf(out, "# kiln: cuDNN algorithm choices (GPU|cuDNN version|problem|choice); safe to delete\n") < 0
                ? -1
                : 0;
    FILE *in = fopen(path, "r");
    if (in) {
        copy_arg a = {out, prefix, e->key};
        if (r == 0) r = each_line(in, copy_one, &a);
        fclose(in);
    }
    if (r == 0 && fprintf(out, "%s%s|algo=%d math=%d bytes=%llu ms=%.6g", prefix, e->key, e->algo, e->math,
                          (unsigned long long)e->bytes, (double)e->ms) < 0)
        r = -1;
    if (r == 0 && e->fused >= 0 && fprintf(out, " fused=%d", e->fused > 0) < 0) r = -1;
    if (r == 0 && fputc('\n', out) == EOF) r = -1;
    if (fflush(out) != 0) r = -1;
    if (r == 0 && fsync(fileno(out)) != 0) r = -1;
    if (fclose(out) != 0) r = -1;
    if (r == 0 && rename(tmp, path) != 0) r = -1;
    if (r != 0) {
        int saved = errno;
        remove(tmp);
        errno = saved;
    }
    return r;
}

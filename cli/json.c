/*
 * --json: a small JSON writer (no dependency), atomic file output and the pieces the
 * commands share (docs/json.md describes the documents).
 */
#include "report.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KJ_MAX_DEPTH 32

struct kj {
    char *buf;
    size_t len, cap;
    int depth;
    bool first[KJ_MAX_DEPTH]; /* no member written yet at this depth */
    bool inline_[KJ_MAX_DEPTH];
    char kind[KJ_MAX_DEPTH]; /* '{' or '[' */
    bool oom, bad; /* out of memory; misuse (too deep, unbalanced) */
};

kj *kj_new(void) { return calloc(1, sizeof(kj)); }

void kj_free(kj *w) {
    if (!w) return;
    free(w->buf);
    free(w);
}

static void put(kj *w, const char *s, size_t n) {
    if (w->oom) return;
    if (w->len + n + 1 > w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        while (w->len + n + 1 > cap) cap *= 2;
        char *b = realloc(w->buf, cap);
        if (!b) {
            w->oom = true;
            return;
        }
        w->buf = b;
        w->cap = cap;
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = 0;
}

static void puts_(kj *w, const char *s) { put(w, s, strlen(s)); }

static void putf(kj *w, const char *fmt, ...) {
    char b[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    if (n > 0) put(w, b, (size_t)n < sizeof b ? (size_t)n : sizeof b - 1);
}

/* The length of a valid UTF-8 sequence at s (1-4), or 0 (not UTF-8: overlong, surrogate,
 * past U+10FFFF, truncated). */
static int utf8_len(const unsigned char *s) {
    const unsigned c = s[0];
    int n;
    unsigned cp;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07;
    else return 0;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return n;
}

static void put_string(kj *w, const char *s) {
    put(w, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        const unsigned char c = *p;
        if (c == '"' || c == '\\') {
            const char e[2] = {'\\', (char)c};
            put(w, e, 2);
            p++;
        } else if (c < 0x20 || c == 0x7F) {
            const char *named = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r" : NULL;
            if (named) puts_(w, named);
            else putf(w, "\\u%04x", c);
            p++;
        } else {
            const int n = utf8_len(p);
            if (n) put(w, (const char *)p, (size_t)n);
            else puts_(w, "\\ufffd");
            p += n ? n : 1;
        }
    }
    put(w, "\"", 1);
}

/* Before a value: the comma, the line break and indent, the key. */
static void member(kj *w, const char *key) {
    if (w->depth > 0) {
        const int d = w->depth - 1;
        if (!w->first[d]) put(w, ",", 1);
        if (w->inline_[d]) {
            if (!w->first[d]) put(w, " ", 1);
        } else {
            put(w, "\n", 1);
            for (int i = 0; i < w->depth; i++) put(w, "  ", 2);
        }
        w->first[d] = false;
    } else if (w->len) {
        w->bad = true; /* a second top-level value */
    }
    if (key) {
        put_string(w, key);
        put(w, ": ", 2);
    }
}

static void open_(kj *w, const char *key, char ch, bool inl) {
    member(w, key);
    put(w, &ch, 1);
    if (w->depth >= KJ_MAX_DEPTH) {
        w->bad = true;
        return;
    }
    w->first[w->depth] = true;
    w->kind[w->depth] = ch;
    w->inline_[w->depth] = inl || (w->depth > 0 && w->inline_[w->depth - 1]);
    w->depth++;
}

void kj_obj(kj *w, const char *key) { open_(w, key, '{', false); }
void kj_obj1(kj *w, const char *key) { open_(w, key, '{', true); }
void kj_arr(kj *w, const char *key) { open_(w, key, '[', false); }
void kj_arr1(kj *w, const char *key) { open_(w, key, '[', true); }

void kj_end(kj *w) {
    if (w->depth <= 0) {
        w->bad = true;
        return;
    }
    w->depth--;
    const bool empty = w->first[w->depth];
    if (!w->inline_[w->depth] && !empty) {
        put(w, "\n", 1);
        for (int i = 0; i < w->depth; i++) put(w, "  ", 2);
    }
    const char close = w->kind[w->depth] == '{' ? '}' : ']';
    put(w, &close, 1);
    if (w->depth == 0) put(w, "\n", 1);
}

void kj_num(kj *w, const char *key, double v) {
    member(w, key);
    if (!isfinite(v)) puts_(w, "null");
    else if (v == floor(v) && fabs(v) < 1e15) putf(w, "%.0f", v);
    else { /* the shortest of 15 or 17 digits that reads back as v */
        char b[40];
        snprintf(b, sizeof b, "%.15g", v);
        if (strtod(b, NULL) != v) snprintf(b, sizeof b, "%.17g", v);
        puts_(w, b);
    }
}

void kj_int(kj *w, const char *key, long long v) {
    member(w, key);
    putf(w, "%lld", v);
}

void kj_str(kj *w, const char *key, const char *s) {
    member(w, key);
    if (s) put_string(w, s);
    else puts_(w, "null");
}

void kj_bool(kj *w, const char *key, bool v) {
    member(w, key);
    puts_(w, v ? "true" : "false");
}

void kj_null(kj *w, const char *key) {
    member(w, key);
    puts_(w, "null");
}

void kj_head(kj *w, const char *schema, int version) {
    kj_str(w, "schema", schema);
    kj_int(w, "schema_version", version);
    kj_str(w, "kiln_version", kiln_version());
}

void kj_profile(kj *w, const char *key, const kiln_profile *p) {
    kj_obj(w, key);
    kj_int(w, "passes", p->iters);
    kj_num(w, "sum_of_nodes_ms", p->total_ms);
    kj_arr(w, "nodes");
    for (int i = 0; i < p->n; i++) {
        const kiln_profile_node *n = &p->nodes[i];
        const double sec = n->ms * 1e-3;
        kj_obj1(w, NULL);
        kj_int(w, "index", i);
        kj_str(w, "op", n->op_type);
        kj_str(w, "name", n->name);
        kj_str(w, "shapes", n->shapes);
        kj_num(w, "median_ms", n->ms);
        kj_num(w, "share", p->total_ms > 0 ? n->ms / p->total_ms : NAN);
        kj_num(w, "flops", n->flops);
        kj_num(w, "bytes", n->bytes);
        kj_num(w, "tflop_per_s", sec > 0 && n->flops > 0 ? n->flops / sec / 1e12 : NAN);
        kj_num(w, "gb_per_s", sec > 0 && n->bytes > 0 ? n->bytes / sec / 1e9 : NAN);
        kj_end(w);
    }
    kj_end(w);
    kj_end(w);
}

/* ------------------------------------------------------------------ output */

static int json_stdout = -1; /* the standard output kept by kj_claim_stdout */

int kj_claim_stdout(const char *cmd) {
    if (json_stdout >= 0) return 0;
    fflush(stdout);
    json_stdout = dup(STDOUT_FILENO);
    if (json_stdout < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
        fprintf(stderr, "kiln %s: --json -: cannot redirect the text report: %s\n", cmd, strerror(errno));
        return 1;
    }
    return 0;
}

static int write_all(int fd, const char *p, size_t n) {
    while (n) {
        const ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int kj_write(kj *w, const char *path, const char *cmd) {
    if (w->oom) {
        fprintf(stderr, "kiln %s: out of memory building the JSON report\n", cmd);
        return 1;
    }
    if (w->bad || w->depth != 0) {
        fprintf(stderr, "kiln %s: internal error: the JSON report is not well formed\n", cmd);
        return 1;
    }
    fflush(stdout);
    if (strcmp(path, "-") == 0) {
        const int fd = json_stdout >= 0 ? json_stdout : STDOUT_FILENO;
        if (write_all(fd, w->buf, w->len)) {
            fprintf(stderr, "kiln %s: writing the JSON report to the standard output: %s\n", cmd, strerror(errno));
            return 1;
        }
        return 0;
    }
    const size_t n = strlen(path) + 32;
    char *tmp = malloc(n);
    if (!tmp) {
        fprintf(stderr, "kiln %s: out of memory\n", cmd);
        return 1;
    }
    snprintf(tmp, n, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    int rc = 0;
    if (!f) {
        fprintf(stderr, "kiln %s: cannot write %s: %s\n", cmd, tmp, strerror(errno));
        free(tmp);
        return 1;
    }
    const bool ok = fwrite(w->buf, 1, w->len, f) == w->len;
    const int err = errno;
    if (fclose(f) != 0 || !ok) {
        fprintf(stderr, "kiln %s: error writing %s: %s\n", cmd, tmp, strerror(ok ? errno : err));
        rc = 1;
    } else if (rename(tmp, path) != 0) {
        fprintf(stderr, "kiln %s: cannot rename %s to %s: %s\n", cmd, tmp, path, strerror(errno));
        rc = 1;
    }
    if (rc) remove(tmp);
    free(tmp);
    return rc;
}

/* -------------------------------------------------------------- training log */

void train_log_step(train_log *l, int64_t step, int64_t epoch, double loss, double lr) {
    if (l->oom) return;
    if (l->n_steps == l->cap_steps) {
        const size_t cap = l->cap_steps ? 2 * l->cap_steps : 1024;
        train_step_rec *p = realloc(l->steps, cap * sizeof *p);
        if (!p) {
            l->oom = true;
            return;
        }
        l->steps = p;
        l->cap_steps = cap;
    }
    l->steps[l->n_steps++] = (train_step_rec){.step = step, .epoch = epoch, .loss = loss, .lr = lr};
}

void train_log_epoch(train_log *l, const train_epoch_rec *e) {
    if (l->oom) return;
    if (l->n_epochs == l->cap_epochs) {
        const size_t cap = l->cap_epochs ? 2 * l->cap_epochs : 16;
        train_epoch_rec *p = realloc(l->epochs, cap * sizeof *p);
        if (!p) {
            l->oom = true;
            return;
        }
        l->epochs = p;
        l->cap_epochs = cap;
    }
    l->epochs[l->n_epochs++] = *e;
}

void train_log_free(train_log *l) {
    free(l->steps);
    free(l->epochs);
    *l = (train_log){0};
}

/* --------------------------------------------------------- the commands' documents */

double report_pct(const double *sorted, int n, double q) {
    int i = (int)(q * (n - 1) + 0.5);
    return sorted[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* min, percentiles, max and mean of n sorted times in ms */
static void kj_times(kj *w, const char *key, const double *v, int n) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += v[i];
    kj_obj1(w, key);
    kj_int(w, "samples", n);
    kj_num(w, "min_ms", v[0]);
    kj_num(w, "median_ms", report_pct(v, n, 0.5));
    kj_num(w, "p90_ms", report_pct(v, n, 0.9));
    kj_num(w, "p95_ms", report_pct(v, n, 0.95));
    kj_num(w, "p99_ms", report_pct(v, n, 0.99));
    kj_num(w, "max_ms", v[n - 1]);
    kj_num(w, "mean_ms", sum / n);
    kj_end(w);
}

static void kj_shape(kj *w, const char *key, int nd, const int64_t *dims) {
    kj_arr1(w, key);
    for (int d = 0; d < nd; d++) {
        if (dims[d] < 0) kj_null(w, NULL);
        else kj_int(w, NULL, dims[d]);
    }
    kj_end(w);
}

static void kj_tensor(kj *w, const char *key, const char *name, const char *path, const kiln_tensor *t) {
    int64_t dims[KILN_MAX_DIMS];
    const int nd = kiln_tensor_ndim(t);
    for (int d = 0; d < nd; d++) dims[d] = kiln_tensor_dim(t, d);
    kj_obj1(w, key);
    kj_str(w, "name", name);
    if (path) kj_str(w, "file", path);
    kj_str(w, "dtype", kiln_dtype_name(kiln_tensor_dtype(t)));
    kj_shape(w, "shape", nd, dims);
    kj_end(w);
}

static void kj_plan(kj *w, const kiln_plan_stats *ps) {
    kj_obj(w, "plan");
    kj_int(w, "nodes_run", ps->nodes);
    kj_int(w, "nodes_folded", ps->folded);
    kj_int(w, "arena_bytes", (long long)ps->arena_bytes);
    kj_int(w, "one_buffer_per_value_bytes", (long long)ps->naive_bytes);
    kj_int(w, "constant_bytes", (long long)ps->constant_bytes);
    kj_int(w, "workspace_bytes", (long long)ps->workspace_bytes);
    kj_end(w);
}

void json_bench(kj *w, const bench_facts *f) {
    const bool cuda = strcmp(f->device, "cuda") == 0;
    const kiln_bench_times *t = f->times;
    kj_obj(w, NULL);
    kj_head(w, "kiln-bench", 1);
    kj_str(w, "model", f->model_path);
    kj_str(w, "device", f->device);
    kj_str(w, "precision", f->precision);
    kj_int(w, "batch", f->batch);
    kj_int(w, "iters", f->iters);
    kj_int(w, "warmup", f->warmup);
    kj_int(w, "threads", f->threads);
    kj_int(w, "disabled_passes_mask", f->disabled_passes);
    kj_arr(w, "inputs");
    for (int i = 0; i < f->n_inputs; i++) kj_tensor(w, NULL, kiln_model_input_name(f->model, i), NULL, f->inputs[i]);
    kj_end(w);
    kj_plan(w, f->plan);
    kj_num(w, "import_ms", f->import_ms);
    kj_num(w, "first_run_ms", t->first_ms);
    kj_times(w, "run_ms", t->run_ms, f->iters);
    kj_times(w, "compute_ms", t->compute_ms, f->iters);
    if (cuda) {
        kj_num(w, "host_to_device_ms", t->h2d_ms);
        kj_num(w, "device_to_host_ms", t->d2h_ms);
    } else {
        kj_null(w, "host_to_device_ms");
        kj_null(w, "device_to_host_ms");
    }
    kj_num(w, "throughput_per_s", (double)f->batch * 1000.0 / report_pct(t->compute_ms, f->iters, 0.5));
}

void json_run(kj *w, const run_facts *f) {
    kj_obj(w, NULL);
    kj_head(w, "kiln-run", 1);
    kj_str(w, "model", f->model_path);
    kj_str(w, "device", f->device);
    kj_str(w, "precision", f->precision);
    kj_num(w, "load_ms", f->load_ms);
    kj_num(w, "first_run_ms", f->first_run_ms);
    kj_plan(w, f->plan);
    kj_arr(w, "inputs");
    for (int i = 0; i < f->n_inputs; i++)
        kj_tensor(w, NULL, kiln_model_input_name(f->model, i), f->input_paths[i], f->inputs[i]);
    kj_end(w);
    kj_arr(w, "outputs");
    for (int i = 0; i < f->n_outputs; i++)
        kj_tensor(w, NULL, kiln_model_output_name(f->model, i), f->output_paths[i], f->outputs[i]);
    kj_end(w);
    kj_end(w);
}

void json_train(kj *w, const train_facts *f) {
    const train_log *l = f->log;
    if (l->oom) w->oom = true; /* a record missing: no document rather than a wrong one */
    kj_obj(w, NULL);
    kj_head(w, "kiln-train", 1);
    kj_obj(w, "config");
    kj_str(w, "model", f->model);
    kj_str(w, "data", f->data);
    kj_str(w, "device", f->device);
    kj_str(w, "amp", f->amp);
    kj_int(w, "epochs", f->epochs);
    kj_int(w, "batch", f->batch);
    kj_int(w, "accumulate", f->accumulate);
    if (f->max_steps) kj_int(w, "max_steps", f->max_steps);
    else kj_null(w, "max_steps");
    kj_int(w, "seed", (long long)f->seed);
    kj_num(w, "lr", f->lr);
    kj_bool(w, "dropout", f->dropout);
    kj_bool(w, "shuffle", f->shuffle);
    kj_int(w, "threads", f->threads);
    kj_str(w, "save", f->save);
    kj_str(w, "resume", f->resume);
    kj_str(w, "init", f->init);
    kj_end(w);
    if (f->init) kj_int(w, "init_tensors", f->init_tensors);
    kj_int(w, "param_count", f->param_count);
    kj_int(w, "steps_per_epoch", f->steps_per_epoch);
    kj_num(w, "setup_ms", f->setup_ms);
    kj_num(w, "warmup_ms", f->warmup_ms);
    if (f->resume) {
        kj_obj1(w, "resumed_at");
        kj_int(w, "epoch", f->resume_epoch + 1);
        kj_int(w, "step_in_epoch", f->resume_step);
        kj_end(w);
    }
    kj_arr(w, "epochs");
    for (size_t i = 0; i < l->n_epochs; i++) {
        const train_epoch_rec *e = &l->epochs[i];
        kj_obj1(w, NULL);
        kj_int(w, "epoch", e->epoch);
        kj_int(w, "steps", e->steps);
        kj_int(w, "end_step", e->end_step);
        kj_num(w, "time_s", e->time_s);
        kj_num(w, "steps_per_s", e->steps_per_s);
        kj_num(w, "last_loss", e->last_loss);
        kj_num(w, "test_accuracy", e->test_accuracy);
        kj_num(w, "data_wait_s", e->data_wait_s);
        kj_num(w, "data_img_s", e->data_img_s);
        kj_end(w);
    }
    kj_end(w);
    kj_arr(w, "steps");
    for (size_t i = 0; i < l->n_steps; i++) {
        const train_step_rec *s = &l->steps[i];
        kj_obj1(w, NULL);
        kj_int(w, "step", s->step);
        kj_int(w, "epoch", s->epoch);
        kj_num(w, "loss", s->loss);
        kj_num(w, "lr", s->lr);
        kj_end(w);
    }
    kj_end(w);
    kj_obj(w, "final");
    int64_t run = 0;
    for (size_t i = 0; i < l->n_epochs; i++) run += l->epochs[i].steps;
    kj_int(w, "steps_run", run);
    kj_num(w, "test_accuracy", f->test_accuracy);
    kj_num(w, "last_loss", l->n_epochs ? l->epochs[l->n_epochs - 1].last_loss : NAN);
    kj_int(w, "optimizer_steps", f->stats->steps);
    kj_int(w, "micro_steps", f->stats->micro_steps);
    kj_int(w, "skipped_steps", f->stats->skipped_steps);
    kj_num(w, "next_lr", f->stats->lr);
    kj_num(w, "loss_scale", f->stats->loss_scale);
    kj_end(w);
}

void json_ablation_begin(kj *w, const char *model, const char *device, int64_t batch, int iters) {
    kj_obj(w, NULL);
    kj_head(w, "kiln-bench-ablation", 1);
    kj_str(w, "model", model);
    kj_str(w, "device", device);
    kj_int(w, "batch", batch);
    kj_int(w, "iters", iters);
    kj_arr(w, "rows");
}

void json_ablation_row(kj *w, const char *technique_off, double per_s) {
    kj_obj1(w, NULL);
    kj_str(w, "variant", technique_off); /* "all on", "all off" or the one technique off */
    kj_num(w, "throughput_per_s", per_s);
    kj_end(w);
}

int json_ablation_end(kj *w, double speedup, const char *path) {
    kj_end(w);
    kj_num(w, "all_on_over_all_off", speedup);
    kj_end(w);
    return kj_write(w, path, "bench");
}

double train_lr(const kiln_trainer *t) {
    kiln_train_stats s;
    return kiln_trainer_stats(t, &s) == KILN_OK ? s.lr : NAN;
}

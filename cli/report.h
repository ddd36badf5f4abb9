/*
 * The command line's machine-readable reports (--json, cli/json.c) and pictures (--plot,
 * cli/plot.c). The schemas are documented in docs/json.md; a change that removes or
 * renames a key, or changes its meaning or unit, raises the schema's version.
 */
#ifndef KILN_CLI_REPORT_H
#define KILN_CLI_REPORT_H

#include "kiln.h"
#include "kiln_tools.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- JSON writer */

/* A JSON document built in memory: objects and arrays nest; inside an object every value
 * has a key, inside an array none (key NULL). Strings are escaped (quotes, backslashes,
 * control characters; bytes that are not UTF-8 become U+FFFD); numbers that are not
 * finite are written as null. Out of memory is remembered and reported by kj_write. */
typedef struct kj kj;
typedef struct train_log train_log;
kj *kj_new(void);
void kj_free(kj *w);
void kj_obj(kj *w, const char *key);  /* { ... } over several lines */
void kj_obj1(kj *w, const char *key); /* { ... } on one line (records of long arrays) */
void kj_arr(kj *w, const char *key);
void kj_arr1(kj *w, const char *key);
void kj_end(kj *w); /* closes the innermost object or array */
void kj_num(kj *w, const char *key, double v);
void kj_int(kj *w, const char *key, long long v);
void kj_str(kj *w, const char *key, const char *s); /* NULL: null */
void kj_bool(kj *w, const char *key, bool v);
void kj_null(kj *w, const char *key);
/* The common head of every document: "schema", "schema_version", "kiln_version". */
void kj_head(kj *w, const char *schema, int version);

/* `--json -` writes the document to the standard output: call this before any text is
 * printed, and the text report goes to the standard error instead (so that the standard
 * output holds one JSON document). 0, or 1 after saying why not. */
int kj_claim_stdout(const char *cmd);
/* Writes the document (all containers closed) to path: a temporary file beside it renamed
 * over it, so a reader never sees half a file; "-": the standard output kept by
 * kj_claim_stdout. 0, or 1 after saying what failed. */
int kj_write(kj *w, const char *path, const char *cmd);

/* JSON of a per-node profile (bench --profile, train --profile): the rows in run order. */
void kj_profile(kj *w, const char *key, const kiln_profile *p);

/* ------------------------------------------------------ the commands' documents */

/* Percentile q (0..1) of n sorted values, nearest rank (as the text report). */
double report_pct(const double *sorted, int n, double q);

/* kiln bench (schema "kiln-bench"): written as the top object's first members, which the
 * caller closes with kj_end after adding its own ("profile", "trace_file"). */
typedef struct bench_facts {
    const char *model_path, *device, *precision;
    int64_t batch;
    int iters, warmup, threads;
    unsigned disabled_passes;
    const kiln_model *model;
    kiln_tensor *const *inputs;
    int n_inputs;
    double import_ms;
    const kiln_bench_times *times; /* run_ms and compute_ms sorted ascending */
    const kiln_plan_stats *plan;
} bench_facts;
void json_bench(kj *w, const bench_facts *f);
/* kiln bench --ablate (schema "kiln-bench-ablation"): rows named "all on", "all off" or the
 * one technique switched off; end writes the document to path. */
void json_ablation_begin(kj *w, const char *model, const char *device, int64_t batch, int iters);
void json_ablation_row(kj *w, const char *disabled, double per_s);
int json_ablation_end(kj *w, double all_on_over_all_off, const char *path);

/* kiln run (schema "kiln-run"): the whole document. */
typedef struct run_facts {
    const char *model_path, *device, *precision;
    const kiln_model *model;
    int n_inputs, n_outputs;
    const char *const *input_paths, *const *output_paths;
    kiln_tensor *const *inputs;
    const kiln_tensor *const *outputs;
    double load_ms, first_run_ms;
    const kiln_plan_stats *plan;
} run_facts;
void json_run(kj *w, const run_facts *f);

/* kiln train (schema "kiln-train"): the top object's members but the profile's. */
typedef struct train_facts {
    const char *model, *data, *device, *amp, *resume, *save, *init;
    int init_tensors; /* tensors --init loaded */
    int64_t epochs, batch, accumulate, max_steps, steps_per_epoch, param_count;
    int64_t resume_epoch, resume_step; /* where --resume went on from */
    uint64_t seed;
    double lr, setup_ms, warmup_ms; /* warmup_ms: NAN without a warm-up */
    bool dropout, shuffle;
    int threads;
    const train_log *log;
    double test_accuracy;
    const kiln_train_stats *stats; /* at the end */
} train_facts;
void json_train(kj *w, const train_facts *f);

/* ---------------------------------------------------------------- training log */

/* What kiln train reports, kept for --json and --plot: one record per step whose loss was
 * read (every step on the CPU; every 100th and an epoch's last on CUDA), one per epoch. */
typedef struct train_step_rec {
    int64_t step;  /* optimizer-loop step counted from 1 over the whole run (epochs included) */
    int64_t epoch; /* from 1 */
    double loss, lr;
} train_step_rec;
typedef struct train_epoch_rec {
    int64_t epoch, steps; /* steps run in this process (not those a --resume skipped) */
    int64_t end_step;     /* the run's step count at the epoch's end (as train_step_rec.step) */
    double time_s, steps_per_s, last_loss, test_accuracy;
    double data_wait_s, data_img_s; /* the loader: seconds the steps waited, images/s it made (NAN: no loader) */
} train_epoch_rec;
struct train_log {
    train_step_rec *steps;
    size_t n_steps, cap_steps;
    train_epoch_rec *epochs;
    size_t n_epochs, cap_epochs;
    bool oom;
};
void train_log_step(train_log *l, int64_t step, int64_t epoch, double loss, double lr);
void train_log_epoch(train_log *l, const train_epoch_rec *e);
void train_log_free(train_log *l);

/* --------------------------------------------------------------------- plots */

/* Whether kiln was built with cairo (KILN_PLOT). */
bool plot_available(void);
/* kiln train --plot's checks before training: cairo built in, a .png or .svg name; 0, or 2
 * after saying what is wrong. */
int train_plot_check(const char *path);
/* --plot-size WxH: 0, or 2 after saying what is wrong. */
int train_plot_size(const char *arg, int *width, int *height);
/* kiln train's curves, titled with the data set and batch; says where it wrote them. */
int train_plot(const train_log *l, const char *path, int width, int height, const char *data, int64_t batch);
/* The learning rate the trainer's next step takes (for the step records). */
double train_lr(const kiln_trainer *t);
/* The training curves (loss and learning rate per step, test accuracy per epoch) as a PNG
 * or SVG by path's extension, width x height pixels. 0, or 1 after saying what failed. */
int plot_train(const train_log *l, const char *title, const char *path, int width, int height);

#endif

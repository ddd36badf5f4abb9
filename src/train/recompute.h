/*
 * recompute.h — activation checkpointing as a pass over a training graph (forward +
 * backward + update, src/train/trainer.c): forward values produced by cheap ops
 * (BatchNormalization, elementwise ops) and kept alive only for the backward are instead
 * recomputed just before their first backward use, from values stored anyway; with heavy,
 * convolution and product outputs too, scored by their multiply-adds so that they come after
 * every cheap value. The pass recomputes as few of them as it needs for the planned
 * activation arena to fit a budget.
 */
#ifndef KILN_RECOMPUTE_H
#define KILN_RECOMPUTE_H

#include "../core/internal.h"

typedef struct kiln_recompute_result {
    size_t arena_before;  /* the plan's arena without recomputation */
    size_t arena_after;   /* with the recomputations chosen (the smallest reachable when the
                             budget cannot be met) */
    size_t workspace;     /* the largest CPU kernel workspace of the plan */
    int candidates;       /* forward values the pass could recompute */
    int recomputed;       /* of which recomputed */
    double flops;         /* element operations the recomputations add per step */
} kiln_recompute_result;

/* How a candidate training graph is measured: its arena and workspace bytes as the backend
 * will plan it (the CPU session's passes, CUDA's lowered update and side streams). */
typedef kiln_status (*kiln_recompute_measure_fn)(void *user, kiln_model *m, size_t *arena, size_t *workspace);

/* Rewrite m (finalized; the loss is graph output 0), planned for these inputs (shapes; data
 * is read only for inputs whose values set shapes), so that its measured arena fits
 * arena_budget: candidates in order of bytes saved per element operation recomputed, the
 * shortest prefix that fits (binary search over measures). measure NULL: a device plan's
 * arena. *out: the rewritten, finalized model, or NULL when m fits as it is (or arena_budget
 * is 0: only measured). KILN_ERR_OUT_OF_MEMORY (message left to the caller, r filled) when
 * even every candidate recomputed does not fit. max_recompute >= 0 caps the candidates.
 * heavy: convolutions and products are candidates too (after the cheap ones). */
kiln_status kiln_recompute_fit(kiln_model *m, kiln_tensor *const *inputs, kiln_recompute_measure_fn measure,
                               void *user, size_t arena_budget, int max_recompute, bool heavy, kiln_model **out,
                               kiln_recompute_result *r);

/* kiln_trainer_create under kiln_train_options.memory_limit (src/train/memory.c): the
 * trainer's training graph replaced by one with the recomputations that fit, measured with
 * the kernel workspace of the trainer's session (t->sess, if made). A rewritten graph frees
 * that session (it ran the old graph) and leaves t->sess NULL for the caller to make anew. */
kiln_status kiln_trainer_fit_memory(kiln_trainer *t);

#endif

/*
 * kiln_tools.h — what kiln's own tools (the `kiln` command, the benchmarks) use beyond
 * kiln.h: benchmark and profile entry points, the MNIST-format data set and the batch
 * loader, element access in any dtype, starting weights from a safetensors file, and the
 * library part of the ONNX conformance runner.
 *
 * kiln.h's conventions hold (statuses with a message on the context, _free(NULL) does
 * nothing, the library never exits). This header follows what the tools need and may
 * change more often than kiln.h; a program that only loads, runs or trains models needs
 * kiln.h alone.
 */
#ifndef KILN_TOOLS_H
#define KILN_TOOLS_H

#include "kiln.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- tensors */

bool kiln_dtype_is_float(kiln_dtype t); /* f16 bf16 f32 f64 */

/* Element access in any dtype, converting through double / int64. Written for clarity,
 * for reference kernels; fast kernels use typed pointers. Index is the flat index. */
double kiln_get_f64(const kiln_tensor *t, int64_t i);
void kiln_set_f64(kiln_tensor *t, int64_t i, double v);
int64_t kiln_get_i64(const kiln_tensor *t, int64_t i);
void kiln_set_i64(kiln_tensor *t, int64_t i, int64_t v);

/* ------------------------------------------------------ bench and profile */

/* Benchmark one input shape (kiln bench): `warmup` runs, then `iters` timed runs. On the
 * CPU each timed run is a whole run; on CUDA compute times are device events around graph
 * replays with the inputs resident, and transfers are timed once each. Arrays are owned
 * by the caller (iters entries). */
typedef struct kiln_bench_times {
    double first_ms;    /* the first run: planning, autotuning, upload of constants, the run */
    double *run_ms;     /* (iters) end-to-end run: upload + compute + download + sync */
    double *compute_ms; /* (iters) compute only (CUDA: events; CPU: same as run_ms) */
    double h2d_ms, d2h_ms;
} kiln_bench_times;
kiln_status kiln_session_bench(kiln_session *s, int n_inputs, kiln_tensor *const *inputs, int warmup, int iters,
                               kiln_bench_times *t);

/* Per-node profile (kiln bench --profile): every run-list node of the plan for these
 * inputs timed on its own over `iters` passes after `warmup` whole runs. On CUDA the
 * nodes run one by one (no graph) with events around each, the GPU held while the host
 * enqueues a pass so that launch overhead stays out; on the CPU with the host clock.
 * Names point into the session's model (valid while the session lives). */
typedef struct kiln_profile_node {
    const char *op_type, *name;
    char shapes[256];     /* "f32[1,3,224,224] f32[64,3,7,7] -> f32[1,64,112,112]" */
    double ms;            /* median over the passes */
    double start_ms, dur_ms; /* in the traced pass (the pass of median total time) */
    double flops, bytes;  /* kiln_op_cost: products' FLOPs (0 for other ops), bytes in + out */
} kiln_profile_node;
typedef struct kiln_profile {
    int n;
    kiln_profile_node *nodes; /* (n) in run order */
    int iters;
    double total_ms;      /* sum of the nodes' medians */
} kiln_profile;
kiln_status kiln_session_profile(kiln_session *s, int n_inputs, kiln_tensor *const *inputs, int warmup, int iters,
                                 kiln_profile *out);
void kiln_profile_free(kiln_profile *p);

/* Profile of one training step (kiln train --profile) on a batch of `batch` samples of the
 * data set (images (N, ...) f32, labels (N) i64, as kiln_trainer_train_epoch takes):
 *   out: the forward + backward run list, node by node (median of `iters` passes, as
 *        kiln_session_profile), then one row per part of the step outside it;
 *        out->total_ms is the sum of all rows;
 *   *step_ms: the median of `replays` whole steps.
 * On CUDA: the rows are "prologue" (the batch gathered from the data set on the device)
 * and "epilogue" (the fused optimizer, loss scaling, schedule, next Dropout seed), each
 * between CUDA events in the same passes as the nodes; a whole step is one replay of the
 * step's captured CUDA graph, timed with events between back-to-back replays, so
 * step_ms - total_ms is what launches and serialization add. The data set is made
 * resident (as kiln_trainer_train_epoch does) and one untimed step builds the plan.
 * On the CPU: the update is nodes of the training graph, so its rows are among the
 * nodes' (kiln.OptimizerStep, and GradAccumulate / NonFiniteCheck / LossScaleUpdate where
 * the options add them); whole steps on the host clock, on the first `batch` samples.
 * The trainer's state is left as it was: weights, optimizer state, statistics, step
 * counters, learning rate, loss scale and Dropout seed are restored afterwards (the
 * device state is copied aside before and back after). Scratch memory is allocated
 * before the timed passes, never inside them. Names point into the trainer's models
 * and string literals (valid while the trainer lives). */
kiln_status kiln_trainer_profile(kiln_trainer *t, const kiln_tensor *images, const kiln_tensor *labels, int64_t batch,
                                 int iters, int replays, kiln_profile *out, double *step_ms);

/* ------------------------------------------------------------ data sets */

/* The normalization PyTorch's examples use: x_f32 = (x_u8 / 255 - mean) / std. */
#define KILN_MNIST_MEAN 0.1307f
#define KILN_MNIST_STD 0.3081f
#define KILN_FASHION_MNIST_MEAN 0.2860f
#define KILN_FASHION_MNIST_STD 0.3530f

/* An MNIST-format dataset: the train and test splits. */
typedef struct kiln_mnist {
    kiln_tensor *train_images; /* (60000,1,28,28) f32 normalized, or u8 as in the file */
    kiln_tensor *train_labels; /* (60000) i64, each < 10 */
    kiln_tensor *test_images;  /* (10000,1,28,28) */
    kiln_tensor *test_labels;  /* (10000) i64 */
} kiln_mnist;

/* Load DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz (or without .gz when only the
 * plain file exists). image_dtype KILN_F32 normalizes with mean/std (see above);
 * KILN_U8 keeps the raw pixels (a loader can normalize them per batch) and ignores
 * mean/std. Checks that images are 3-D u8, that image and label counts agree and that
 * labels are < 10. On failure *out is left zeroed. */
kiln_status kiln_mnist_load(kiln_context *ctx, const char *dir, kiln_dtype image_dtype,
                            float mean, float std, kiln_mnist *out);
/* Free the four tensors and zero the struct (a zeroed struct is fine). */
void kiln_mnist_free(kiln_mnist *d);

/* ----------------------------------------------------------------- loader */

/* Batch order. Epoch e uses the Fisher-Yates permutation drawn from a splitmix64 stream
 * seeded by (seed, e); step s of epoch e holds samples perm[s*B .. s*B+B). So (seed, e, s)
 * alone determine a batch: runs are reproducible whatever the number of workers, and a
 * run resumes exactly with kiln_loader_seek. Without shuffle, perm is the identity. */
typedef struct kiln_loader_options {
    int64_t batch_size; /* 1 <= B <= N, the data set's size (default 64) */
    bool shuffle;       /* default true */
    uint64_t seed;      /* default 0 */
    bool drop_last;     /* drop the last partial batch (default false, as PyTorch) */
    int workers;        /* threads gathering batches; 0: next() gathers on the caller's thread
                           (default 2) */
    int slots;          /* K batches in the ring, >= 1; at most K-1 are prefetched while the
                           consumer holds one (0: 2*workers + 2) */
    float mean, std;    /* u8 images become (x/255 - mean)/std; f32 images are copied as
                           they are (defaults 0 and 1) */
    /* Optional caller memory for the ring (e.g. pinned host memory for CUDA copies):
     * slot_images[k] holds B * sample_numel floats and slot_labels[k] B int64s, for
     * k < slots. NULL: the loader allocates its own. The caller frees them after
     * kiln_loader_free. */
    float *const *slot_images;
    int64_t *const *slot_labels;
    /* Data-parallel sharding (PyTorch's DistributedSampler): with shard_count W > 1, each
     * epoch's order (the permutation, or the identity without shuffle) is padded with its
     * first samples to a multiple of W (or cut to one with shard_drop), and this loader
     * takes its positions shard_rank, shard_rank + W, ...: every rank the same number of
     * samples, the ranks' batches of a step together the step's batch of one loader with
     * W times the batch. 0: no sharding. */
    int shard_rank, shard_count;
    bool shard_drop;
} kiln_loader_options;

/* The sample order of epoch `epoch` for `seed` (shuffle on): what the loader uses, for
 * callers that gather batches themselves (a dataset resident on the GPU). */
void kiln_loader_permutation(int64_t *perm, int64_t n, uint64_t seed, int64_t epoch);
/* Shard `rank` of `count` of that order (shuffle off: the identity) as the loader takes it
 * (kiln_loader_options.shard_*): written into perm (n entries of room); returns its length,
 * ceil(n / count), or floor(n / count) with drop. */
int64_t kiln_loader_shard(int64_t *perm, int64_t n, uint64_t seed, int64_t epoch, bool shuffle, int rank, int count,
                          bool drop);
/* The same for the rest of an epoch whose first `offset` positions of the order were
 * already consumed (a run resumed mid-epoch, possibly saved by another number of ranks):
 * positions offset + rank, offset + rank + count, ... of the order padded with its first
 * samples (or cut, with drop, to a multiple of count of the n - offset left). Returns
 * ceil((n - offset) / count), or floor with drop; 0 when offset >= n. Offset 0 is
 * kiln_loader_shard. */
int64_t kiln_loader_shard_from(int64_t *perm, int64_t n, uint64_t seed, int64_t epoch, bool shuffle, int rank,
                               int count, bool drop, int64_t offset);

/* The defaults above. */
kiln_loader_options kiln_loader_options_default(void);

/* A batch, living in ring slot `slot` from kiln_loader_next until kiln_loader_release. */
typedef struct kiln_batch {
    int64_t epoch, step;   /* its place in the stream */
    int64_t size;          /* samples: B, or fewer for the last batch of an epoch */
    int slot;              /* ring slot (lets a CUDA caller keep per-slot events/buffers) */
    float *images;         /* (size, <sample dims>) f32, in slot memory */
    int64_t *labels;       /* (size) */
    const int64_t *indices;/* (size) dataset index of each sample */
    kiln_tensor *x;        /* views of images and labels with dims (size, ...) / (size) */
    kiln_tensor *y;
} kiln_batch;

/*
 * A prefetching batch loader.
 *
 * Threads: the loader's workers only read the dataset tensors and write ring slots. The
 * dataset tensors must outlive the loader and not change while it runs. kiln_loader_next,
 * kiln_loader_seek and kiln_loader_free are called from one consumer thread at a time;
 * kiln_loader_release may be called from any thread (e.g. a CUDA host callback that runs
 * once a batch's copy to the device is done), as long as it is not racing the batch's
 * own next or the loader's free. Errors write the context's message, which is not
 * synchronized: give the loader a context no other thread uses at the same time.
 *
 * Memory: everything is allocated by kiln_loader_create; next and release allocate
 * nothing and never fail except on misuse.
 */
typedef struct kiln_loader kiln_loader;

/* images: (N, ...) f32 or u8; labels: (N) i64 or u8. The sample shape is images' dims
 * after the first. Fails when the options are out of range or no batch can be formed. */
kiln_status kiln_loader_create(kiln_context *ctx, const kiln_tensor *images,
                               const kiln_tensor *labels, const kiln_loader_options *opts,
                               kiln_loader **out);
/* Stop the workers (waiting for a batch being gathered) and free everything, including
 * the batches still held: their memory must not be used afterwards. */
void kiln_loader_free(kiln_loader *l);

/* Batches per epoch: ceil(N/B), or floor(N/B) with drop_last. */
int64_t kiln_loader_steps_per_epoch(const kiln_loader *l);
/* Where the next kiln_loader_next is (epoch and step). */
void kiln_loader_position(const kiln_loader *l, int64_t *epoch, int64_t *step);

/* The next batch of the stream (epoch 0 step 0, step 1, ..., then epoch 1 step 0, ...),
 * waiting for a worker if it is not ready. Fails (KILN_ERR_INVALID_ARGUMENT) when the
 * caller already holds every slot. */
kiln_status kiln_loader_next(kiln_loader *l, const kiln_batch **out);
/* Give a batch's slot back to the workers. */
kiln_status kiln_loader_release(kiln_loader *l, const kiln_batch *b);
/* Continue the stream at (epoch, step): for resuming a run. Batches prefetched so far are
 * dropped. The caller must hold no batch. */
kiln_status kiln_loader_seek(kiln_loader *l, int64_t epoch, int64_t step);
/* Resuming on any number of ranks. A position in an epoch that does not depend on the
 * world size or batch: `sample` positions of the epoch's global order consumed (with
 * shard_count W loaders of batch B, after k steps of each: k * B * W, as the shards
 * interleave). kiln_loader_epoch_sample gives it before step `step` of `epoch` (the
 * data set's size from the epoch's last step on); kiln_loader_seek_sample continues the
 * stream there: the rest of that epoch, positions sample .. N-1 of its order, is sharded
 * across this loader's shard_count ranks (kiln_loader_shard_from: every sample once,
 * equal shards, padded or cut as shard_drop says) in batches of this loader's size, and
 * numbered as the epoch's last steps (kiln_loader_position then gives the first of
 * them); later epochs are whole. Sample 0 is kiln_loader_seek(l, epoch, 0); a sample
 * that leaves no batch (>= N, or less than a batch left with drop_last) goes on at the
 * next epoch's start. kiln_loader_seek forgets a resumed epoch. */
kiln_status kiln_loader_seek_sample(kiln_loader *l, int64_t epoch, int64_t sample);
int64_t kiln_loader_epoch_sample(const kiln_loader *l, int64_t epoch, int64_t step);

/* What the loader did since it was created or last reset: wait_s, the seconds
 * kiln_loader_next spent blocked waiting for a batch (or gathering it, without workers);
 * busy_s, the seconds the gathering threads spent on batches (summed over threads);
 * samples and batches gathered. samples / busy_s * workers is the rate the workers can
 * give; wait_s against an epoch's time is how long training waited for data. */
typedef struct kiln_load_stats {
    double wait_s, busy_s;
    int64_t samples, batches;
    int workers;
    /* a streamed image folder decoding on a GPU (kiln_image_stream_options.decode): the
     * decoder ("nvJPEG hardware", "nvJPEG GPU hybrid"; "" when the CPU decodes), images it
     * decoded and images the workers decoded on the CPU instead (progressive, grey, CMYK,
     * PNG, or a batch nvJPEG refused), and the decoding's seconds (host checks, then GPU
     * time per batch, not counting its wait for a free device buffer) */
    char decoder[48];
    int64_t gpu_images, cpu_images;
    double gpu_decode_s;
} kiln_load_stats;
void kiln_loader_stats(kiln_loader *l, kiln_load_stats *out, bool reset);
/* The CUDA stream (cudaStream_t) the consumer's work on a batch's device memory is
 * ordered on (kiln_trainer_stream): a batch on the device (decode KILN_DECODE_GPU) is
 * overwritten only once the work enqueued there before its release is done. Without one
 * the consumer must be done with a batch (e.g. a synchronous session run) before release. */
void kiln_loader_set_stream(kiln_loader *l, void *stream);

/* Host memory for the loader's ring that `device` copies from fastest: page-locked
 * (pinned) memory on CUDA, plain aligned memory on the CPU (or when the build has no CUDA).
 * Free it with kiln_host_free on the same device, after the loader. */
kiln_status kiln_host_alloc(kiln_context *ctx, kiln_device device, size_t bytes, void **out);
void kiln_host_free(kiln_device device, void *p);

/* ------------------------------------------------------------ image folders */

/* Images as decoded: h rows of w pixels of c channels (1 grey, 3 RGB), u8, interleaved. */
typedef struct kiln_image {
    int w, h, c;
    uint8_t *pixels;
} kiln_image;
#define KILN_IMAGE_MAX_SIDE 16384
#define KILN_IMAGE_MAX_PIXELS (1 << 27)

/* Decode a JPEG (libjpeg-turbo) or PNG (libpng) file held in memory, told apart by their
 * signatures. channels 0 keeps the file's (grey 1, colour 3), 1 converts to grey, 3 to RGB.
 * PNG: palettes and low-bit grey are expanded, 16-bit samples cut to 8, alpha dropped (not
 * composited). CMYK JPEGs are KILN_ERR_UNSUPPORTED; damaged or truncated files
 * KILN_ERR_PARSE naming `name` (a JPEG that ends early too; libjpeg's other warnings, such as
 * extraneous bytes before a marker, are let through as PIL does); images over KILN_IMAGE_MAX_SIDE a side or
 * KILN_IMAGE_MAX_PIXELS in all are refused before anything is allocated. */
kiln_status kiln_image_decode(kiln_context *ctx, const void *data, size_t size, const char *name, int channels,
                              kiln_image *out);
/* The evaluation transform: the shorter side resized to `resize` (0: kept), then the centre
 * crop_h x crop_w (0: all), antialiased triangle-filter resampling (PIL's bilinear). */
kiln_status kiln_image_resize_crop(kiln_context *ctx, const kiln_image *in, int resize, int crop_h, int crop_w,
                                   kiln_image *out);
void kiln_image_free(kiln_image *im);

/* A data set in folders, torchvision's ImageFolder layout: DIR/<class>/<image>, classes
 * in name order (label 0 the first), files (.jpg, .jpeg, .png, any case; hidden files and
 * others left out) in name order within a class. Every image is decoded (on `threads`
 * threads) into one u8 tensor (N, C, H, W): C and, without resize and crop, H and W are the
 * first image's, and every other image must match them (an error names the file);
 * with crop, each image's shorter side goes to resize (0: kept) and its centre crop x crop
 * is taken. Errors: no class folders, an empty class folder, an unreadable or damaged
 * image, each naming the path. */
typedef struct kiln_image_folder_options {
    int channels; /* 0: the first image's; 1 or 3 converts */
    int resize;   /* shorter side, before the crop (0: none) */
    int crop;     /* square centre crop (0: none) */
    int threads;  /* decoding threads (0: the cores, at most 8) */
} kiln_image_folder_options;
typedef struct kiln_image_folder {
    kiln_tensor *images; /* u8 (N, C, H, W) */
    kiln_tensor *labels; /* i64 (N) */
    char **class_names;  /* (n_classes) the folder names */
    int n_classes;
} kiln_image_folder;
kiln_status kiln_image_folder_load(kiln_context *ctx, const char *dir, const kiln_image_folder_options *opts,
                                   kiln_image_folder *out);
void kiln_image_folder_free(kiln_image_folder *f);


/* ------------------------------------------- CIFAR-10 and image transforms */

/* CIFAR-10's binary format: DIR/data_batch_1.bin .. data_batch_5.bin (those present, from
 * 1 up) and DIR/test_batch.bin, each a run of 3073-byte records (a label byte < 10, then
 * the 32x32 R, G and B planes). Images u8 (N, 3, 32, 32), labels i64 (N). DIR may also be
 * the folder holding cifar-10-batches-bin/. Errors name the file: a size not a multiple
 * of 3073, a label >= 10, a missing test_batch.bin. On failure *out is left zeroed. */
bool kiln_cifar10_detect(const char *dir);
kiln_status kiln_cifar10_load(kiln_context *ctx, const char *dir, kiln_mnist *out);

/* Image transforms of u8 images (N, C, H, W) (C 1 or 3) into f32 (N, out_c, size, size)
 * normalized per channel as (x/255 - mean[c]) / std[c] (out_c 3 with C 1 repeats the grey
 * plane; out_c 1 with C 3 is refused).
 *   kiln_images_augment (training): torchvision's RandomResizedCrop(size, scale, ratio)
 *     (ten tries of an area share in [scale_min, scale_max] and a log-uniform aspect ratio
 *     in [ratio_min, ratio_max], else the centre crop clamped to the ratio range) resampled
 *     with the triangle filter (PIL's antialiased bilinear), then a horizontal flip with
 *     probability 1/2 (flip on). Random numbers come from (seed, epoch, image index) alone:
 *     the same epoch gives the same images whatever the thread count.
 *   kiln_images_center (evaluation): the shorter side resized to `resize` (0: as it is),
 *     then the centre size x size crop (torchvision's Resize + CenterCrop), no randomness.
 * Images run on OpenMP threads; out must have the right dtype and dims. */
typedef struct kiln_augment_options {
    int size;                   /* output side */
    float scale_min, scale_max; /* 0, 0: 0.08 and 1 */
    float ratio_min, ratio_max; /* 0, 0: 3/4 and 4/3 */
    bool flip;
    float mean[3], std[3];      /* per output channel */
} kiln_augment_options;
kiln_status kiln_images_augment(kiln_context *ctx, const kiln_tensor *images, const kiln_augment_options *o,
                                uint64_t seed, int64_t epoch, kiln_tensor *out);
kiln_status kiln_images_center(kiln_context *ctx, const kiln_tensor *images, int resize,
                               const kiln_augment_options *o, kiln_tensor *out);

/* Streaming image folders: the files of an ImageFolder listed (nothing decoded), then a
 * loader (the batch loader above: same order for a seed, sharding, ring, workers) whose
 * workers read and decode each batch's files and transform each image as it is decoded,
 * for data sets too large to decode into memory.
 *   kiln_image_list_load: DIR/<class>/<file> as kiln_image_folder_load lists them (same
 *     classes, order, labels and errors: no class folders, an empty class folder).
 *   kiln_loader_create_images: batches f32 (B, channels, size, size) and i64 labels.
 *     train: the training transform of kiln_images_augment (RandomResizedCrop of the
 *     decoded image, flip, normalize) with random numbers from (loader seed, epoch, image
 *     index) exactly as kiln_images_augment draws them: on an image of the size
 *     kiln_images_augment gets, the same crop and the same pixels. Otherwise the
 *     evaluation transform (shorter side to resize, 0: kept; centre size x size;
 *     normalize), pixel for pixel what kiln_image_folder_load with resize and crop = size
 *     and then kiln_images_center give. Grey images become RGB (channels 3) and colour
 *     ones grey (channels 1) as kiln_image_decode converts; PNG alpha is dropped.
 *     dct_scale: JPEGs decode at the smallest DCT scale M/8 that still holds the crop at
 *     the output size (no upsampling added): faster for large files, not bit-identical
 *     to a full decode. A file that cannot be read or decoded stops the stream: that
 *     kiln_loader_next fails with the file's error (naming it), and so does every later
 *     one; nothing is skipped silently.
 * The list must outlive the loader. */
typedef struct kiln_image_list {
    char **paths;       /* (n) DIR/<class>/<file> */
    int64_t *labels;    /* (n) */
    int64_t n;
    char **class_names; /* (n_classes) */
    int n_classes;
} kiln_image_list;
kiln_status kiln_image_list_load(kiln_context *ctx, const char *dir, kiln_image_list *out);
void kiln_image_list_free(kiln_image_list *list);
typedef struct kiln_image_stream_options {
    int channels;             /* 1 or 3 */
    bool train;               /* the training transform (aug: size, scale, ratio, flip) */
    int resize;               /* evaluation: the shorter side before the crop (0: kept) */
    bool dct_scale;           /* decode JPEGs at a reduced DCT scale where the crop allows */
    kiln_augment_options aug; /* size, mean and std always; scale, ratio, flip: training */
    /* KILN_DECODE_GPU: JPEGs decoded by nvJPEG on CUDA device device_index (its hardware
     * decoder where the GPU has one) and transformed there (the same boxes as the CPU
     * path, the same triangle filter; decoders differ by a few units of 255 per pixel);
     * batches' x is then a device tensor (B, 3, size, size) f32 (images stays host memory
     * holding only the images decoded on the CPU). Files nvJPEG's batched path does not
     * take go through the CPU path on the workers (kiln_load_stats counts them). 3
     * channels only. nvJPEG missing or no CUDA: KILN_ERR_UNSUPPORTED naming why.
     * KILN_DECODE_AUTO: the GPU when nvJPEG loads, else the CPU (a line says so). */
    int decode;               /* KILN_DECODE_CPU (0), _GPU, _AUTO */
    int device_index;
} kiln_image_stream_options;
enum { KILN_DECODE_CPU = 0, KILN_DECODE_GPU = 1, KILN_DECODE_AUTO = 2 };
/* Whether JPEGs can be decoded on a GPU here (a CUDA build with nvJPEG loadable): false
 * with the reason in why (may be NULL). */
bool kiln_gpu_decode_available(char *why, size_t n);
/* The cudaStream_t a CUDA trainer's steps are ordered on (NULL on the CPU). */
void *kiln_trainer_stream(const kiln_trainer *t);
kiln_status kiln_loader_create_images(kiln_context *ctx, const kiln_image_list *list,
                                      const kiln_image_stream_options *io, const kiln_loader_options *opts,
                                      kiln_loader **out);

/* -------------------------------------------------------------- gradients */

/* The gradient of the scalar graph output `loss` for every parameter a trainer would train
 * (float initializers reaching the loss; not BN running statistics), at m's current
 * weights, for one batch (inputs bind the graph inputs in order): what one
 * kiln_trainer_step computes (BatchNormalization in training mode), on opts' device
 * (opts may be NULL; its optimizer, lr, amp, accumulate and schedule fields are ignored).
 * Read back to f32 precision (src/train/gradients.c says how). m is not changed.
 * out->names[i] is the parameter's initializer name, out->values[i] its gradient (f32, its
 * shape); out->loss the batch's loss. Free with kiln_gradients_free. */
typedef struct kiln_gradients {
    int n;
    char **names;
    kiln_tensor **values;
    float loss;
} kiln_gradients;
kiln_status kiln_model_gradients(kiln_model *m, const char *loss, const kiln_train_options *opts, int n_inputs,
                                 kiln_tensor *const *inputs, kiln_gradients *out);
void kiln_gradients_free(kiln_gradients *g);

/* ------------------------------------------------------- starting weights */

/* Copy every tensor of the safetensors file at path whose name is an initializer of m
 * into that initializer (same dtype and dims required): starting weights by name, e.g.
 * PyTorch's state_dict saved as safetensors. Tensors that name no initializer are left
 * out; *loaded (may be NULL) counts the ones copied. Errors, on m's context, name the file,
 * the tensor and the shapes. */
kiln_status kiln_model_load_weights(kiln_model *m, const char *path, int *loaded);

/* ------------------------------------------------------ optimized models */

/* The model a session with these options runs (opts NULL: the defaults): a finalized copy
 * of m rewritten by kiln's passes (fusions, folded BatchNormalization, the fp16/bf16
 * precision pass, the CUDA layout passes) exactly as kiln_session_create rewrites it, for
 * saving it (kiln_model_save_onnx writes the internal ops as the ONNX ops they stand for:
 * `kiln convert`) or looking at it. Free it with kiln_model_free. */
kiln_status kiln_model_apply_passes(const kiln_model *m, const kiln_session_options *opts, kiln_model **out);

/* ------------------------------------------------ ONNX conformance runner */

/* One ONNX backend test case: a folder with model.onnx and test_data_set_N/ folders of
 * input_K.pb (bound to graph input K) and output_K.pb (compared with graph output K),
 * run through a CPU session on a context of its own.
 *   PASS; SKIP only when kiln reports KILN_ERR_UNSUPPORTED because of an op missing from
 *   the registry, a STRING tensor or a graph input that is a sequence, map or optional
 *   (or, with ops_in_registry, when a node's op is not in
 *   the registry, before anything runs); FAIL for everything else.
 * why (why_size bytes) receives the reason of a SKIP or FAIL: kiln's message, or the
 * output, its max errors, where, and the share of the error budget used. Tolerances by
 * dtype: |x - ref| <= atol + rtol*|ref| with f32 1e-5 / 1e-4, f64 1e-7 / 1e-6, f16
 * 1e-3 / 1e-3, bf16 1e-2 / 1e-2, integers and bool exact; NaN matches only NaN. */
typedef enum kiln_onnx_case_result {
    KILN_ONNX_CASE_PASS,
    KILN_ONNX_CASE_FAIL,
    KILN_ONNX_CASE_SKIP
} kiln_onnx_case_result;
kiln_onnx_case_result kiln_onnx_test_case(const char *dir, bool ops_in_registry, char *why, size_t why_size);

/* The cases a folder names: the folder itself when it holds a model.onnx, else its
 * subfolders that do, sorted by name. *cases is a malloc'd array of *n malloc'd paths
 * (free each, then the array). KILN_ERR_IO when the folder holds no case or cannot be
 * listed, KILN_ERR_OUT_OF_MEMORY; *cases is NULL and *n 0 on failure. */
kiln_status kiln_onnx_test_list(const char *dir, char ***cases, int *n);

/* ------------------------------------------------------------ build facts */

/* What this build of kiln is (kiln --version): whether the CUDA backend is built in, the
 * CUDA runtime and cuDNN versions it was compiled against (CUDART_VERSION, e.g. 12040 for
 * 12.4; CUDNN_VERSION, e.g. 90100 for 9.1.0), and the versions the loaded libraries report
 * (asked without touching a GPU; 0 where unknown, e.g. cuda_driver without a driver). All
 * zero without CUDA. */
typedef struct kiln_build_info {
    bool cuda;
    int cuda_runtime_built, cudnn_built;
    int cuda_runtime, cuda_driver;
    long cudnn;
} kiln_build_info;
void kiln_get_build_info(kiln_build_info *out);

/* The autotune cache file (cuDNN algorithm choices) a CUDA session would read and write:
 * $KILN_CACHE_DIR/cudnn-algos.txt, else $XDG_CACHE_HOME/kiln/cudnn-algos.txt, else
 * $HOME/.cache/kiln/cudnn-algos.txt. False (and no path) when the disk cache is off: an
 * empty KILN_CACHE_DIR, no HOME, or a path that does not fit in n bytes. The same path in
 * a build without CUDA, where nothing writes it. */
bool kiln_autotune_cache_path(char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* KILN_TOOLS_H */

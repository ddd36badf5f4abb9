/*
 * kiln — the command-line tool. The only code in kiln that may exit().
 *
 *   kiln run MODEL.onnx --input x.npy [--input ...] --output y.npy [--output ...]
 *   kiln info MODEL.onnx
 *   kiln convert IN.onnx OUT.onnx [--fp16 ...]
 *   kiln onnx-test DIR...
 *   kiln ops | version | cache show|clear
 *   kiln <command> --help   (usage() below lists the commands; options through getopt_long)
 */
#include "kiln.h"
#include "kiln_models.h"
#include "kiln_tools.h"
#include "launch.h"
#include "onnx_test.h"
#include "report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_IO 64

/* Each command's usage: `kiln CMD --help` prints its entry (stdout, exit 0), a wrong option
 * its entry on stderr (exit 2), `kiln --help` all of them. */
static const struct { const char *name, *text; } commands[] = {
    {"run",
     "  run MODEL.onnx --input X.npy [--input ...] --output Y.npy [--output ...]\n"
     "        [--device cpu|cuda] [--fp32|--fp16|--bf16] [--strict-fp32] [--threads N] [--no-fold] [--stats]\n"
     "        [--json FILE]   (the --stats figures, inputs and outputs as JSON; - for stdout)\n"
     "        [--batch N]   (the inputs in slices of N along their first dim, one plan; outputs joined)\n"
     "        [--disable PASS,...]   (dead-nodes fold-constants fold-bn fuse-conv fuse-eltwise fuse-loss nhwc\n"
     "                                fuse-pool fuse-bn pad-channels cuda-graph autotune conv-gemm conv-direct\n"
     "                                streams conv-depthwise fuse-attention fuse-silu-gelu crop-taps\n"
     "                                channel-gather gemm-residual attention-rows conv-patch mean-pool\n"
     "                                space-to-depth fold-scale row-gather, or all)\n"
     "      Run a model. Inputs bind the graph inputs in order; outputs are written in\n"
     "      order (fewer --output than graph outputs is fine). --batch runs a data set\n"
     "      through one session: every input's first dim is the batch, and so is every\n"
     "      output's.\n"},
    {"train",
     "  train mnist-net|resnet18|resnet34|resnet50|resnet101|resnet152|MODEL.onnx --data DIR\n"
     "        [--epochs N] [--batch 64] [--accumulate K] [--seed S]\n"
     "        [--device cpu] [--amp off] [--lr LR] [--save FILE] [--resume FILE]\n"
     "        [--max-steps N] [--no-dropout] [--threads N] [--strict-fp32] [--no-shuffle] [--profile]\n"
     "        [--deterministic] (CUDA: only cuDNN algorithms without atomic sums: the same run twice\n"
     "        gives the same bits, as torch.use_deterministic_algorithms)\n"
     "        [--json FILE] (every figure reported, per epoch and per step, as JSON; - for stdout)\n"
     "        [--plot FILE.png|FILE.svg] [--plot-size WxH] (loss, test accuracy and learning rate\n"
     "        curves; 1200x900 unless --plot-size)\n"
     "        [--init WEIGHTS.safetensors] [--losses FILE]   (starting weights by name; every\n"
     "        step's loss written to FILE, CPU) [--disable nhwc,fuse-conv,fuse-loss,fuse-pool,\n"
     "        fuse-bn,pad-channels,autotune,conv-gemm,conv-direct,streams] [--no-warmup] (CUDA: the plans, algorithm\n"
     "        searches and graph captures inside the first epoch instead of before it)\n"
     "        [--export MODEL.onnx]   (the trained inference graph, input image -> logprobs for\n"
     "        mnist-net, the logits for the others, as ONNX at the end of training)\n"
     "        [--dist-timeout SEC] [--bucket-mb MB] [--drop-last] [--sync-bn]   (data parallelism,\n"
     "        when started by kiln launch, torchrun or mpirun: a rank waiting longer than SEC\n"
     "        (300) on the others fails; gradients all-reduced in buckets of MB (25); each\n"
     "        rank's shard of an epoch cut, not padded, to a multiple of the ranks;\n"
     "        BatchNormalization's statistics over every rank's batch (SyncBatchNorm). Rank 0\n"
     "        alone prints and writes --save, --json, --plot, --losses and --export)\n"
     "        resnets and ONNX models: [--label-smoothing EPS] [--image-size S] (224 unless the ONNX\n"
     "        input fixes it) [--classes K] (the data set's by default) [--resize R] (evaluation:\n"
     "        shorter side to R, then the centre SxS; S*256/224 by default) [--no-augment]\n"
     "        [--no-flip] [--mean R,G,B] [--std R,G,B] (ImageNet's by default) [--zero-init-residual]\n"
     "        [--data-cache auto|on|off] (image folders: on decodes every image once into memory;\n"
     "        off streams: loader threads read, decode (JPEG at a reduced DCT scale where the crop\n"
     "        allows) and transform each batch's files, into pinned memory on CUDA; auto (default)\n"
     "        streams when the decoded data set would take over half of the machine's memory)\n"
     "        [--data-workers N] (streaming decode threads: on CUDA the cores, at most 16; 2 on the CPU)\n"
     "        [--decode auto|gpu|cpu] (streaming on CUDA: gpu decodes JPEGs with nvJPEG, its hardware\n"
     "        decoder where the GPU has one, and crops, flips and normalizes on the GPU; the workers\n"
     "        read the files. auto (default): gpu when nvJPEG loads; without it kiln says so and\n"
     "        decodes on the CPU. KILN_NVJPEG_LIB: the library or its folder)\n"
     "      memory (docs/train.md): the step's planned peak is printed before training\n"
     "        [--memory-limit BYTES] (20G, 512M: the step at --batch must fit; forward values are\n"
     "        recomputed in the backward instead of kept, as few as fit: cheap ones (BatchNorm,\n"
     "        ReLU, Add...) first, then convolutions and products if still needed)\n"
     "        [--recompute on|cheap|off] (on; cheap: never a convolution)\n"
     "        [--max-batch] (plan only, no --data needed:\n"
     "        print the largest batch that fits --memory-limit, or the free device memory, with\n"
     "        and without recomputation, and exit)\n"
     "      optimizer and schedule (docs/train.md):\n"
     "        [--optimizer adadelta|sgd|adam|adamw|lars|lamb]   (default: adadelta for mnist-net,\n"
     "        as pytorch/examples mnist; sgd for the others) [--lr LR] (default per optimizer:\n"
     "        adadelta 1, sgd 0.01 (mnist-net) or 0.1*batch/256, lars 0.1, adam/adamw/lamb 0.001)\n"
     "        [--momentum M] (sgd: 0 for mnist-net, 0.9 for the others; lars 0.9) [--nesterov]\n"
     "        [--wd WD] (weight decay: 0 for mnist-net, 1e-4 for the others) [--no-decay-bn-bias]\n"
     "        (none on 1-D parameters: BN, biases) [--lars-eta ETA] (0.001) [--clip-grad NORM]\n"
     "        (clip the gradients' global 2-norm) [--schedule step|constant|cosine|poly] (default:\n"
     "        step for mnist-net, cosine for the others) [--step-size EPOCHS] (1)\n"
     "        [--gamma G] (0.7) [--warmup EPOCHS] (linear warm-up, 0)   EPOCHS may be\n"
     "        fractional (0.5); they are converted to optimizer steps. cosine and poly (power 2)\n"
     "        decay to 0 over --epochs; poly starts after the warm-up.\n"
     "      Train a classifier and report the test accuracy after each epoch. mnist-net:\n"
     "      pytorch/examples' MNIST network (Adadelta, StepLR gamma 0.7 per epoch). resnetNN\n"
     "      (torchvision's, state_dict names) or MODEL.onnx (one image input, logits output 0,\n"
     "      as torch.onnx.export writes it): cross-entropy appended, by default SGD momentum 0.9,\n"
     "      weight decay 1e-4, lr 0.1*batch/256 with cosine decay; training images random-resized-crop + flip +\n"
     "      normalize per epoch (seeded), test images resize + centre crop. --data DIR: MNIST\n"
     "      IDX files, CIFAR-10 binary batches, or DIR/train/<class>/ and DIR/test|val/ image\n"
     "      folders. --profile then times\n"
     "      one training step, slowest first: each node of the forward + backward on its\n"
     "      own, the batch gather (prologue) and the optimizer (epilogue), their sum, and\n"
     "      the whole step as a CUDA graph replay (median of 200; CPU: host clock); the\n"
     "      trained state is left as it was. --resume FILE goes on from a checkpoint that\n"
     "      --save wrote (at the end of each epoch, or where --max-steps stopped) up to\n"
     "      --epochs in all: a run that already reached --epochs has nothing left to do\n"
     "      (an error; raise --epochs to train further). A checkpoint resumes on any number\n"
     "      of ranks and any --batch: the rest of its epoch (the samples of the epoch's order\n"
     "      not yet trained on, each once) is split across this run's ranks, and the step\n"
     "      counters, which the learning-rate schedule reads, are set to this run's\n"
     "      position (docs/train.md; on CUDA the position must fall on one of this run's\n"
     "      steps). --batch must not exceed the training set.\n"},
    {"launch",
     "  launch --nproc N [--master-addr A] [--master-port P] -- COMMAND ARGS...\n"
     "      Start N processes of COMMAND on this host (e.g. kiln train ... --device cuda,\n"
     "      one GPU each) with torchrun's variables RANK, LOCAL_RANK, WORLD_SIZE,\n"
     "      MASTER_ADDR (127.0.0.1), MASTER_PORT (a free port); forward signals to them. If\n"
     "      one fails, name its rank, stop the others and exit non-zero.\n"},
    {"bench",
     "  bench MODEL.onnx --batch B [--device cuda|cpu] [--fp32|--fp16|--bf16] [--strict-fp32] [--iters N] [--warmup N]\n"
     "        [--shapes NAME:1x3x640x640[,NAME2:...]] [--threads N] [--profile] [--trace FILE.json] [--nvtx]\n"
     "        [--disable PASS,...] [--ablate] [--json FILE]   (every figure reported, as JSON; - for stdout)\n"
     "      Time a model on random inputs. --batch sets a symbolic first dim; --shapes\n"
     "      (trtexec's) gives named inputs' whole shapes, and a symbolic dim's size given\n"
     "      there holds for every input dim of that name; any other symbolic dim is an\n"
     "      error naming it. Then:\n"
     "      throughput, latency percentiles, transfers, one-time cost. --profile adds a\n"
     "      per-layer table (each node timed on its own: CUDA events, or the host clock\n"
     "      on the CPU), sorted by time, with TFLOP/s of convolutions and products and\n"
     "      GB/s of every node; --trace writes one pass as a Chrome trace (implies\n"
     "      --profile); --nvtx names each node's launch for Nsight (as KILN_NVTX=1).\n"},
    {"convert",
     "  convert IN.onnx OUT.onnx [IN2.onnx OUT2.onnx ...] [--device cpu|cuda] [--fp32|--fp16|--bf16]\n"
     "        [--strict-fp32] [--disable PASS,...|all]\n"
     "      Rewrite a model with the passes a session with these options applies (fusions,\n"
     "      folded BatchNormalization, fp16/bf16 with Casts, NHWC conversions) and save it as\n"
     "      ONNX: kiln's fused ops are written as the standard ops they stand for, so\n"
     "      onnxruntime loads the result. --disable all re-saves the model as kiln loaded it.\n"
     "      Several IN OUT pairs are converted in turn by one process (one line each; a pair\n"
     "      that fails is reported and the rest go on; exit status 1 if any failed).\n"},
    {"info",
     "  info MODEL.onnx     Inputs, outputs, nodes and op counts of a model.\n"
     "        [--device cpu|cuda] [--fp32|--fp16|--bf16] [--strict-fp32] [--disable PASS,...]\n"
     "      With --device (or a precision): also the op counts after the passes a session with\n"
     "      these options applies (kiln's fused ops by their own names): what would run.\n"},
    {"onnx-test",
     "  onnx-test DIR...    Run ONNX backend test cases (model.onnx + test_data_set_*)\n"
     "        [--ops-in-registry] [--min-pass-rate R] [--list-failures FILE] [--quiet]\n"
     "      One PASS, FAIL or SKIP line (with the reason) per case, then the counts; exit\n"
     "      status 1 if any case failed. --ops-in-registry: cases with an op kiln does not\n"
     "      have are SKIP; --min-pass-rate R: exit 1 only below that share of the cases run;\n"
     "      --list-failures FILE: the failed cases' names written to FILE; --quiet: only\n"
     "      the FAIL lines and the counts.\n"},
    {"compare",
     "  compare A.npy B.npy [--rtol R] [--atol A]\n"
     "      Compare two arrays: |a - b| <= atol + rtol*|b| everywhere (NaN never passes).\n"},
    {"cache",
     "  cache show|clear    The autotune cache (cuDNN algorithm choices, CUDA): show says\n"
     "      where its file is (KILN_CACHE_DIR, else XDG_CACHE_HOME/kiln, else\n"
     "      ~/.cache/kiln), its size and entries; clear removes the file.\n"},
    {"ops", "  ops                 List the ops kiln supports.\n"},
    {"version",
     "  version             (or --version) The version, whether CUDA is built in, the CUDA\n"
     "      and cuDNN versions, the git commit built.\n"},
    {"help", "  help [COMMAND]      (or --help, -h) This text, or one command's.\n"},
};
#define N_COMMANDS (int)(sizeof commands / sizeof commands[0])

static int usage(FILE *f) {
    fprintf(f, "usage: kiln <command> [options]   (kiln <command> --help: that command's usage)\n\n");
    for (int i = 0; i < N_COMMANDS; i++) fputs(commands[i].text, f);
    return f == stderr ? 2 : 0;
}

/* One command's usage: on stdout for --help (0), on stderr after a wrong option (2). */
static int cmd_usage(const char *cmd, FILE *f) {
    for (int i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, cmd) == 0) {
            const char *t = commands[i].text + 2;
            if (f == stdout) {
                fprintf(f, "usage: kiln %s", t);
                return 0;
            }
            /* the synopsis only: up to the first description line (6 spaces, then text) */
            const char *end = t;
            while ((end = strchr(end, '\n')) && end[1] && !(strncmp(end + 1, "      ", 6) == 0 && end[7] != ' ')) end++;
            fprintf(f, "usage: kiln %.*s\n(kiln %s --help for more)\n", end ? (int)(end - t) : (int)strlen(t), t, cmd);
            return 2;
        }
    return usage(f);
}

/* getopt_long over a command's arguments (argv[0] is the command's name, so permuted
 * operands and --flag=value work as usual). Returns the next option, -1 at the end, or
 * 'h'; a wrong option is reported here (naming it, then the command's usage) as '?'. */
static int next_opt(const char *cmd, int argc, char **argv, const struct option *longopts) {
    opterr = 0;
    const int c = getopt_long(argc, argv, ":h", longopts, NULL);
    if (c == ':' || c == '?') {
        const char *arg = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
        if (c == ':') fprintf(stderr, "kiln %s: option '%s' needs a value\n", cmd, arg);
        else if (optopt) fprintf(stderr, "kiln %s: unknown option '-%c'\n", cmd, optopt);
        else fprintf(stderr, "kiln %s: unknown option '%s'\n", cmd, arg);
        cmd_usage(cmd, stderr);
        return '?';
    }
    return c;
}

/* The library's message, after what failed unless that is a file the message already
 * names (the loaders name their file: "kiln: m.onnx: m.onnx: ..." said the path twice). */
static int fail(kiln_context *ctx, const char *what) {
    const char *msg = kiln_context_message(ctx);
    const bool is_path = strchr(what, '/') || strchr(what, '.');
    if (msg && is_path && strstr(msg, what)) fprintf(stderr, "kiln: %s\n", msg);
    else fprintf(stderr, "kiln: %s: %s\n", what, msg ? msg : "failed");
    return 1;
}

/* --data DIR in torchvision's ImageFolder layout: DIR/train/<class>/<image> and DIR/test
 * (or DIR/val) likewise. */
static bool image_folders(const char *dir) {
    char p[4096];
    struct stat sb;
    snprintf(p, sizeof p, "%s/train", dir);
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* One split as mnist-net takes it: grey 28x28, at most 10 classes, normalized with mean
 * and std (the training split's, measured when *mean is negative). 0, or 1 with the error
 * printed. */
static int load_split(kiln_context *ctx, const char *dir, float *mean, float *std, kiln_image_folder *f,
                      kiln_tensor **images, kiln_tensor **labels) {
    kiln_image_folder_options fo = {.channels = 1};
    if (kiln_image_folder_load(ctx, dir, &fo, f)) return fail(ctx, dir);
    const int64_t n = kiln_tensor_dim(f->images, 0), h = kiln_tensor_dim(f->images, 2), w = kiln_tensor_dim(f->images, 3);
    if (h != 28 || w != 28) {
        fprintf(stderr, "kiln train: %s: mnist-net takes 28x28 grey images; these are %lldx%lld\n", dir, (long long)w,
                (long long)h);
        return 1;
    }
    if (f->n_classes > 10) {
        fprintf(stderr, "kiln train: %s: %d classes; mnist-net has 10 outputs\n", dir, f->n_classes);
        return 1;
    }
    const uint8_t *px = kiln_tensor_data(f->images);
    const int64_t total = n * h * w;
    if (*mean < 0) {
        double s = 0, s2 = 0;
        for (int64_t i = 0; i < total; i++) {
            const double v = px[i] / 255.0;
            s += v;
            s2 += v * v;
        }
        const double m = s / (double)total, var = s2 / (double)total - m * m;
        *mean = (float)m;
        *std = var > 1e-12 ? (float)sqrt(var) : 1.f;
    }
    if (kiln_tensor_create(ctx, KILN_F32, 4, (int64_t[]){n, 1, h, w}, images) ||
        kiln_tensor_create(ctx, KILN_I64, 1, (int64_t[]){n}, labels))
        return fail(ctx, dir);
    float *x = kiln_tensor_data(*images);
    for (int64_t i = 0; i < total; i++) x[i] = (px[i] / 255.0f - *mean) / *std;
    memcpy(kiln_tensor_data(*labels), kiln_tensor_data(f->labels), (size_t)n * sizeof(int64_t));
    return 0;
}

/* Both splits into d (the layout kiln_mnist_load gives). 0, or 1 with the error printed. */
static int load_image_folders(kiln_context *ctx, const char *dir, kiln_mnist *d) {
    char p[4096];
    float mean = -1, std = 1;
    kiln_image_folder tr = {0}, te = {0};
    snprintf(p, sizeof p, "%s/train", dir);
    int rc = load_split(ctx, p, &mean, &std, &tr, &d->train_images, &d->train_labels);
    snprintf(p, sizeof p, "%s/test", dir);
    struct stat sb;
    if (stat(p, &sb) != 0) snprintf(p, sizeof p, "%s/val", dir);
    if (!rc) rc = load_split(ctx, p, &mean, &std, &te, &d->test_images, &d->test_labels);
    for (int c = 0; !rc && c < tr.n_classes; c++)
        if (c >= te.n_classes || strcmp(tr.class_names[c], te.class_names[c])) {
            fprintf(stderr, "kiln train: %s: class %d is '%s' in train/ but '%s' here\n", p, c, tr.class_names[c],
                    c < te.n_classes ? te.class_names[c] : "(none)");
            rc = 1;
        }
    if (!rc && te.n_classes != tr.n_classes) {
        fprintf(stderr, "kiln train: %s has %d classes, train/ %d\n", p, te.n_classes, tr.n_classes);
        rc = 1;
    }
    if (!rc)
        printf("image folders: %lld training and %lld test images of %d classes, normalized with mean %.4f std %.4f\n",
               (long long)kiln_tensor_dim(d->train_images, 0), (long long)kiln_tensor_dim(d->test_images, 0),
               tr.n_classes, mean, std);
    kiln_image_folder_free(&tr);
    kiln_image_folder_free(&te);
    if (rc) kiln_mnist_free(d);
    return rc;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* "  name   f32[batch,3,224,224]": symbolic dims by name where the model names them, else ? */
static void print_shape(const char *name, kiln_dtype dt, int nd, const int64_t *dims, const char *const *dim_names) {
    printf("  %-24s %s[", name, kiln_dtype_name(dt));
    for (int d = 0; d < nd; d++) {
        if (dims[d] < 0) printf("%s%s", d ? "," : "", dim_names && dim_names[d] ? dim_names[d] : "?");
        else printf(d ? ",%lld" : "%lld", (long long)dims[d]);
    }
    printf("]\n");
}

typedef struct op_count {
    const char *op;
    int n;
} op_count;

static int by_count(const void *a, const void *b) {
    const op_count *x = a, *y = b;
    return x->n != y->n ? y->n - x->n : strcmp(x->op, y->op);
}

/* Op counts of m, most frequent first, as one line after label. */
static int print_op_counts(const kiln_model *m, const char *label) {
    const int nn = kiln_model_num_nodes(m);
    op_count *ops = calloc((size_t)nn + 1, sizeof *ops);
    if (!ops) {
        fprintf(stderr, "kiln info: out of memory\n");
        return 1;
    }
    int kinds = 0;
    for (int i = 0; i < nn; i++) {
        const char *op = kiln_model_node_op_type(m, i);
        int k = 0;
        while (k < kinds && strcmp(ops[k].op, op)) k++;
        if (k == kinds) ops[kinds++] = (op_count){op, 0};
        ops[k].n++;
    }
    qsort(ops, (size_t)kinds, sizeof *ops, by_count);
    printf("%s (%d kinds):", label, kinds);
    for (int k = 0; k < kinds; k++) printf("%s %s %d", k ? "," : "", ops[k].op, ops[k].n);
    printf("\n");
    free(ops);
    return 0;
}

static int parse_disable(const char *list, unsigned *flags);
static int parse_device(const char *cmd, const char *v, kiln_device *out);

/* The options that choose a session's passes, shared by run, bench, convert and info: --device,
 * --fp32|--fp16|--bf16, --strict-fp32, --disable. */
enum { O_PASS_STRICT = 200, O_PASS_DISABLE, O_PASS_FP32, O_PASS_FP16, O_PASS_BF16, O_PASS_DEVICE };
#define PASS_OPTIONS                                                                                              \
    {"strict-fp32", no_argument, NULL, O_PASS_STRICT}, {"disable", required_argument, NULL, O_PASS_DISABLE},    \
        {"fp32", no_argument, NULL, O_PASS_FP32}, {"fp16", no_argument, NULL, O_PASS_FP16},                      \
        {"bf16", no_argument, NULL, O_PASS_BF16}, {"device", required_argument, NULL, O_PASS_DEVICE}

/* Applies option c of PASS_OPTIONS to o: 0, 2 on a bad value (said), -1 when c is not one. */
static int pass_option(const char *cmd, int c, kiln_session_options *o) {
    switch (c) {
    case O_PASS_STRICT: o->strict_fp32 = 1; return 0;
    case O_PASS_DISABLE: return parse_disable(optarg, &o->disable_passes) ? 2 : 0;
    case O_PASS_FP32: o->precision = KILN_PRECISION_FP32; return 0;
    case O_PASS_FP16: o->precision = KILN_PRECISION_FP16; return 0;
    case O_PASS_BF16: o->precision = KILN_PRECISION_BF16; return 0;
    case O_PASS_DEVICE: return parse_device(cmd, optarg, &o->device) ? 2 : 0;
    default: return -1;
    }
}

static int cmd_info(int argc, char **argv) {
    kiln_session_options opts = {0};
    bool passes = false;
    static const struct option lo[] = {PASS_OPTIONS, {"help", no_argument, NULL, 'h'}, {0}};
    for (int c; (c = next_opt("info", argc, argv, lo)) != -1;) {
        if (c == 'h') return cmd_usage("info", stdout);
        if (pass_option("info", c, &opts)) return 2;
        passes = true;
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "kiln info: need one MODEL.onnx\n");
        return cmd_usage("info", stderr);
    }
    argv += optind;
    kiln_context *ctx = NULL;
    kiln_model *m = NULL, *opt = NULL;
    if (kiln_context_create(&ctx)) return 1;
    int rc = 0;
    if (kiln_model_load_onnx(ctx, argv[0], &m)) {
        rc = fail(ctx, argv[0]);
        goto out;
    }
    const int nn = kiln_model_num_nodes(m);
    printf("%s: %d nodes\ninputs:\n", argv[0], nn);
    for (int i = 0; i < kiln_model_num_inputs(m); i++) {
        kiln_dtype dt;
        int nd;
        int64_t dims[KILN_MAX_DIMS];
        const char *names[KILN_MAX_DIMS];
        kiln_model_input_info(m, i, &dt, &nd, dims);
        for (int d = 0; d < KILN_MAX_DIMS; d++) names[d] = kiln_model_input_dim_name(m, i, d);
        print_shape(kiln_model_input_name(m, i), dt, nd, dims, names);
    }
    /* outputs: dtype and dims as inferred from the inputs' (a symbolic dim stays symbolic) */
    printf("outputs:\n");
    for (int i = 0; i < kiln_model_num_outputs(m); i++) {
        kiln_dtype dt = KILN_DTYPE_UNDEFINED;
        int nd = -1;
        int64_t dims[KILN_MAX_DIMS];
        const char *names[KILN_MAX_DIMS];
        if (kiln_model_output_info(m, i, &dt, &nd, dims) != KILN_OK || nd < 0 || dt == KILN_DTYPE_UNDEFINED) {
            printf("  %-24s (shape known at run time)\n", kiln_model_output_name(m, i));
            continue;
        }
        for (int d = 0; d < KILN_MAX_DIMS; d++) names[d] = kiln_model_output_dim_name(m, i, d);
        print_shape(kiln_model_output_name(m, i), dt, nd, dims, names);
    }
    if ((rc = print_op_counts(m, "ops")) != 0) goto out;
    if (passes) { /* what a session with these options would run */
        static const char *const prec[] = {"fp32", "fp16", "bf16"};
        char label[96];
        if (kiln_model_apply_passes(m, &opts, &opt)) {
            rc = fail(ctx, argv[0]);
            goto out;
        }
        snprintf(label, sizeof label, "after the passes (%s, %s): %d nodes; ops",
                 opts.device == KILN_DEVICE_CUDA ? "cuda" : "cpu", prec[opts.precision], kiln_model_num_nodes(opt));
        rc = print_op_counts(opt, label);
    }
out:
    kiln_model_free(opt);
    kiln_model_free(m);
    kiln_context_free(ctx);
    return rc;
}

/* --disable a,b,c: the passes (and CUDA techniques) to switch off, by name. */
static const struct { const char *name; unsigned flag; } pass_names[] = {
    {"dead-nodes", KILN_PASS_DEAD_NODES}, {"fold-bn", KILN_PASS_FOLD_BN},
    {"fuse-conv", KILN_PASS_FUSE_CONV},   {"fuse-eltwise", KILN_PASS_FUSE_ELTWISE},
    {"nhwc", KILN_PASS_NHWC},             {"pad-channels", KILN_PASS_PAD_CHANNELS},
    {"cuda-graph", KILN_PASS_CUDA_GRAPH}, {"autotune", KILN_PASS_AUTOTUNE},
    {"conv-gemm", KILN_PASS_CONV_GEMM},   {"conv-direct", KILN_PASS_CONV_DIRECT},
    {"fuse-loss", KILN_PASS_FUSE_LOSS},   {"streams", KILN_PASS_STREAMS},
    {"fuse-pool", KILN_PASS_FUSE_POOL},   {"fuse-bn", KILN_PASS_FUSE_BN},
    {"conv-depthwise", KILN_PASS_CONV_DEPTHWISE},
    {"fuse-attention", KILN_PASS_FUSE_ATTENTION},
    {"fuse-silu-gelu", KILN_PASS_FUSE_SILU_GELU},
    {"flash-attention", KILN_PASS_FLASH_ATTENTION},
    {"conv-dw-grad", KILN_PASS_CONV_DW_GRAD},
    {"conv-bn-stats", KILN_PASS_CONV_BN_STATS},
    {"bn-mask-from-x", KILN_PASS_BN_MASK_FROM_X},
    {"fold-constants", KILN_PASS_FOLD_CONSTANTS},
    {"crop-taps", KILN_PASS_CROP_TAPS},
    {"channel-gather", KILN_PASS_CHANNEL_GATHER},
    {"gemm-residual", KILN_PASS_GEMM_RESIDUAL},
    {"attention-rows", KILN_PASS_ATTENTION_ROWS},
    {"conv-patch", KILN_PASS_CONV_PATCH},
    {"mean-pool", KILN_PASS_MEAN_POOL},
    {"space-to-depth", KILN_PASS_SPACE_TO_DEPTH},
    {"fold-scale", KILN_PASS_FOLD_SCALE},
    {"row-gather", KILN_PASS_ROW_GATHER},
};

/* --device: cpu or cuda; 0, or 2 after saying what is wrong */
static int parse_device(const char *cmd, const char *v, kiln_device *out) {
    if (strcmp(v, "cpu") == 0) *out = KILN_DEVICE_CPU;
    else if (strcmp(v, "cuda") == 0) *out = KILN_DEVICE_CUDA;
    else {
        fprintf(stderr, "kiln %s: unknown device '%s' (cpu or cuda)\n", cmd, v);
        return 2;
    }
    return 0;
}

static int parse_disable(const char *list, unsigned *out) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        bool found = false;
        for (size_t i = 0; i < sizeof pass_names / sizeof pass_names[0]; i++)
            if (strcmp(tok, pass_names[i].name) == 0 || strcmp(tok, "all") == 0) {
                *out |= strcmp(tok, "all") == 0 ? ~0u : pass_names[i].flag;
                found = true;
            }
        if (!found) {
            fprintf(stderr, "kiln: unknown pass '%s'; one of: all", tok);
            for (size_t i = 0; i < sizeof pass_names / sizeof pass_names[0]; i++) fprintf(stderr, ", %s", pass_names[i].name);
            fprintf(stderr, "\n");
            return 2;
        }
    }
    return 0;
}

static int cmd_convert(int argc, char **argv) {
    int n_paths = 0;
    kiln_session_options opts = {0};
    static const struct option lo[] = {PASS_OPTIONS, {"help", no_argument, NULL, 'h'}, {0}};
    for (int c; (c = next_opt("convert", argc, argv, lo)) != -1;) {
        if (c == 'h') return cmd_usage("convert", stdout);
        if (pass_option("convert", c, &opts)) return 2;
    }
    char **paths = argv + optind; /* getopt moved the options before the paths */
    n_paths = argc - optind;
    if (n_paths < 2 || n_paths % 2) {
        fprintf(stderr, "kiln convert: need IN.onnx OUT.onnx, or several such pairs (%d path%s given)\n", n_paths,
                n_paths == 1 ? "" : "s");
        return cmd_usage("convert", stderr);
    }
    kiln_context *ctx = NULL;
    int rc = 0;
    if (kiln_context_create(&ctx)) return 1;
    for (int i = 0; i < n_paths; i += 2) {
        kiln_model *m = NULL, *opt = NULL;
        if (kiln_model_load_onnx(ctx, paths[i], &m)) rc |= fail(ctx, paths[i]);
        else if (kiln_model_apply_passes(m, &opts, &opt)) rc |= fail(ctx, paths[i]);
        else if (kiln_model_save_onnx(opt, paths[i + 1])) rc |= fail(ctx, paths[i + 1]);
        else
            printf("%s (%d nodes) -> %s (%d nodes)\n", paths[i], kiln_model_num_nodes(m), paths[i + 1],
                   kiln_model_num_nodes(opt));
        fflush(stdout);
        kiln_model_free(opt);
        kiln_model_free(m);
    }
    kiln_context_free(ctx);
    return rc;
}

/* kiln run --batch: the inputs in slices of `batch` rows along their first dim, run by one
 * session (one plan; a shorter last slice is planned for its shape), each output's slices
 * joined into joined[i] (outputs[i] set to it). Returns non-zero with *rc set on failure. */
static int run_batched(kiln_context *ctx, kiln_session *s, int64_t batch, int n_in, kiln_tensor **inputs,
                       const char *const *in_paths, int n_out, const kiln_tensor **outputs, kiln_tensor **joined,
                       int *rc) {
    *rc = 2;
    const int64_t rows = n_in ? kiln_tensor_dim(inputs[0], 0) : -1;
    for (int i = 0; i < n_in; i++)
        if (kiln_tensor_ndim(inputs[i]) < 1 || kiln_tensor_dim(inputs[i], 0) != rows) {
            fprintf(stderr, "kiln run --batch: every input needs the same first dim (the batch): %s has %s%lld, %s %lld\n",
                    in_paths[i], kiln_tensor_ndim(inputs[i]) < 1 ? "no dims, not " : "", (long long)kiln_tensor_dim(inputs[i], 0),
                    in_paths[0], (long long)rows);
            return 1;
        }
    if (rows < 1) {
        fprintf(stderr, "kiln run --batch: the model has no inputs, or the inputs no rows\n");
        return 1;
    }
    kiln_tensor *slice[MAX_IO] = {0};
    int bad = 0;
    for (int64_t r0 = 0; r0 < rows && !bad; r0 += batch) {
        const int64_t n = rows - r0 < batch ? rows - r0 : batch;
        for (int i = 0; i < n_in && !bad; i++) {
            int64_t dims[KILN_MAX_DIMS];
            const int nd = kiln_tensor_ndim(inputs[i]);
            for (int d = 0; d < nd; d++) dims[d] = kiln_tensor_dim(inputs[i], d);
            const size_t row_bytes = kiln_tensor_nbytes(inputs[i]) / (size_t)rows;
            dims[0] = n;
            kiln_tensor_free(slice[i]);
            slice[i] = NULL;
            if (kiln_tensor_wrap(ctx, kiln_tensor_dtype(inputs[i]), nd, dims,
                                 (char *)kiln_tensor_data(inputs[i]) + (size_t)r0 * row_bytes, &slice[i]) ||
                kiln_tensor_set_format(slice[i], kiln_tensor_format(inputs[i])))
                bad = (*rc = fail(ctx, in_paths[i]));
        }
        if (bad) break;
        if (kiln_session_run(s, n_in, slice, n_out, outputs)) {
            fprintf(stderr, "kiln run --batch: rows %lld to %lld:\n", (long long)r0, (long long)(r0 + n - 1));
            bad = (*rc = fail(ctx, "run"));
            break;
        }
        for (int i = 0; i < n_out && !bad; i++) {
            const kiln_tensor *o = outputs[i];
            const int nd = kiln_tensor_ndim(o);
            if (nd < 1 || kiln_tensor_dim(o, 0) != n) {
                fprintf(stderr, "kiln run --batch: output %d of a %lld-row slice has %s%lld rows: its first dim is not "
                        "the batch (run without --batch)\n", i, (long long)n, nd < 1 ? "no dims, not " : "",
                        (long long)kiln_tensor_dim(o, 0));
                bad = 1;
                break;
            }
            if (!joined[i]) {
                int64_t dims[KILN_MAX_DIMS];
                for (int d = 0; d < nd; d++) dims[d] = kiln_tensor_dim(o, d);
                dims[0] = rows;
                if (kiln_tensor_create(ctx, kiln_tensor_dtype(o), nd, dims, &joined[i]) ||
                    kiln_tensor_set_format(joined[i], kiln_tensor_format(o))) {
                    bad = (*rc = fail(ctx, "output"));
                    break;
                }
            }
            const size_t row_bytes = kiln_tensor_nbytes(o) / (size_t)n;
            if (kiln_tensor_dtype(o) != kiln_tensor_dtype(joined[i]) || kiln_tensor_format(o) != kiln_tensor_format(joined[i]) ||
                row_bytes * (size_t)rows != kiln_tensor_nbytes(joined[i])) {
                fprintf(stderr, "kiln run --batch: output %d changed dtype, layout or row size between slices\n", i);
                bad = 1;
                break;
            }
            memcpy((char *)kiln_tensor_data(joined[i]) + (size_t)r0 * row_bytes, kiln_tensor_data(o), (size_t)n * row_bytes);
        }
    }
    for (int i = 0; i < n_in; i++) kiln_tensor_free(slice[i]);
    if (bad) return 1;
    for (int i = 0; i < n_out; i++) outputs[i] = joined[i];
    *rc = 0;
    return 0;
}

static int cmd_run(int argc, char **argv) {
    const char *model_path = NULL, *in_paths[MAX_IO], *out_paths[MAX_IO];
    int n_in = 0, n_out = 0, threads = 0, stats = 0;
    int64_t batch = 0;
    const char *json = NULL;
    kiln_session_options opts = {0};
    enum { O_INPUT = 256, O_OUTPUT, O_THREADS, O_NO_FOLD, O_STATS, O_JSON, O_BATCH };
    static const struct option lo[] = {
        {"input", required_argument, NULL, O_INPUT},    {"output", required_argument, NULL, O_OUTPUT},
        {"threads", required_argument, NULL, O_THREADS}, {"no-fold", no_argument, NULL, O_NO_FOLD},
        {"stats", no_argument, NULL, O_STATS},           {"help", no_argument, NULL, 'h'},
        {"json", required_argument, NULL, O_JSON},       {"batch", required_argument, NULL, O_BATCH},
        PASS_OPTIONS,                                    {0}};
    for (int c; (c = next_opt("run", argc, argv, lo)) != -1;) {
        switch (c) {
        case 'h': return cmd_usage("run", stdout);
        case O_INPUT:
        case O_OUTPUT:
            if ((c == O_INPUT ? n_in : n_out) >= MAX_IO) {
                fprintf(stderr, "kiln run: at most %d --input and %d --output\n", MAX_IO, MAX_IO);
                return 2;
            }
            if (c == O_INPUT) in_paths[n_in++] = optarg;
            else out_paths[n_out++] = optarg;
            break;
        case O_THREADS: threads = atoi(optarg); break;
        case O_NO_FOLD: opts.no_fold = 1; break;
        case O_STATS: stats = 1; break;
        case O_JSON: json = optarg; break;
        case O_BATCH: {
            char *end = NULL;
            batch = strtoll(optarg, &end, 10);
            if (!end || *end || batch < 1) {
                fprintf(stderr, "kiln run: --batch wants a positive number of rows, not '%s'\n", optarg);
                return 2;
            }
            break;
        }
        default:
            if (pass_option("run", c, &opts)) return 2;
        }
    }
    for (int i = optind; i < argc; i++) {
        if (model_path) {
            fprintf(stderr, "kiln run: unexpected argument '%s'\n", argv[i]);
            return cmd_usage("run", stderr);
        }
        model_path = argv[i];
    }
    if (!model_path || n_out == 0) {
        fprintf(stderr, "kiln run: need MODEL.onnx and at least one --output\n");
        return cmd_usage("run", stderr);
    }
    if (json && strcmp(json, "-") == 0 && kj_claim_stdout("run")) return 1;
    kiln_context *ctx = NULL;
    kiln_model *m = NULL;
    kiln_session *s = NULL;
    kiln_tensor *inputs[MAX_IO] = {0};
    const kiln_tensor *outputs[MAX_IO] = {0};
    kiln_tensor *joined[MAX_IO] = {0}; /* --batch: the outputs of all slices */
    int rc = 0;
    if (kiln_context_create(&ctx)) return 1;
    if (threads > 0) kiln_context_set_threads(ctx, threads);
    double t0 = now_ms();
    if (kiln_model_load_onnx(ctx, model_path, &m)) {
        rc = fail(ctx, model_path);
        goto out;
    }
    if (n_in != kiln_model_num_inputs(m)) {
        fprintf(stderr, "kiln run: %s takes %d inputs (", model_path, kiln_model_num_inputs(m));
        for (int i = 0; i < kiln_model_num_inputs(m); i++)
            fprintf(stderr, i ? ", %s" : "%s", kiln_model_input_name(m, i));
        fprintf(stderr, "); %d --input given\n", n_in);
        rc = 2;
        goto out;
    }
    if (n_out > kiln_model_num_outputs(m)) {
        fprintf(stderr, "kiln run: %s has %d outputs; %d --output given\n", model_path,
                kiln_model_num_outputs(m), n_out);
        rc = 2;
        goto out;
    }
    for (int i = 0; i < n_in; i++)
        if (kiln_tensor_load_npy(ctx, in_paths[i], &inputs[i])) {
            rc = fail(ctx, in_paths[i]);
            goto out;
        }
    if (kiln_session_create(m, &opts, &s)) {
        rc = fail(ctx, "session");
        goto out;
    }
    double t1 = now_ms();
    if (batch ? run_batched(ctx, s, batch, n_in, inputs, in_paths, n_out, outputs, joined, &rc)
              : kiln_session_run(s, n_in, inputs, n_out, outputs) ? (rc = fail(ctx, "run")) : 0)
        goto out;
    double t2 = now_ms();
    for (int i = 0; i < n_out; i++)
        if (kiln_tensor_save_npy(ctx, outputs[i], out_paths[i])) {
            rc = fail(ctx, out_paths[i]);
            goto out;
        }
    if (stats) {
        kiln_plan_stats ps;
        kiln_session_stats(s, &ps);
        if (batch) {
            const int64_t rows = kiln_tensor_dim(inputs[0], 0);
            printf("load %.1f ms, %lld slices of up to %lld rows (plans + compute) %.1f ms\n", t1 - t0,
                   (long long)((rows + batch - 1) / batch), (long long)batch, t2 - t1);
        } else printf("load %.1f ms, first run (plan + compute) %.1f ms\n", t1 - t0, t2 - t1);
        printf("nodes run %d, folded %d; activation arena %.2f MiB (one buffer per value: %.2f MiB), "
               "constants %.2f MiB, workspace %.2f MiB\n",
               ps.nodes, ps.folded, ps.arena_bytes / 1048576.0, ps.naive_bytes / 1048576.0,
               ps.constant_bytes / 1048576.0, ps.workspace_bytes / 1048576.0);
    }
    for (int i = 0; i < n_out; i++) {
        printf("%s -> %s ", kiln_model_output_name(m, i), out_paths[i]);
        printf("%s[", kiln_dtype_name(kiln_tensor_dtype(outputs[i])));
        for (int d = 0; d < kiln_tensor_ndim(outputs[i]); d++)
            printf(d ? ",%lld" : "%lld", (long long)kiln_tensor_dim(outputs[i], d));
        printf("]\n");
    }
    if (json) { /* the same figures as --stats and the lines above */
        kiln_plan_stats ps;
        kiln_session_stats(s, &ps);
        static const char *const prec[] = {"fp32", "fp16", "bf16"};
        kj *w = kj_new();
        if (!w) { fprintf(stderr, "kiln run: out of memory\n"); rc = 1; goto out; }
        json_run(w, &(run_facts){.model_path = model_path, .device = opts.device == KILN_DEVICE_CUDA ? "cuda" : "cpu",
                                 .precision = prec[opts.precision], .model = m, .n_inputs = n_in, .n_outputs = n_out,
                                 .input_paths = in_paths, .output_paths = out_paths, .inputs = inputs, .outputs = outputs,
                                 .load_ms = t1 - t0, .first_run_ms = t2 - t1, .plan = &ps});
        rc = kj_write(w, json, "run");
        kj_free(w);
    }
out:
    for (int i = 0; i < n_in; i++) kiln_tensor_free(inputs[i]);
    for (int i = 0; i < n_out; i++) kiln_tensor_free(joined[i]);
    kiln_session_free(s);
    kiln_model_free(m);
    kiln_context_free(ctx);
    return rc;
}

/* ------------------------------------------------------------------ bench */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(const double *sorted, int n, double q) {
    int i = (int)(q * (n - 1) + 0.5);
    return sorted[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* JSON string contents: quotes, backslashes and control characters escaped. */
static void json_str(FILE *f, const char *s) {
    for (; *s; s++) {
        const unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
}

/* One pass of the profile as Chrome trace events (chrome://tracing, Perfetto). */
static int write_trace(const kiln_profile *p, const char *path, const char *model, bool cuda) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "kiln bench: cannot write %s\n", path);
        return 1;
    }
    /* names for the process and its one thread (metadata events), then one event a node */
    fprintf(f, "[\n  {\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %d, \"args\": {\"name\": \"kiln bench ",
            cuda ? 2 : 1);
    json_str(f, model);
    fprintf(f, " (%s)\"}},\n", cuda ? "cuda" : "cpu");
    fprintf(f, "  {\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %d, \"args\": {\"name\": \"%s\"}}%s\n",
            cuda ? 2 : 1, cuda ? "GPU stream (CUDA events)" : "host (CPU nodes)", p->n ? "," : "");
    for (int e = 0; e < p->n; e++) {
        const kiln_profile_node *pn = &p->nodes[e];
        fprintf(f, "  {\"name\": \"");
        json_str(f, pn->name[0] ? pn->name : pn->op_type);
        fprintf(f, "\", \"cat\": \"");
        json_str(f, pn->op_type);
        fprintf(f, "\", \"ph\": \"X\", \"ts\": %.3f, \"dur\": %.3f, \"pid\": 1, \"tid\": %d, \"args\": {\"op\": \"",
                pn->start_ms * 1e3, pn->dur_ms * 1e3, cuda ? 2 : 1);
        json_str(f, pn->op_type);
        fprintf(f, "\", \"shapes\": \"");
        json_str(f, pn->shapes);
        fprintf(f, "\", \"flops\": %.0f, \"bytes\": %.0f, \"median_us\": %.3f}}%s\n", pn->flops, pn->bytes,
                pn->ms * 1e3, e + 1 < p->n ? "," : "");
    }
    fprintf(f, "]\n");
    if (fclose(f) != 0) {
        fprintf(stderr, "kiln bench: error writing %s\n", path);
        return 1;
    }
    return 0;
}

static const kiln_profile *sort_prof;

static int cmp_node_time(const void *a, const void *b) {
    const double x = sort_prof->nodes[*(const int *)a].ms, y = sort_prof->nodes[*(const int *)b].ms;
    return (x < y) - (x > y);
}

/* The per-node table, slowest first (kiln bench --profile, kiln train --profile): a title
 * line, the caller's summary lines, then one row per node; times in ms, or in us. */
static int print_profile(const kiln_profile *p, const char *title, const char *summary, bool us) {
    int *order = malloc(((size_t)p->n + 1) * sizeof *order);
    if (!order) {
        fprintf(stderr, "kiln: out of memory\n");
        return 1;
    }
    for (int e = 0; e < p->n; e++) order[e] = e;
    sort_prof = p;
    qsort(order, (size_t)p->n, sizeof *order, cmp_node_time);
    printf("\n%s:\n%s", title, summary);
    printf("  %4s %10s %6s %8s %8s  %-20s %-28s %s\n", "#", us ? "time us" : "time ms", "share", "TFLOP/s", "GB/s", "op",
           "node", "shapes (inputs -> outputs)");
    for (int r = 0; r < p->n; r++) {
        const kiln_profile_node *pn = &p->nodes[order[r]];
        const double sec = pn->ms * 1e-3;
        char tf[32] = "-", gb[32] = "-";
        if (sec > 0 && pn->flops > 0) snprintf(tf, sizeof tf, "%.2f", pn->flops / sec / 1e12);
        if (sec > 0 && pn->bytes > 0) snprintf(gb, sizeof gb, "%.1f", pn->bytes / sec / 1e9);
        printf(us ? "  %4d %10.2f %5.1f%% %8s %8s  %-20.20s %-28.28s %s\n"
                  : "  %4d %10.4f %5.1f%% %8s %8s  %-20.20s %-28.28s %s\n",
               r + 1, us ? pn->ms * 1e3 : pn->ms, p->total_ms > 0 ? 100.0 * pn->ms / p->total_ms : 0.0, tf, gb,
               pn->op_type, pn->name, pn->shapes);
    }
    free(order);
    return 0;
}

/* --shapes "x:1x3x640x640,mask:1x640x640" (trtexec's form): each named input's dims. */
typedef struct shape_spec {
    char name[256];
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    bool used;
} shape_spec;

static int parse_shapes(const char *arg, shape_spec *out, int max, int *n) {
    *n = 0;
    for (const char *p = arg; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *colon = NULL;
        for (size_t k = len; k > 0 && !colon; k--) /* the last ':' (a name may hold one) */
            if (p[k - 1] == ':') colon = p + k - 1;
        if (!colon || colon == p || (size_t)(colon - p) >= sizeof out->name || *n == max) {
            fprintf(stderr, "kiln bench: --shapes '%.*s': expected NAME:DxDx... (e.g. x:1x3x640x640)\n", (int)len, p);
            return 2;
        }
        shape_spec *sp = &out[(*n)++];
        memset(sp, 0, sizeof *sp);
        memcpy(sp->name, p, (size_t)(colon - p));
        for (const char *q = colon + 1; q < p + len;) {
            char *e = NULL;
            long long v = strtoll(q, &e, 10);
            if (e == q || v < 0 || sp->nd == KILN_MAX_DIMS || (e < p + len && *e != 'x')) {
                fprintf(stderr, "kiln bench: --shapes '%.*s': dims must be sizes >= 0 joined by 'x' (at most %d)\n",
                        (int)len, p, KILN_MAX_DIMS);
                return 2;
            }
            sp->dims[sp->nd++] = v;
            q = e < p + len ? e + 1 : e;
        }
        if (sp->nd == 0 || p[len - 1] == 'x') {
            fprintf(stderr, "kiln bench: --shapes '%.*s': a dim is missing\n", (int)len, p);
            return 2;
        }
        for (int k = 0; k + 1 < *n; k++)
            if (strcmp(out[k].name, sp->name) == 0) {
                fprintf(stderr, "kiln bench: --shapes names input '%s' twice\n", sp->name);
                return 2;
            }
        p = end ? end + 1 : p + len;
    }
    return 0;
}

/* The model's input dims as the text shows them: "N x 3 x H x W" -> "Nx3xHxW". */
static void dims_text(const kiln_model *m, int i, int nd, const int64_t *dims, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = 0;
    for (int d = 0; d < nd && used < cap; d++) {
        const char *sym = dims[d] < 0 ? kiln_model_input_dim_name(m, i, d) : NULL;
        int w = dims[d] >= 0 ? snprintf(buf + used, cap - used, "%s%lld", d ? "x" : "", (long long)dims[d])
                             : snprintf(buf + used, cap - used, "%s%s", d ? "x" : "", sym && *sym ? sym : "?");
        if (w < 0) break;
        used += (size_t)w;
    }
}

/* Every input's dims for kiln bench: --shapes first, then a symbolic dim takes the size
 * --shapes gave its name elsewhere, then --batch for a first dim; what is still unset is
 * an error naming the input, the dim and its symbolic name. */
static int bench_shapes(const kiln_model *m, int n_in, int64_t batch, shape_spec *sp, int n_sp,
                        int64_t dims[][KILN_MAX_DIMS], int *nds) {
    for (int i = 0; i < n_in; i++) {
        kiln_dtype dt;
        kiln_model_input_info(m, i, &dt, &nds[i], dims[i]);
        const char *name = kiln_model_input_name(m, i);
        for (int k = 0; k < n_sp; k++) {
            if (strcmp(sp[k].name, name) != 0) continue;
            sp[k].used = true;
            char t[512];
            dims_text(m, i, nds[i], dims[i], t, sizeof t);
            if (sp[k].nd != nds[i]) {
                fprintf(stderr, "kiln bench: --shapes %s: %d dims given, input '%s' has %d (%s)\n", name, sp[k].nd,
                        name, nds[i], t);
                return 2;
            }
            for (int d = 0; d < nds[i]; d++) {
                if (dims[i][d] >= 0 && dims[i][d] != sp[k].dims[d]) {
                    fprintf(stderr, "kiln bench: --shapes %s: dim %d is %lld in the model (%s), not %lld\n", name, d,
                            (long long)dims[i][d], t, (long long)sp[k].dims[d]);
                    return 2;
                }
                dims[i][d] = sp[k].dims[d];
            }
        }
    }
    for (int k = 0; k < n_sp; k++)
        if (!sp[k].used) {
            fprintf(stderr, "kiln bench: --shapes names '%s', which is not an input of the model (inputs:", sp[k].name);
            for (int i = 0; i < n_in; i++) fprintf(stderr, " %s", kiln_model_input_name(m, i));
            fprintf(stderr, ")\n");
            return 2;
        }
    /* a symbolic name given a size by --shapes holds it everywhere */
    for (int i = 0; i < n_in; i++)
        for (int d = 0; d < nds[i]; d++) {
            const char *sym = kiln_model_input_dim_name(m, i, d);
            if (dims[i][d] >= 0 || !sym || !*sym) continue;
            for (int j = 0; j < n_in && dims[i][d] < 0; j++)
                for (int e = 0; e < nds[j] && dims[i][d] < 0; e++) {
                    const char *other = kiln_model_input_dim_name(m, j, e);
                    kiln_dtype dt;
                    int nd;
                    int64_t orig[KILN_MAX_DIMS];
                    kiln_model_input_info(m, j, &dt, &nd, orig);
                    if (orig[e] < 0 && dims[j][e] >= 0 && other && strcmp(other, sym) == 0) dims[i][d] = dims[j][e];
                }
        }
    for (int i = 0; i < n_in; i++)
        for (int d = 0; d < nds[i]; d++) {
            if (dims[i][d] >= 0) continue;
            if (d == 0) {
                dims[i][d] = batch;
                continue;
            }
            const char *name = kiln_model_input_name(m, i), *sym = kiln_model_input_dim_name(m, i, d);
            kiln_dtype dt;
            int nd;
            int64_t orig[KILN_MAX_DIMS];
            kiln_model_input_info(m, i, &dt, &nd, orig);
            char t[512];
            dims_text(m, i, nd, orig, t, sizeof t);
            fprintf(stderr, "kiln bench: input '%s' (%s) has symbolic dim %d%s%s%s with no size: give the shape with "
                            "--shapes %s:%s\n", name, t, d, sym && *sym ? " ('" : "", sym && *sym ? sym : "",
                    sym && *sym ? "')" : "", name, t);
            return 2;
        }
    return 0;
}

/* OpenBLAS's core name when it runs its generic (pre-AVX) kernels on a CPU with AVX2, else
 * NULL: Debian 12's OpenBLAS 0.3.21 takes CPUs newer than it for a Prescott (a Sapphire Rapids
 * VM did: SSE3 kernels, with other rounding than its AVX ones). OPENBLAS_CORETYPE picks them. */
static const char *blas_generic_core(void) {
    const char *(*corename)(void) = NULL;
    *(void **)&corename = dlsym(RTLD_DEFAULT, "openblas_get_corename");
    if (!corename || !__builtin_cpu_supports("avx2")) return NULL;
    static const char *const generic[] = {"Prescott", "Core2",      "Penryn",    "Dunnington", "Nehalem", "Atom",
                                          "Katmai",   "Coppermine", "Northwood", "Banias",     "Unknown"};
    const char *name = corename();
    for (size_t i = 0; name && i < sizeof generic / sizeof generic[0]; i++)
        if (strcmp(name, generic[i]) == 0) return name;
    return NULL;
}

static int cmd_bench(int argc, char **argv) {
    const char *path = NULL;
    int64_t batch = 1;
    const char *trace = NULL, *json = NULL;
    kj *jw = NULL;
    int iters = 50, warmup = 10, threads = 0, profile = 0, ablate = 0, n_shapes = 0;
    static shape_spec shapes[MAX_IO];
    kiln_session_options so = {0};
    enum { O_PROFILE = 256, O_ABLATE, O_NVTX, O_BATCH, O_ITERS, O_WARMUP, O_THREADS, O_TRACE, O_JSON, O_SHAPES };
    static const struct option lo[] = {
        {"shapes", required_argument, NULL, O_SHAPES},  {"profile", no_argument, NULL, O_PROFILE},
        {"ablate", no_argument, NULL, O_ABLATE},        {"nvtx", no_argument, NULL, O_NVTX},
        {"batch", required_argument, NULL, O_BATCH},    {"iters", required_argument, NULL, O_ITERS},
        {"warmup", required_argument, NULL, O_WARMUP},  {"threads", required_argument, NULL, O_THREADS},
        {"trace", required_argument, NULL, O_TRACE},    {"help", no_argument, NULL, 'h'},
        {"json", required_argument, NULL, O_JSON},      PASS_OPTIONS,
        {0}};
    for (int c; (c = next_opt("bench", argc, argv, lo)) != -1;) {
        switch (c) {
        case 'h': return cmd_usage("bench", stdout);
        case O_PROFILE: profile = 1; break;
        case O_ABLATE: ablate = 1; break;
        case O_NVTX: setenv("KILN_NVTX", "1", 1); break;
        case O_BATCH: batch = atoll(optarg); break;
        case O_ITERS: iters = atoi(optarg); break;
        case O_WARMUP: warmup = atoi(optarg); break;
        case O_THREADS: threads = atoi(optarg); break;
        case O_TRACE:
            trace = optarg;
            profile = 1;
            break;
        case O_JSON: json = optarg; break;
        case O_SHAPES:
            if (parse_shapes(optarg, shapes, MAX_IO, &n_shapes)) return 2;
            break;
        default:
            if (pass_option("bench", c, &so)) return 2;
        }
    }
    for (int i = optind; i < argc; i++) {
        if (path) {
            fprintf(stderr, "kiln bench: unexpected argument '%s'\n", argv[i]);
            return cmd_usage("bench", stderr);
        }
        path = argv[i];
    }
    if (!path) {
        fprintf(stderr, "kiln bench: need MODEL.onnx\n");
        return cmd_usage("bench", stderr);
    }
    if (batch < 1 || iters < 1 || warmup < 0) {
        fprintf(stderr, "kiln bench: --batch and --iters must be >= 1, --warmup >= 0\n");
        return 2;
    }
    if (json && ((strcmp(json, "-") == 0 && kj_claim_stdout("bench")) || !(jw = kj_new()))) return 1;
    kiln_context *ctx = NULL;
    kiln_model *m = NULL;
    kiln_session *s = NULL;
    kiln_tensor *in[MAX_IO] = {0};
    double *run = NULL, *comp = NULL;
    int rc = 0, n_in = 0;
    if (kiln_context_create(&ctx)) return 1;
    if (threads) kiln_context_set_threads(ctx, threads);
    double t0 = now_ms();
    if (kiln_model_load_onnx(ctx, path, &m)) { rc = fail(ctx, path); goto out; }
    double t_import = now_ms() - t0;
    n_in = kiln_model_num_inputs(m);
    if (n_in > MAX_IO) { fprintf(stderr, "kiln bench: too many inputs\n"); rc = 2; goto out; }
    static int64_t in_dims[MAX_IO][KILN_MAX_DIMS];
    int in_nd[MAX_IO];
    if ((rc = bench_shapes(m, n_in, batch, shapes, n_shapes, in_dims, in_nd))) goto out;
    if (n_in > 0 && in_nd[0] > 0) batch = in_dims[0][0]; /* images per run, for the throughput */
    for (int i = 0; i < n_in; i++) {
        kiln_dtype dt;
        int nd;
        int64_t dims[KILN_MAX_DIMS];
        kiln_model_input_info(m, i, &dt, &nd, dims);
        if (kiln_tensor_create(ctx, dt, in_nd[i], in_dims[i], &in[i])) { rc = fail(ctx, "input"); goto out; }
        /* random values, never zeros: speed must not depend on a special input */
        uint64_t r = 88172645463325252ull + (uint64_t)i;
        for (int64_t e = 0; e < kiln_tensor_numel(in[i]); e++) {
            r ^= r << 13; r ^= r >> 7; r ^= r << 17;
            double u = (double)(r >> 11) / 9007199254740992.0;
            if (kiln_dtype_is_float(dt)) kiln_set_f64(in[i], e, u * 2 - 1);
            else kiln_set_i64(in[i], e, (int64_t)(u * 10));
        }
    }
    run = calloc((size_t)iters, sizeof *run);
    comp = calloc((size_t)iters, sizeof *comp);
    if (!run || !comp) { fprintf(stderr, "kiln bench: out of memory\n"); rc = 1; goto out; }
    if (ablate) {
        /* Each technique alone off, all on, all off: what each is worth on this model. */
        const size_t np = sizeof pass_names / sizeof pass_names[0];
        double base = 0, all_on = 0;
        printf("ablation: %s batch %lld, median GPU compute of %d runs (CPU: run time)\n", path, (long long)batch, iters);
        if (jw) json_ablation_begin(jw, path, so.device == KILN_DEVICE_CUDA ? "cuda" : "cpu", batch, iters);
        for (size_t k = 0; k <= np + 1 && !rc; k++) {
            kiln_session_options o = so;
            o.disable_passes = k == np + 1 ? ~0u : k == np ? 0 : pass_names[k].flag;
            kiln_session *as = NULL;
            kiln_bench_times bt = {.run_ms = run, .compute_ms = comp};
            if (kiln_session_create(m, &o, &as) || kiln_session_bench(as, n_in, in, warmup, iters, &bt)) {
                rc = fail(ctx, "ablation");
                kiln_session_free(as);
                break;
            }
            qsort(comp, (size_t)iters, sizeof *comp, cmp_double);
            double ips = (double)batch * 1000.0 / pct(comp, iters, 0.5);
            if (k == np) all_on = ips;
            if (k == np + 1) base = ips;
            printf("  %-28s %12.1f img/s\n", k == np ? "all on" : k == np + 1 ? "all off" : pass_names[k].name, ips);
            if (jw) json_ablation_row(jw, k == np ? "all on" : k == np + 1 ? "all off" : pass_names[k].name, ips);
            kiln_session_free(as);
        }
        if (!rc && base > 0) printf("all techniques together: %.2fx the plain plan\n", all_on / base);
        if (jw && !rc) rc = json_ablation_end(jw, base > 0 ? all_on / base : NAN, json);
        goto out;
    }
    if (kiln_session_create(m, &so, &s)) { rc = fail(ctx, "session"); goto out; }
    kiln_bench_times bt = {.run_ms = run, .compute_ms = comp};
    if (kiln_session_bench(s, n_in, in, warmup, iters, &bt)) { rc = fail(ctx, "bench"); goto out; }
    qsort(run, (size_t)iters, sizeof *run, cmp_double);
    qsort(comp, (size_t)iters, sizeof *comp, cmp_double);
    kiln_plan_stats ps;
    kiln_session_stats(s, &ps);
    double med = pct(comp, iters, 0.5);
    static const char *const prec_names[] = {"fp32", "fp16", "bf16"};
    printf("model: %s  batch %lld  device %s  %s  (%d nodes run, %d folded; arena %.1f MiB)\n", path, (long long)batch,
           so.device == KILN_DEVICE_CUDA ? "cuda" : "cpu", prec_names[so.precision], ps.nodes, ps.folded,
           ps.arena_bytes / 1048576.0);
    const char *generic = so.device == KILN_DEVICE_CPU ? blas_generic_core() : NULL;
    if (generic)
        fprintf(stderr, "note: OpenBLAS runs its generic %s (pre-AVX) kernels on this CPU, which it does not know; "
                        "OPENBLAS_CORETYPE=%s selects its %s ones\n",
                generic, __builtin_cpu_supports("avx512bw") ? "SkylakeX" : "Haswell",
                __builtin_cpu_supports("avx512bw") ? "AVX-512" : "AVX2");
    if (n_shapes) { /* the shapes --shapes chose, as run */
        printf("inputs:");
        for (int i = 0; i < n_in; i++) {
            printf("%s %s %s[", i ? "," : "", kiln_model_input_name(m, i), kiln_dtype_name(kiln_tensor_dtype(in[i])));
            for (int d = 0; d < in_nd[i]; d++) printf("%s%lld", d ? "," : "", (long long)in_dims[i][d]);
            printf("]");
        }
        printf("\n");
    }
    printf("one-time: import %.1f ms, plan + first run (folding, autotuning, upload, graph capture) %.1f ms\n", t_import,
           bt.first_ms);
    printf("latency (end to end, ms): min %.4f  median %.4f  p90 %.4f  p95 %.4f  p99 %.4f\n", run[0], pct(run, iters, 0.5),
           pct(run, iters, 0.9), pct(run, iters, 0.95), pct(run, iters, 0.99));
    if (so.device == KILN_DEVICE_CUDA)
        printf("GPU compute (ms, inputs resident): min %.4f  median %.4f  p90 %.4f  p99 %.4f   "
               "host-to-device %.4f  device-to-host %.4f\n",
               comp[0], med, pct(comp, iters, 0.9), pct(comp, iters, 0.99), bt.h2d_ms, bt.d2h_ms);
    printf("throughput: %.1f img/s\n", (double)batch * 1000.0 / med);
    if (jw)
        json_bench(jw, &(bench_facts){.model_path = path, .device = so.device == KILN_DEVICE_CUDA ? "cuda" : "cpu",
                                      .precision = prec_names[so.precision], .batch = batch, .iters = iters,
                                      .warmup = warmup, .threads = threads, .disabled_passes = so.disable_passes,
                                      .model = m, .inputs = in, .n_inputs = n_in, .import_ms = t_import, .times = &bt,
                                      .plan = &ps});
    if (profile) {
        kiln_profile prof;
        if (kiln_session_profile(s, n_in, in, 1, iters, &prof)) { rc = fail(ctx, "profile"); goto out; }
        const bool cuda = so.device == KILN_DEVICE_CUDA;
        char title[160], summary[256];
        snprintf(title, sizeof title, "per-layer profile (%s, each node run on its own; median of %d passes)",
                 cuda ? "CUDA events" : "host clock", prof.iters);
        snprintf(summary, sizeof summary, "  sum of nodes %.4f ms; whole run %.4f ms%s\n", prof.total_ms, med,
                 cuda ? " (graph replay: no launch gaps, so it can be below the sum)" : "");
        rc = print_profile(&prof, title, summary, false);
        if (jw) kj_profile(jw, "profile", &prof);
        if (!rc && trace) {
            rc = write_trace(&prof, trace, path, cuda);
            if (!rc) printf("trace of one pass (%d nodes) written to %s\n", prof.n, trace);
            if (jw) kj_str(jw, "trace_file", trace);
        }
        kiln_profile_free(&prof);
    }
    if (jw && !rc) {
        kj_end(jw);
        rc = kj_write(jw, json, "bench");
    }
out:
    kj_free(jw);
    free(run);
    free(comp);
    for (int i = 0; i < n_in; i++) kiln_tensor_free(in[i]);
    kiln_session_free(s);
    kiln_model_free(m);
    kiln_context_free(ctx);
    return rc;
}

/* ------------------------------------------------- train: any classifier */

/* kiln train MODEL.onnx | resnetNN: the data set as the model takes it. The training split
 * stays u8 (decoded once; image folders at a fixed square side) and becomes f32 per epoch
 * through the training transform (random-resized-crop, flip, normalize; or the evaluation
 * transform with --no-augment) into one of two buffers, alternating, so that a data set
 * resident on the GPU (keyed by its host pointer) is sent again each epoch. The test split
 * goes through the evaluation transform (resize, centre crop, normalize) once. */
typedef struct classifier_data {
    kiln_tensor *train_u8, *train_labels, *test_labels; /* owned */
    kiln_tensor *train_f32[2], *test_f32;                /* owned */
    int n_classes;                                       /* the data set's */
    kiln_augment_options aug;
    int resize;      /* evaluation resize (0: none) */
    bool augment;
    int64_t epoch_ready; /* the epoch train_f32[epoch & 1] holds (-1: none) */
} classifier_data;

static void classifier_data_free(classifier_data *c) {
    kiln_tensor_free(c->train_u8);
    kiln_tensor_free(c->train_labels);
    kiln_tensor_free(c->test_labels);
    kiln_tensor_free(c->train_f32[0]);
    kiln_tensor_free(c->train_f32[1]);
    kiln_tensor_free(c->test_f32);
    memset(c, 0, sizeof *c);
}

/* "a,b,c" (or one value for every channel) into v[3]. */
static int parse_floats3(const char *flag, const char *s, float v[3]) {
    char *end = NULL;
    for (int i = 0; i < 3; i++) {
        v[i] = strtof(s, &end);
        if (end == s) { fprintf(stderr, "kiln train: %s takes one or three numbers (R,G,B), got '%s'\n", flag, s); return 2; }
        if (*end != ',') {
            if (*end || (i != 0 && i != 2)) {
                fprintf(stderr, "kiln train: %s takes one or three numbers (R,G,B)\n", flag);
                return 2;
            }
            for (int k = i + 1; k < 3; k++) v[k] = v[i];
            return 0;
        }
        s = end + 1;
    }
    fprintf(stderr, "kiln train: %s takes one or three numbers (R,G,B)\n", flag);
    return 2;
}

static int64_t max_label(const kiln_tensor *labels) {
    const int64_t *y = kiln_tensor_data(labels);
    int64_t mx = -1, n = kiln_tensor_dim(labels, 0);
    for (int64_t i = 0; i < n; i++) mx = y[i] > mx ? y[i] : mx;
    return mx;
}

/* The data set for a classifier taking (channels, size, size) images. 0, or 1 (2 for a bad
 * option) with the error printed. */
static int load_classifier_data(kiln_context *ctx, const char *dir, int channels, int size, int resize_opt,
                                classifier_data *c) {
    char p[4096];
    kiln_mnist arr = {0};
    c->epoch_ready = -1;
    if (image_folders(dir)) {
        /* decoded once at a square side: the shorter side to S and the centre S x S for
         * training (the random crops are taken from that square), the evaluation transform
         * (shorter side to S, centre size x size) for the test split */
        const int S = resize_opt >= 0 ? resize_opt : (int)lround(size * 256.0 / 224.0);
        kiln_image_folder tr = {0}, te = {0};
        kiln_image_folder_options fo = {.channels = channels, .resize = S, .crop = S};
        snprintf(p, sizeof p, "%s/train", dir);
        if (kiln_image_folder_load(ctx, p, &fo, &tr)) return fail(ctx, p);
        snprintf(p, sizeof p, "%s/test", dir);
        struct stat sb;
        if (stat(p, &sb) != 0) snprintf(p, sizeof p, "%s/val", dir);
        fo.crop = size;
        int rc = 0;
        if (kiln_image_folder_load(ctx, p, &fo, &te)) rc = fail(ctx, p);
        for (int k = 0; !rc && k < tr.n_classes; k++)
            if (k >= te.n_classes || strcmp(tr.class_names[k], te.class_names[k])) {
                fprintf(stderr, "kiln train: %s: class %d is '%s' in train/ but '%s' here\n", p, k, tr.class_names[k],
                        k < te.n_classes ? te.class_names[k] : "(none)");
                rc = 1;
            }
        if (!rc && te.n_classes != tr.n_classes) {
            fprintf(stderr, "kiln train: %s has %d classes, train/ %d\n", p, te.n_classes, tr.n_classes);
            rc = 1;
        }
        c->n_classes = tr.n_classes;
        c->train_u8 = tr.images;
        c->train_labels = tr.labels;
        tr.images = tr.labels = NULL;
        arr.test_images = te.images; /* already centre-cropped to size */
        c->test_labels = te.labels;
        te.images = te.labels = NULL;
        c->resize = 0;
        kiln_image_folder_free(&tr);
        kiln_image_folder_free(&te);
        if (rc) {
            kiln_tensor_free(arr.test_images);
            return 1;
        }
        printf("image folders: %lld training and %lld test images of %d classes (stored at %dx%d)\n",
               (long long)kiln_tensor_dim(c->train_u8, 0), (long long)kiln_tensor_dim(arr.test_images, 0), c->n_classes,
               S ? S : (int)kiln_tensor_dim(c->train_u8, 3), S ? S : (int)kiln_tensor_dim(c->train_u8, 2));
    } else {
        const bool cifar = kiln_cifar10_detect(dir);
        if (cifar ? kiln_cifar10_load(ctx, dir, &arr) : kiln_mnist_load(ctx, dir, KILN_U8, 0, 1, &arr))
            return fail(ctx, dir);
        c->n_classes = 10;
        c->train_u8 = arr.train_images;
        c->train_labels = arr.train_labels;
        c->test_labels = arr.test_labels;
        arr.train_images = arr.train_labels = arr.test_labels = NULL;
        const int native = (int)kiln_tensor_dim(c->train_u8, 2);
        c->resize = resize_opt >= 0 ? resize_opt : native == size ? 0 : (int)lround(size * 256.0 / 224.0);
        printf("%s: %lld training and %lld test images of %dx%d, %d classes\n", cifar ? "CIFAR-10" : "IDX",
               (long long)kiln_tensor_dim(c->train_u8, 0), (long long)kiln_tensor_dim(arr.test_images, 0), native,
               native, c->n_classes);
    }
    const int64_t nc = kiln_tensor_dim(c->train_u8, 1);
    if (nc == 3 && channels == 1) {
        fprintf(stderr, "kiln train: %s: RGB images for a model taking one channel\n", dir);
        kiln_tensor_free(arr.test_images);
        return 1;
    }
    const int64_t n_test = kiln_tensor_dim(arr.test_images, 0), n_train = kiln_tensor_dim(c->train_u8, 0);
    int rc = 0;
    for (int b = 0; b < (c->augment ? 2 : 1) && !rc; b++)
        if (kiln_tensor_create(ctx, KILN_F32, 4, (int64_t[]){n_train, channels, size, size}, &c->train_f32[b]))
            rc = fail(ctx, "the training images");
    if (!rc && kiln_tensor_create(ctx, KILN_F32, 4, (int64_t[]){n_test, channels, size, size}, &c->test_f32))
        rc = fail(ctx, "the test images");
    if (!rc && kiln_images_center(ctx, arr.test_images, c->resize, &c->aug, c->test_f32)) rc = fail(ctx, dir);
    kiln_tensor_free(arr.test_images);
    return rc;
}

/* The training images of `epoch` (f32, transformed) in one of the two buffers. */
static int classifier_epoch(kiln_context *ctx, classifier_data *c, uint64_t seed, int64_t epoch, kiln_mnist *d) {
    const int b = c->augment ? (int)(epoch & 1) : 0;
    if (c->epoch_ready != (c->augment ? epoch : 0)) {
        kiln_status st = c->augment ? kiln_images_augment(ctx, c->train_u8, &c->aug, seed, epoch, c->train_f32[b])
                                    : kiln_images_center(ctx, c->train_u8, c->resize, &c->aug, c->train_f32[b]);
        if (st) return fail(ctx, "the training transform");
        c->epoch_ready = c->augment ? epoch : 0;
    }
    d->train_images = c->train_f32[b];
    return 0;
}

/* --data-cache: whether an image-folder data set streams (decoded per batch by loader
 * threads) instead of being decoded into memory once. Lists both splits into tr and te
 * (checking their classes agree) and sets *stream; with auto, streams when the decoded
 * data set (the u8 training images at S x S, the f32 images of one or two epochs and
 * the f32 test images) would take over half of the physical memory. 0, or 1 with the
 * error printed. */
static int data_cache_decide(kiln_context *ctx, const char *dir, const char *mode, int channels, int size, int S,
                             bool augment, kiln_image_list *tr, kiln_image_list *te, bool *stream) {
    char p[4096];
    *stream = false;
    snprintf(p, sizeof p, "%s/train", dir);
    if (kiln_image_list_load(ctx, p, tr)) return fail(ctx, p);
    snprintf(p, sizeof p, "%s/test", dir);
    struct stat sb;
    if (stat(p, &sb) != 0) snprintf(p, sizeof p, "%s/val", dir);
    if (kiln_image_list_load(ctx, p, te)) return fail(ctx, p);
    for (int k = 0; k < tr->n_classes; k++)
        if (k >= te->n_classes || strcmp(tr->class_names[k], te->class_names[k])) {
            fprintf(stderr, "kiln train: %s: class %d is '%s' in train/ but '%s' here\n", p, k, tr->class_names[k],
                    k < te->n_classes ? te->class_names[k] : "(none)");
            return 1;
        }
    if (te->n_classes != tr->n_classes) {
        fprintf(stderr, "kiln train: %s has %d classes, train/ %d\n", p, te->n_classes, tr->n_classes);
        return 1;
    }
    const double px = (double)channels * size * size, stored = (double)channels * S * S;
    const double bytes = (double)tr->n * (stored + (augment ? 2 : 1) * 4 * px) + (double)te->n * 5 * px;
    const double mem = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    *stream = strcmp(mode, "off") == 0 || (strcmp(mode, "auto") == 0 && mem > 0 && bytes > mem / 2);
    if (*stream)
        printf("image folders: %lld training and %lld test images of %d classes, streamed (decoded per batch; in "
               "memory they would take %.1f GiB, the machine has %.1f GiB)\n",
               (long long)tr->n, (long long)te->n, tr->n_classes, bytes / 1073741824.0, mem / 1073741824.0);
    return 0;
}

/* ------------------------------------------------------------------ train */

typedef struct train_args {
    const char *model, *data, *save, *resume, *device, *amp, *init, *losses, *json, *plot, *export_path;
    int64_t epochs, batch, accumulate, max_steps;
    uint64_t seed;
    float lr;
    int dropout, threads, strict_fp32, no_shuffle, profile, no_warmup, plot_w, plot_h, deterministic;
    unsigned disable;
    /* any classifier (MODEL.onnx, resnetNN): the loss, the input and the transforms */
    float label_smoothing;
    int64_t image_size, classes;
    int resize, no_augment, no_flip, zero_init_residual;
    const char *mean, *std;
    const char *data_cache; /* auto, on, off */
    int data_workers;
    const char *decode;     /* auto, gpu, cpu */
} train_args;

/* kiln train --export: the trained inference graph computing `output` (the loss and the
 * labels dropped, BatchNormalization on running statistics, Dropout off) as ONNX. */
static int export_onnx(kiln_context *ctx, kiln_trainer *t, const char *output, const char *path) {
    kiln_model *m = NULL;
    if (kiln_trainer_export(t, output, &m)) return fail(ctx, "--export");
    int rc = 0;
    if (kiln_model_save_onnx(m, path)) rc = fail(ctx, path);
    else printf("exported the trained inference graph (output %s) to %s\n", output, path);
    kiln_model_free(m);
    return rc;
}

/* kiln train --profile: one step of the trained model, node by node (see kiln_trainer_profile),
 * with what the whole step takes beside it. */
static int profile_step(kiln_context *ctx, kiln_trainer *t, const kiln_mnist *d, int64_t batch, bool cuda, kj *jw) {
    const int passes = cuda ? 50 : 5, replays = cuda ? 200 : 10;
    kiln_profile prof;
    double step_ms = 0;
    if (kiln_trainer_profile(t, d->train_images, d->train_labels, batch, passes, replays, &prof, &step_ms))
        return fail(ctx, "profile");
    char title[200], summary[512];
    snprintf(title, sizeof title,
             "per-node profile of one training step (%s, each node run on its own; median of %d passes; batch %lld)",
             cuda ? "CUDA events" : "host clock", prof.iters, (long long)batch);
    snprintf(summary, sizeof summary,
             "  sum of all rows %.2f us\n"
             "  whole step      %.2f us (median of %d %s)\n"
             "  step - sum      %+.2f us (%s)\n",
             prof.total_ms * 1e3, step_ms * 1e3, replays,
             cuda ? "replays of the step's CUDA graph, events between back-to-back replays" : "steps, host clock",
             (step_ms - prof.total_ms) * 1e3,
             cuda ? "launch gaps and serialization inside the graph" : "what running the nodes together adds");
    int rc = print_profile(&prof, title, summary, true);
    if (jw) {
        kj_profile(jw, "profile", &prof);
        kj_num(jw, "profile_step_ms", step_ms);
    }
    kiln_profile_free(&prof);
    return rc;
}

/* Test accuracy of the exported inference model over the test split, in chunks (or, el
 * non-NULL, over one epoch of el's batches: a streamed test split). */
static int evaluate_stream(kiln_context *ctx, kiln_session *s, kiln_loader *el, double *acc) {
    if (kiln_loader_seek(el, 0, 0)) return fail(ctx, "evaluation");
    const int64_t steps = kiln_loader_steps_per_epoch(el);
    int64_t correct = 0, n = 0;
    for (int64_t q = 0; q < steps; q++) {
        const kiln_batch *b = NULL;
        const kiln_tensor *lp = NULL;
        if (kiln_loader_next(el, &b)) return fail(ctx, "evaluation data");
        kiln_tensor *x = b->x;
        if (kiln_session_run(s, 1, &x, 1, &lp)) {
            kiln_loader_release(el, b);
            return fail(ctx, "evaluation");
        }
        const float *p = kiln_tensor_data(lp);
        const int64_t k = kiln_tensor_dim(lp, 1);
        for (int64_t r = 0; r < b->size; r++) {
            int64_t best = 0;
            for (int64_t c = 1; c < k; c++)
                if (p[r * k + c] > p[r * k + best]) best = c;
            correct += best == b->labels[r];
        }
        n += b->size;
        kiln_loader_release(el, b);
    }
    if (n < 1) {
        fprintf(stderr, "kiln train: the test set holds no images: no accuracy to measure\n");
        return 1;
    }
    *acc = (double)correct / (double)n;
    return 0;
}

static int evaluate(kiln_context *ctx, kiln_trainer *t, const kiln_mnist *d, kiln_loader *el, kiln_device dev,
                    const char *output, int64_t chunk, double *acc) {
    kiln_model *m = NULL;
    kiln_session *s = NULL;
    kiln_tensor *x = NULL;
    int rc = 0;
    kiln_session_options so = {.device = dev};
    if (kiln_trainer_export(t, output, &m) || kiln_session_create(m, &so, &s)) {
        rc = fail(ctx, "evaluation model");
        goto out;
    }
    if (el) {
        rc = evaluate_stream(ctx, s, el, acc);
        goto out;
    }
    const int64_t n = kiln_tensor_dim(d->test_images, 0);
    int64_t dims[4] = {0, 1, 28, 28}, sample = 1;
    for (int k = 1; k < 4; k++) sample *= (dims[k] = kiln_tensor_dim(d->test_images, k));
    if (n < 1) { /* never an accuracy not measured */
        fprintf(stderr, "kiln train: the test set holds no images: no accuracy to measure\n");
        rc = 1;
        goto out;
    }
    const float *images = kiln_tensor_data(d->test_images);
    const int64_t *labels = kiln_tensor_data(d->test_labels);
    int64_t correct = 0;
    for (int64_t i = 0; i < n; i += chunk) {
        int64_t b = n - i < chunk ? n - i : chunk;
        const kiln_tensor *lp = NULL;
        kiln_tensor_free(x);
        x = NULL;
        dims[0] = b;
        if (kiln_tensor_wrap(ctx, KILN_F32, 4, dims, (void *)(images + i * sample), &x) ||
            kiln_session_run(s, 1, &x, 1, &lp)) {
            rc = fail(ctx, "evaluation");
            goto out;
        }
        const float *p = kiln_tensor_data(lp);
        const int64_t k = kiln_tensor_dim(lp, 1);
        for (int64_t r = 0; r < b; r++) {
            int64_t best = 0;
            for (int64_t c = 1; c < k; c++)
                if (p[r * k + c] > p[r * k + best]) best = c;
            correct += best == labels[i + r];
        }
    }
    *acc = (double)correct / (double)n;
out:
    kiln_tensor_free(x);
    kiln_session_free(s);
    kiln_model_free(m);
    return rc;
}

static void progress(bool tty, int64_t epoch, int64_t epochs, int64_t step, int64_t steps, double rate, float loss,
                     bool done) {
    double eta = rate > 0 ? (double)(steps - step) / rate : 0;
    if (tty) {
        int width = 30, filled = (int)(width * step / (steps ? steps : 1));
        printf("\repoch %lld/%lld [", (long long)epoch + 1, (long long)epochs);
        for (int i = 0; i < width; i++) putchar(i < filled ? '=' : i == filled ? '>' : ' ');
        printf("] %lld/%lld  %.1f steps/s  loss %.4f  ETA %.0fs   ", (long long)step, (long long)steps, rate, loss, eta);
        if (done) putchar('\n');
        fflush(stdout);
    } else {
        printf("epoch %lld/%lld step %lld/%lld  %.1f steps/s  loss %.4f  ETA %.0fs\n", (long long)epoch + 1,
               (long long)epochs, (long long)step, (long long)steps, rate, loss, eta);
    }
}

/* kiln train's optimizer and schedule flags, in one block: OPTIM_LONGOPTS in the option
 * table, parse_optim_flag from the argument loop, apply_optim_flags once the number of
 * optimizer steps per epoch is known (--step-size and --warmup count epochs). */
typedef struct optim_flags {
    const char *optimizer, *schedule;
    float momentum, wd, gamma, clip, lars_eta;
    double step_size, warmup; /* epochs */
    int nesterov, no_decay, momentum_set, wd_set;
} optim_flags;
#define OPTIM_FLAGS_INIT {.gamma = 0.7f, .step_size = 1} /* optimizer, schedule: by model */
enum { O_OPTIMIZER = 512, O_MOMENTUM, O_NESTEROV, O_WD, O_SCHEDULE, O_STEP_SIZE, O_GAMMA, O_WARMUP, O_CLIP_GRAD,
       O_NO_DECAY_BN_BIAS, O_LARS_ETA };
#define OPTIM_LONGOPTS                                                                                             \
    {"optimizer", required_argument, NULL, O_OPTIMIZER}, {"momentum", required_argument, NULL, O_MOMENTUM},      \
        {"nesterov", no_argument, NULL, O_NESTEROV}, {"wd", required_argument, NULL, O_WD},                      \
        {"schedule", required_argument, NULL, O_SCHEDULE}, {"step-size", required_argument, NULL, O_STEP_SIZE}, \
        {"gamma", required_argument, NULL, O_GAMMA}, {"warmup", required_argument, NULL, O_WARMUP},             \
        {"clip-grad", required_argument, NULL, O_CLIP_GRAD},                                                    \
        {"no-decay-bn-bias", no_argument, NULL, O_NO_DECAY_BN_BIAS}, {"lars-eta", required_argument, NULL, O_LARS_ETA}

/* A number for flag `name`, whole string; 0 or 2 (with a message). */
static int optim_number(const char *name, const char *v, double lo, double *out) {
    char *end = NULL;
    const double x = v ? strtod(v, &end) : NAN;
    if (!v || end == v || *end || !(x >= lo) || !isfinite(x)) {
        fprintf(stderr, "kiln train: --%s takes a number >= %g, got '%s'\n", name, lo, v ? v : "");
        return 2;
    }
    *out = x;
    return 0;
}

/* 1: c was one of this block's flags (taken), 0: not one of them, 2: a bad value. */
static int parse_optim_flag(int c, const char *v, optim_flags *f) {
    double x = 0;
    switch (c) {
    case O_OPTIMIZER: f->optimizer = v; return 1;
    case O_SCHEDULE: f->schedule = v; return 1;
    case O_NESTEROV: f->nesterov = 1; return 1;
    case O_NO_DECAY_BN_BIAS: f->no_decay = 1; return 1;
    case O_MOMENTUM:
        if (optim_number("momentum", v, 0, &x)) return 2;
        f->momentum = (float)x;
        f->momentum_set = 1;
        return 1;
    case O_WD:
        if (optim_number("wd", v, 0, &x)) return 2;
        f->wd = (float)x;
        f->wd_set = 1;
        return 1;
    case O_GAMMA:
        if (optim_number("gamma", v, 0, &x)) return 2;
        f->gamma = (float)x;
        return 1;
    case O_CLIP_GRAD:
        if (optim_number("clip-grad", v, 0, &x)) return 2;
        f->clip = (float)x;
        return 1;
    case O_LARS_ETA:
        if (optim_number("lars-eta", v, 0, &x)) return 2;
        f->lars_eta = (float)x;
        return 1;
    case O_STEP_SIZE:
        if (optim_number("step-size", v, 0, &f->step_size)) return 2;
        if (!(f->step_size > 0)) {
            fprintf(stderr, "kiln train: --step-size must be > 0 epochs\n");
            return 2;
        }
        return 1;
    case O_WARMUP: return optim_number("warmup", v, 0, &f->warmup) ? 2 : 1;
    default: return 0;
    }
}

/* Into o: the optimizer, its hyper-parameters and the schedule, epochs counted in optimizer
 * steps (steps_per_epoch of them; --epochs in all; 0: not known yet, the steps are left).
 * lr 0 takes the optimizer's default. 0 or 2. */
static int apply_optim_flags(const optim_flags *f, float lr, int64_t steps_per_epoch, int64_t epochs,
                             kiln_train_options *o) {
    static const struct { const char *name; kiln_optimizer opt; float lr; } opts[] = {
        {"adadelta", KILN_OPTIM_ADADELTA, 1.0f}, {"sgd", KILN_OPTIM_SGD, 0.01f}, {"adam", KILN_OPTIM_ADAM, 1e-3f},
        {"adamw", KILN_OPTIM_ADAMW, 1e-3f},      {"lars", KILN_OPTIM_LARS, 0.1f}, {"lamb", KILN_OPTIM_LAMB, 1e-3f}};
    static const struct { const char *name; kiln_schedule s; } scheds[] = {
        {"constant", KILN_SCHEDULE_CONSTANT}, {"step", KILN_SCHEDULE_STEP}, {"cosine", KILN_SCHEDULE_COSINE},
        {"poly", KILN_SCHEDULE_POLY}};
    size_t i = 0, j = 0;
    while (i < sizeof opts / sizeof opts[0] && strcmp(opts[i].name, f->optimizer) != 0) i++;
    while (j < sizeof scheds / sizeof scheds[0] && strcmp(scheds[j].name, f->schedule) != 0) j++;
    if (i == sizeof opts / sizeof opts[0]) {
        fprintf(stderr, "kiln train: --optimizer must be adadelta, sgd, adam, adamw, lars or lamb, got '%s'\n",
                f->optimizer);
        return 2;
    }
    if (j == sizeof scheds / sizeof scheds[0]) {
        fprintf(stderr, "kiln train: --schedule must be constant, step, cosine or poly, got '%s'\n", f->schedule);
        return 2;
    }
    if (f->nesterov && (opts[i].opt != KILN_OPTIM_SGD || f->momentum == 0)) {
        fprintf(stderr, "kiln train: --nesterov needs --optimizer sgd and --momentum > 0\n");
        return 2;
    }
    o->optimizer = opts[i].opt;
    o->lr = lr > 0 ? lr : opts[i].lr;
    o->momentum = f->momentum_set ? f->momentum : opts[i].opt == KILN_OPTIM_LARS ? 0.9f : 0.f;
    o->nesterov = f->nesterov;
    o->weight_decay = f->wd;
    o->no_decay_bn_bias = f->no_decay;
    o->clip_grad_norm = f->clip;
    o->lars_eta = f->lars_eta;
    o->schedule = scheds[j].s;
    o->gamma = f->gamma;
    if (steps_per_epoch <= 0) return 0; /* the names checked; the steps come with the data */
    const double spe = (double)steps_per_epoch;
    o->step_size = (int64_t)ceil(f->step_size * spe);
    if (o->step_size < 1) o->step_size = 1;
    o->warmup_steps = (int64_t)ceil(f->warmup * spe);
    o->total_steps = (int64_t)spe * epochs;
    if ((o->schedule == KILN_SCHEDULE_POLY || o->schedule == KILN_SCHEDULE_COSINE) && o->total_steps <= o->warmup_steps) {
        fprintf(stderr, "kiln train: --warmup (%lld steps) must end before --epochs (%lld steps) for --schedule %s\n",
                (long long)o->warmup_steps, (long long)o->total_steps, f->schedule);
        return 2;
    }
    return 0;
}

/* ---- kiln train --memory-limit / --max-batch (activation checkpointing, issue 12) ---- */

/* "20G", "512M", "1.5GiB", "1000000": bytes (K, M, G, T are powers of 1024). */
static int parse_bytes(const char *v, size_t *out) {
    char *end = NULL;
    const double x = strtod(v, &end);
    double mul = 1;
    if (end && *end) {
        switch (*end == 'k' ? 'K' : *end) {
        case 'K': mul = 1024.0; break;
        case 'M': mul = 1048576.0; break;
        case 'G': mul = 1073741824.0; break;
        case 'T': mul = 1099511627776.0; break;
        case 'B': mul = 1; end--; break;
        default: mul = 0; break;
        }
        end++;
        if (*end == 'i') end++;
        if (*end == 'B') end++;
    }
    if (!end || end == v || *end || !(mul > 0) || !(x >= 1) || x * mul > 1.8e19) {
        fprintf(stderr, "kiln train: --memory-limit '%s': give bytes, e.g. 20G, 512M or 1500000000\n", v);
        return 2;
    }
    *out = (size_t)(x * mul);
    return 0;
}

static void print_train_memory(const char *what, const kiln_train_memory *m) {
    const double MiB = 1048576.0;
    printf("%s batch %lld: peak %.1f MiB = activations %.1f", what, (long long)m->batch, m->peak_bytes / MiB,
           m->arena_bytes / MiB);
    if (m->recomputed && m->arena_bytes_without != m->arena_bytes)
        printf(" (%.1f without; %d of %d forward values recomputed, %.2f G element ops a step more)",
               m->arena_bytes_without / MiB, m->recomputed, m->candidates, m->recompute_ops / 1e9);
    else if (m->recomputed)
        printf(" (%d forward values recomputed)", m->recomputed);
    printf(" + weights %.1f + optimizer state %.1f + batch %.1f + workspace %.1f MiB\n", m->param_bytes / MiB,
           m->state_bytes / MiB, m->input_bytes / MiB, m->workspace_bytes / MiB);
}

static void json_train_memory(kj *w, const char *key, const kiln_train_memory *m) {
    kj_obj(w, key);
    kj_int(w, "batch", (long long)m->batch);
    kj_int(w, "peak_bytes", (long long)m->peak_bytes);
    kj_int(w, "arena_bytes", (long long)m->arena_bytes);
    kj_int(w, "arena_bytes_without_recompute", (long long)m->arena_bytes_without);
    kj_int(w, "param_bytes", (long long)m->param_bytes);
    kj_int(w, "state_bytes", (long long)m->state_bytes);
    kj_int(w, "input_bytes", (long long)m->input_bytes);
    kj_int(w, "workspace_bytes", (long long)m->workspace_bytes);
    kj_int(w, "recomputed", m->recomputed);
    kj_int(w, "recompute_candidates", m->candidates);
    kj_end(w);
}

/* After a device out-of-memory: what the plan expected, what the device has, what to do. */
static void train_oom_hint(kiln_context *ctx, const kiln_train_options *o, const kiln_train_memory *m, size_t limit) {
    size_t freeb = 0, total = 0;
    const double MiB = 1048576.0;
    char lim[64] = "no --memory-limit";
    if (kiln_device_memory(ctx, o->device, o->device_index, &freeb, &total)) return;
    if (limit) snprintf(lim, sizeof lim, "the memory limit %zu bytes", limit);
    fprintf(stderr,
            "kiln train: out of device memory at batch %lld: the step's planned peak is %zu bytes (%.1f MiB%s), %s, "
            "and the device has %zu bytes (%.1f MiB) free of %zu now; pass --memory-limit (recomputation) or a "
            "smaller --batch (--max-batch prints the largest that fits)\n",
            (long long)m->batch, m->peak_bytes, m->peak_bytes / MiB, o->device == KILN_DEVICE_CUDA ? " + cuDNN workspace" : "",
            lim, freeb, freeb / MiB, total);
}

/* --max-batch: the model without data (resnets: --classes or 1000), the largest batch whose
 * step fits the limit with and without recomputation, by planning only. */
static int train_max_batch(kiln_context *ctx, const char *model, int depth, int64_t classes, int64_t image_size,
                           uint64_t seed, int dropout, int zero_init_residual, float label_smoothing, kiln_train_options o,
                           size_t limit, int recompute, const char *json) {
    kiln_model *fwd = NULL, *m = NULL;
    kiln_trainer *t = NULL;
    kj *jw = NULL;
    int rc = 0;
    const char *budget = "--memory-limit";
    if (!limit) {
        size_t freeb = 0, total = 0;
        if (kiln_device_memory(ctx, o.device, o.device_index, &freeb, &total)) return fail(ctx, "--max-batch");
        limit = freeb;
        budget = o.device == KILN_DEVICE_CUDA ? "the device's free memory" : "the host's available memory (MemAvailable)";
    }
    if (strcmp(model, "mnist-net") == 0) {
        if (kiln_model_mnist_net(ctx, -1, seed, dropout, &m)) return fail(ctx, model);
    } else {
        if (depth) {
            if (kiln_model_resnet(ctx, depth, classes ? classes : 1000, image_size ? image_size : 224, seed,
                                  zero_init_residual, &fwd)) return fail(ctx, model);
        } else if (kiln_model_load_onnx(ctx, model, &fwd)) return fail(ctx, model);
        if (kiln_model_add_classifier_loss(fwd, kiln_model_output_name(fwd, 0), label_smoothing, &m)) {
            rc = fail(ctx, model);
            goto out;
        }
    }
    /* the schedule's length does not change the memory */
    if (o.total_steps <= o.warmup_steps) o.total_steps = o.warmup_steps + 1;
    if (o.step_size <= 0) o.step_size = 1;
    if (kiln_trainer_create(m, "loss", &o, &t)) { rc = fail(ctx, model); goto out; }
    const double GiB = 1073741824.0;
    printf("%s on %s%s: the largest batch whose training step fits %.2f GiB (%zu bytes, %s), by planning only\n", model,
           o.device == KILN_DEVICE_CUDA ? "cuda" : "cpu",
           o.amp == KILN_AMP_FP16 ? " (amp fp16)" : o.amp == KILN_AMP_BF16 ? " (amp bf16)" : "", limit / GiB, limit,
           budget);
    if (json && !(jw = kj_new())) { rc = 1; goto out; }
    if (jw) {
        kj_obj(jw, NULL);
        kj_head(jw, "kiln-train-max-batch", 1);
        kj_str(jw, "model", model);
        kj_str(jw, "device", o.device == KILN_DEVICE_CUDA ? "cuda" : "cpu");
        kj_int(jw, "memory_limit", (long long)limit);
    }
    int64_t best[2] = {0, 0};
    for (int r = 0; r < 2; r++) {
        if (r == 1 && !recompute) break;
        kiln_train_memory at;
        int64_t b = 0;
        if (kiln_trainer_max_batch(t, limit, r ? recompute : 0, 0, &b, &at)) {
            rc = fail(ctx, r ? "--max-batch (with recomputation)" : "--max-batch (without recomputation)");
            goto out;
        }
        best[r] = b;
        print_train_memory(r ? "  with recomputation:   max" : "  without recomputation: max", &at);
        if (jw) json_train_memory(jw, r ? "with_recompute" : "without_recompute", &at);
    }
    if (recompute)
        printf("max batch: %lld without recomputation, %lld with (%.2fx)\n", (long long)best[0], (long long)best[1],
               best[0] ? (double)best[1] / (double)best[0] : 0.0);
    else
        printf("max batch: %lld (recomputation off)\n", (long long)best[0]);
    if (jw) {
        kj_int(jw, "max_batch", (long long)best[0]);
        if (recompute) kj_int(jw, "max_batch_recompute", (long long)best[1]);
        kj_end(jw);
        rc = kj_write(jw, json, "train");
    }
out:
    kj_free(jw);
    kiln_trainer_free(t);
    kiln_model_free(m);
    kiln_model_free(fwd);
    return rc;
}

static int cmd_train(int argc, char **argv) {
    train_args a = {.epochs = 1, .batch = 64, .accumulate = 1, .seed = 1, .dropout = 1, .device = "cpu", .amp = "off",
                    .plot_w = 1200, .plot_h = 900, .resize = -1, .data_cache = "auto", .decode = "auto"};
    enum { O_NO_DROPOUT = 256, O_STRICT, O_NO_SHUFFLE, O_NO_WARMUP, O_PROFILE, O_DATA, O_EPOCHS, O_BATCH, O_ACCUMULATE,
           O_SEED, O_LR, O_SAVE, O_RESUME, O_DEVICE, O_AMP, O_MAX_STEPS, O_THREADS, O_INIT, O_LOSSES, O_DISABLE, O_JSON,
           O_PLOT, O_PLOT_SIZE, O_EXPORT, O_LABEL_SMOOTHING, O_IMAGE_SIZE, O_CLASSES, O_RESIZE, O_NO_AUGMENT,
           O_NO_FLIP, O_MEAN, O_STD, O_ZERO_INIT, O_DIST_TIMEOUT, O_BUCKET_MB, O_DROP_LAST, O_SYNC_BN,
           O_MEMORY_LIMIT, O_MAX_BATCH, O_RECOMPUTE, O_DATA_CACHE, O_DATA_WORKERS, O_DECODE, O_DETERMINISTIC };
    static const struct option longopts[] = {
        {"no-dropout", no_argument, NULL, O_NO_DROPOUT},      {"strict-fp32", no_argument, NULL, O_STRICT},
        {"no-shuffle", no_argument, NULL, O_NO_SHUFFLE},      {"no-warmup", no_argument, NULL, O_NO_WARMUP},
        {"profile", no_argument, NULL, O_PROFILE},            {"data", required_argument, NULL, O_DATA},
        {"epochs", required_argument, NULL, O_EPOCHS},        {"batch", required_argument, NULL, O_BATCH},
        {"accumulate", required_argument, NULL, O_ACCUMULATE}, {"seed", required_argument, NULL, O_SEED},
        {"lr", required_argument, NULL, O_LR},                {"save", required_argument, NULL, O_SAVE},
        {"resume", required_argument, NULL, O_RESUME},        {"device", required_argument, NULL, O_DEVICE},
        {"amp", required_argument, NULL, O_AMP},              {"max-steps", required_argument, NULL, O_MAX_STEPS},
        {"threads", required_argument, NULL, O_THREADS},      {"init", required_argument, NULL, O_INIT},
        {"losses", required_argument, NULL, O_LOSSES},        {"disable", required_argument, NULL, O_DISABLE},
        {"help", no_argument, NULL, 'h'},                     {"json", required_argument, NULL, O_JSON},
        {"plot", required_argument, NULL, O_PLOT},            {"plot-size", required_argument, NULL, O_PLOT_SIZE},
        {"export", required_argument, NULL, O_EXPORT},
        OPTIM_LONGOPTS,
        {"label-smoothing", required_argument, NULL, O_LABEL_SMOOTHING},
        {"image-size", required_argument, NULL, O_IMAGE_SIZE}, {"classes", required_argument, NULL, O_CLASSES},
        {"resize", required_argument, NULL, O_RESIZE},         {"no-augment", no_argument, NULL, O_NO_AUGMENT},
        {"no-flip", no_argument, NULL, O_NO_FLIP},             {"mean", required_argument, NULL, O_MEAN},
        {"std", required_argument, NULL, O_STD},               {"zero-init-residual", no_argument, NULL, O_ZERO_INIT},
        {"dist-timeout", required_argument, NULL, O_DIST_TIMEOUT}, {"bucket-mb", required_argument, NULL, O_BUCKET_MB},
        {"drop-last", no_argument, NULL, O_DROP_LAST},        {"sync-bn", no_argument, NULL, O_SYNC_BN},
        {"deterministic", no_argument, NULL, O_DETERMINISTIC},
        {"memory-limit", required_argument, NULL, O_MEMORY_LIMIT}, {"max-batch", no_argument, NULL, O_MAX_BATCH},
        {"recompute", required_argument, NULL, O_RECOMPUTE},
        {"data-cache", required_argument, NULL, O_DATA_CACHE}, {"data-workers", required_argument, NULL, O_DATA_WORKERS},
        {"decode", required_argument, NULL, O_DECODE},
        {0}};
    optim_flags of = OPTIM_FLAGS_INIT;
    /* data parallelism (cli/launch.c) */
    double dist_timeout = 0, bucket_mb = 0;
    int drop_last = 0, sync_bn = 0;
    kiln_dist *dist = NULL;
    /* activation checkpointing (train_max_batch above) */
    size_t memory_limit = 0;
    int max_batch = 0, recompute = 1;
    for (int c; (c = next_opt("train", argc, argv, longopts)) != -1;) {
        const char *v = optarg;
        switch (c) {
        case 'h': return cmd_usage("train", stdout);
        case O_NO_DROPOUT: a.dropout = 0; break;
        case O_STRICT: a.strict_fp32 = 1; break;
        case O_DETERMINISTIC: a.deterministic = 1; break;
        case O_NO_SHUFFLE: a.no_shuffle = 1; break;
        case O_NO_WARMUP: a.no_warmup = 1; break;
        case O_PROFILE: a.profile = 1; break;
        case O_DATA: a.data = v; break;
        case O_EPOCHS: a.epochs = atoll(v); break;
        case O_BATCH: a.batch = atoll(v); break;
        case O_ACCUMULATE: a.accumulate = atoll(v); break;
        case O_SEED: a.seed = strtoull(v, NULL, 10); break;
        case O_LR: a.lr = strtof(v, NULL); break;
        case O_SAVE: a.save = v; break;
        case O_RESUME: a.resume = v; break;
        case O_DEVICE: a.device = v; break;
        case O_AMP: a.amp = v; break;
        case O_MAX_STEPS: a.max_steps = atoll(v); break;
        case O_THREADS: a.threads = atoi(v); break;
        case O_INIT: a.init = v; break;
        case O_LOSSES: a.losses = v; break;
        case O_JSON: a.json = v; break;
        case O_PLOT: a.plot = v; break;
        case O_PLOT_SIZE:
            if (train_plot_size(v, &a.plot_w, &a.plot_h)) return 2;
            break;
        case O_EXPORT: a.export_path = v; break;
        case O_LABEL_SMOOTHING: a.label_smoothing = strtof(v, NULL); break;
        case O_IMAGE_SIZE: a.image_size = atoll(v); break;
        case O_CLASSES: a.classes = atoll(v); break;
        case O_RESIZE: a.resize = atoi(v); break;
        case O_NO_AUGMENT: a.no_augment = 1; break;
        case O_NO_FLIP: a.no_flip = 1; break;
        case O_MEAN: a.mean = v; break;
        case O_STD: a.std = v; break;
        case O_ZERO_INIT: a.zero_init_residual = 1; break;
        case O_DIST_TIMEOUT: dist_timeout = strtod(v, NULL); break;
        case O_BUCKET_MB: bucket_mb = strtod(v, NULL); break;
        case O_DROP_LAST: drop_last = 1; break;
        case O_SYNC_BN: sync_bn = 1; break;
        case O_MEMORY_LIMIT:
            if (parse_bytes(v, &memory_limit)) return 2;
            break;
        case O_MAX_BATCH: max_batch = 1; break;
        case O_RECOMPUTE:
            if (strcmp(v, "on") && strcmp(v, "off") && strcmp(v, "cheap")) {
                fprintf(stderr, "kiln train: --recompute must be on, cheap or off\n");
                return 2;
            }
            recompute = !strcmp(v, "on") ? 1 : !strcmp(v, "cheap") ? 2 : 0;
            break;
        case O_DATA_CACHE: a.data_cache = v; break;
        case O_DATA_WORKERS: a.data_workers = atoi(v); break;
        case O_DECODE: a.decode = v; break;
        case O_DISABLE:
            if (parse_disable(v, &a.disable)) return 2;
            break;
        default:
            if (parse_optim_flag(c, v, &of) != 1) return 2;
            break;
        }
    }
    for (int i = optind; i < argc; i++) {
        if (a.model) {
            fprintf(stderr, "kiln train: unexpected argument '%s'\n", argv[i]);
            return cmd_usage("train", stderr);
        }
        a.model = argv[i];
    }
    if (!a.model) {
        fprintf(stderr, "kiln train: name the model: mnist-net, resnet18|34|50|101|152 or MODEL.onnx\n");
        return cmd_usage("train", stderr);
    }
    /* mnist-net as before; any other model is a classifier trained with the loss appended */
    const bool mnist = strcmp(a.model, "mnist-net") == 0;
    int depth = 0;
    char tail = 0;
    const bool resnet = sscanf(a.model, "resnet%d%c", &depth, &tail) == 1;
    if (resnet && depth != 18 && depth != 34 && depth != 50 && depth != 101 && depth != 152) {
        fprintf(stderr, "kiln train: %s: the ResNets are resnet18, resnet34, resnet50, resnet101 and resnet152\n", a.model);
        return 2;
    }
    const size_t ml = strlen(a.model);
    if (!mnist && !resnet && (ml < 5 || strcmp(a.model + ml - 5, ".onnx") != 0)) {
        fprintf(stderr, "kiln train: the model must be mnist-net, resnet18|34|50|101|152 or an ONNX file "
                        "(MODEL.onnx), not '%s'\n", a.model);
        return 2;
    }
    if (mnist && (a.label_smoothing || a.image_size || a.classes || a.resize >= 0 || a.no_augment || a.no_flip ||
                  a.mean || a.std || a.zero_init_residual || strcmp(a.data_cache, "auto") || a.data_workers ||
                  strcmp(a.decode, "auto"))) {
        fprintf(stderr, "kiln train: --label-smoothing, --image-size, --classes, --resize, --no-augment, --no-flip, "
                        "--mean, --std, --zero-init-residual, --data-cache, --data-workers and --decode are for resnets "
                        "and ONNX models, not mnist-net\n");
        return 2;
    }
    if (!(a.label_smoothing >= 0 && a.label_smoothing < 1)) {
        fprintf(stderr, "kiln train: --label-smoothing must be in [0, 1)\n");
        return 2;
    }
    if (a.image_size < 0 || a.classes < 0 || a.resize < -1) {
        fprintf(stderr, "kiln train: --image-size, --classes and --resize must be positive\n");
        return 2;
    }
    if (!a.data && !max_batch) { fprintf(stderr, "kiln train: --data DIR is required (but for --max-batch)\n"); return 2; }
    if (strcmp(a.data_cache, "auto") && strcmp(a.data_cache, "on") && strcmp(a.data_cache, "off")) {
        fprintf(stderr, "kiln train: --data-cache must be auto, on or off\n");
        return 2;
    }
    if (a.data_workers < 0 || a.data_workers > 256) {
        fprintf(stderr, "kiln train: --data-workers must be in 0..256\n");
        return 2;
    }
    if (strcmp(a.decode, "auto") && strcmp(a.decode, "gpu") && strcmp(a.decode, "cpu")) {
        fprintf(stderr, "kiln train: --decode must be auto, gpu or cpu\n");
        return 2;
    }
    if (a.epochs < 1 || a.batch < 1 || a.accumulate < 1 || a.max_steps < 0) {
        fprintf(stderr, "kiln train: --epochs, --batch and --accumulate must be >= 1\n");
        return 2;
    }
    kiln_train_options o = {.accumulate = (int)a.accumulate, .seed = a.seed, .threads = a.threads,
                            .strict_fp32 = a.strict_fp32, .disable_passes = a.disable,
                            .deterministic = a.deterministic};
    if (!mnist) {
        /* torchvision's reference recipe unless the flags say otherwise: SGD momentum 0.9,
         * weight decay 1e-4, lr 0.1 at batch 256 (scaled linearly with the batch, Goyal et
         * al.), cosine decay over the run */
        if (!of.optimizer) of.optimizer = "sgd";
        if (!of.schedule) of.schedule = "cosine";
        if (!of.momentum_set && strcmp(of.optimizer, "sgd") == 0) {
            of.momentum = 0.9f;
            of.momentum_set = 1;
        }
        if (!of.wd_set) of.wd = 1e-4f;
        if (!(a.lr > 0) && strcmp(of.optimizer, "sgd") == 0) a.lr = 0.1f * (float)(a.batch * a.accumulate) / 256.f;
    }
    if (!of.optimizer) of.optimizer = "adadelta"; /* pytorch/examples mnist */
    if (!of.schedule) of.schedule = "step";
    if (apply_optim_flags(&of, a.lr, 0, a.epochs, &o)) return 2; /* the names, checked before loading data */
    float mean3[3] = {0.485f, 0.456f, 0.406f}, std3[3] = {0.229f, 0.224f, 0.225f}; /* ImageNet's */
    if (a.mean && parse_floats3("--mean", a.mean, mean3)) return 2;
    if (a.std && parse_floats3("--std", a.std, std3)) return 2;
    if (parse_device("train", a.device, &o.device)) return 2;
    if (strcmp(a.amp, "off") == 0) o.amp = KILN_AMP_OFF;
    else if (strcmp(a.amp, "fp16") == 0) o.amp = KILN_AMP_FP16;
    else if (strcmp(a.amp, "bf16") == 0) o.amp = KILN_AMP_BF16;
    else { fprintf(stderr, "kiln train: --amp must be off, fp16 or bf16\n"); return 2; }
    if (a.plot && train_plot_check(a.plot)) return 2;
    if (a.json && strcmp(a.json, "-") == 0 && kj_claim_stdout("train")) return 1;
    o.memory_limit = memory_limit; /* the step at --batch must fit it (src/train/memory.c) */
    o.memory_batch = a.batch;
    o.no_recompute = recompute == 0 ? 1 : recompute == 2 ? 2 : 0;
    if (max_batch) {
        /* planning only: the model without data, no step run */
        kiln_context *mctx = NULL;
        if (kiln_context_create(&mctx)) return 1;
        o.memory_limit = 0;
        const int mrc = train_max_batch(mctx, a.model, resnet ? depth : 0, a.classes, a.image_size, a.seed, a.dropout,
                                        a.zero_init_residual, a.label_smoothing, o, memory_limit, recompute, a.json);
        kiln_context_free(mctx);
        return mrc;
    }

    kiln_context *ctx = NULL;
    kiln_mnist d = {0};
    classifier_data cd = {0};
    const char *output = "logprobs"; /* what evaluation and --export compute */
    kiln_model *m = NULL, *fwd = NULL;
    kiln_trainer *t = NULL;
    kiln_loader *l = NULL;
    /* streaming image folders (--data-cache): the file lists, the test split's loader and
     * the training loader's ring (pinned on CUDA) */
    bool stream = false;
    kiln_image_list trl = {0}, tel = {0};
    kiln_loader *el = NULL;
    void **ring = NULL;
    int ring_n = 0;
    int stream_resize = 0, stream_channels = 3;
    FILE *lf = NULL;
    train_log tl = {0}; /* for --json and --plot */
    kj *jw = NULL;
    double warmup_ms = NAN, setup_ms = 0;
    int init_loaded = 0;
    int rc = 0;
    if (kiln_context_create(&ctx)) return 1;
    if (a.threads > 0) kiln_context_set_threads(ctx, a.threads);
    double t0 = now_ms();
    if (!mnist) {
        /* the model's input: (batch, C, S, S); resnets take RGB at --image-size (224) */
        int channels = 3;
        int64_t size = a.image_size ? a.image_size : 224, k = a.classes;
        if (!resnet) {
            kiln_dtype dt;
            int nd = 0;
            int64_t dims[8];
            if (kiln_model_load_onnx(ctx, a.model, &fwd)) { rc = fail(ctx, a.model); goto out; }
            if (kiln_model_num_inputs(fwd) != 1 || kiln_model_input_info(fwd, 0, &dt, &nd, dims) || nd != 4 ||
                dt != KILN_F32 || (dims[1] != 1 && dims[1] != 3)) {
                fprintf(stderr, "kiln train: %s: the model must take one f32 image input (batch, 1 or 3, H, W)\n", a.model);
                rc = 1;
                goto out;
            }
            channels = (int)dims[1];
            if (dims[2] > 0 || dims[3] > 0) {
                if (dims[2] != dims[3] || (a.image_size && a.image_size != dims[2])) {
                    fprintf(stderr, "kiln train: %s takes %lldx%lld images%s\n", a.model, (long long)dims[3],
                            (long long)dims[2], dims[2] != dims[3] ? "; kiln train takes square ones" : ", not --image-size");
                    rc = 1;
                    goto out;
                }
                size = dims[2];
            }
            if (kiln_model_output_info(fwd, 0, &dt, &nd, dims) || nd != 2 || dims[1] < 1) {
                fprintf(stderr, "kiln train: %s: output 0 (%s) must be the logits (batch, classes)\n", a.model,
                        kiln_model_output_name(fwd, 0));
                rc = 1;
                goto out;
            }
            if (a.classes && a.classes != dims[1]) {
                fprintf(stderr, "kiln train: %s has %lld classes, not --classes %lld\n", a.model, (long long)dims[1],
                        (long long)a.classes);
                rc = 1;
                goto out;
            }
            k = dims[1];
        }
        if (size > 4096) { fprintf(stderr, "kiln train: --image-size %lld is too large\n", (long long)size); rc = 2; goto out; }
        cd.aug = (kiln_augment_options){.size = (int)size, .flip = !a.no_flip};
        for (int c = 0; c < 3; c++) {
            /* one channel: ImageNet's mean of the three unless given */
            cd.aug.mean[c] = channels == 1 && !a.mean ? 0.449f : mean3[c];
            cd.aug.std[c] = channels == 1 && !a.std ? 0.226f : std3[c];
        }
        cd.augment = !a.no_augment;
        stream_resize = a.resize >= 0 ? a.resize : (int)lround(size * 256.0 / 224.0);
        if (image_folders(a.data) && strcmp(a.data_cache, "on") &&
            (rc = data_cache_decide(ctx, a.data, a.data_cache, channels, (int)size, stream_resize, cd.augment, &trl, &tel,
                                    &stream)))
            goto out;
        if (!image_folders(a.data) && strcmp(a.data_cache, "off") == 0) {
            fprintf(stderr, "kiln train: --data-cache off streams image folders (DIR/train/<class>/); %s is not one\n",
                    a.data);
            rc = 2;
            goto out;
        }
        if (stream && a.profile) {
            fprintf(stderr, "kiln train: --profile times a step on a data set in memory: add --data-cache on\n");
            rc = 2;
            goto out;
        }
        stream_channels = channels;
        if (stream) cd.n_classes = trl.n_classes;
        else if ((rc = load_classifier_data(ctx, a.data, channels, (int)size, a.resize, &cd))) goto out;
        /* the class count: the data set's unless --classes; every label must be below it */
        if (!k) k = cd.n_classes;
        const int64_t top = stream ? trl.n_classes - 1
                            : max_label(cd.train_labels) > max_label(cd.test_labels) ? max_label(cd.train_labels)
                                                                                    : max_label(cd.test_labels);
        if (k < cd.n_classes || top >= k) {
            fprintf(stderr, "kiln train: %s has %d classes (labels up to %lld) but the model has %lld outputs\n", a.data,
                    cd.n_classes, (long long)top, (long long)k);
            rc = 1;
            goto out;
        }
        if (k > cd.n_classes)
            printf("note: the model has %lld outputs for the data set's %d classes (the others are never a label)\n",
                   (long long)k, cd.n_classes);
        /* at the training size: with only the batch symbolic, autograd proves the residual
         * Adds' gradients need no sum (src/train/autograd.c) */
        if (resnet && kiln_model_resnet(ctx, depth, k, size, a.seed, a.zero_init_residual, &fwd)) {
            rc = fail(ctx, a.model);
            goto out;
        }
        output = kiln_model_output_name(fwd, 0);
        if (kiln_model_add_classifier_loss(fwd, output, a.label_smoothing, &m)) { rc = fail(ctx, a.model); goto out; }
        d.train_labels = cd.train_labels;
        d.test_images = cd.test_f32;
        d.test_labels = cd.test_labels;
        if (!stream && (rc = classifier_epoch(ctx, &cd, a.seed, 0, &d))) goto out;
        printf("%s: %lld classes, %dx%d %s input; %s\n", a.model, (long long)k, (int)size, (int)size,
               channels == 3 ? "RGB" : "grey",
               cd.augment ? "random-resized-crop + flip + normalize per epoch" : "no augmentation");
    } else if (image_folders(a.data)) {
        if ((rc = load_image_folders(ctx, a.data, &d))) goto out;
    } else if (kiln_mnist_load(ctx, a.data, KILN_F32, KILN_FASHION_MNIST_MEAN, KILN_FASHION_MNIST_STD, &d)) {
        rc = fail(ctx, a.data);
        goto out;
    }
    kiln_loader_options lo = kiln_loader_options_default();
    lo.batch_size = a.batch;
    lo.seed = a.seed;
    lo.shuffle = !a.no_shuffle;
    if (kiln_cli_dist_setup(ctx, &o, &lo, dist_timeout, bucket_mb, drop_last, &dist)) {
        rc = 1;
        goto out;
    }
    o.sync_bn = dist && sync_bn; /* alone, BatchNormalization's statistics are the batch's anyway */
    if (dist && kiln_dist_rank(dist) != 0) {
        /* rank 0 alone reports and writes files */
        a.save = a.json = a.plot = a.export_path = a.losses = NULL;
        if (!freopen("/dev/null", "w", stdout)) {
            rc = 1;
            goto out;
        }
    }
    if (stream) {
        /* the training split through the training transform (or, --no-augment, the
         * evaluation one), the test split through the evaluation transform, each batch
         * decoded by the loader's threads; on CUDA into pinned memory */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        /* CUDA: the cores (at most 16) decode while the GPU computes; CPU: 2, the cores train */
        lo.workers = a.data_workers                  ? a.data_workers
                     : o.device != KILN_DEVICE_CUDA ? 2
                     : cores > 16                   ? 16
                     : cores < 1                    ? 1
                                                    : (int)cores;
        lo.slots = lo.workers + 2;
        const int channels = stream_channels;
        const size_t xb = sizeof(float) * (size_t)channels * (size_t)cd.aug.size * (size_t)cd.aug.size * (size_t)a.batch,
                     yb = sizeof(int64_t) * (size_t)a.batch;
        ring = calloc(2 * (size_t)lo.slots, sizeof *ring);
        if (!ring) { fprintf(stderr, "kiln train: out of memory\n"); rc = 1; goto out; }
        ring_n = 2 * lo.slots;
        for (int i = 0; i < ring_n; i++)
            if (kiln_host_alloc(ctx, o.device, i < lo.slots ? xb : yb, &ring[i])) {
                rc = fail(ctx, "the loader's ring");
                goto out;
            }
        /* the trainer's pinned staging (its upload path) two batches large: each upload one
         * copy that need not wait for the step ahead of it (src/cuda/context.c) */
        if (o.device == KILN_DEVICE_CUDA && !getenv("KILN_CUDA_STAGING_MB")) {
            char mb[32];
            snprintf(mb, sizeof mb, "%zu", (2 * (xb + yb) >> 20) + 2);
            setenv("KILN_CUDA_STAGING_MB", mb, 0);
        }
        lo.slot_images = (float *const *)ring;
        lo.slot_labels = (int64_t *const *)(ring + lo.slots);
        kiln_image_stream_options io = {.channels = channels, .train = cd.augment, .resize = stream_resize,
                                        .dct_scale = true, .aug = cd.aug, .device_index = o.device_index};
        /* --decode: the GPU when asked (gpu) or by default (auto) on CUDA, if nvJPEG loads */
        if (!strcmp(a.decode, "gpu") && o.device != KILN_DEVICE_CUDA) {
            fprintf(stderr, "kiln train: --decode gpu decodes for training on a GPU (--device cuda)\n");
            rc = 2;
            goto out;
        }
        if (strcmp(a.decode, "cpu") && o.device == KILN_DEVICE_CUDA) {
            char why[512];
            if (channels != 3) {
                if (!strcmp(a.decode, "gpu"))
                    printf("GPU decoding makes RGB batches; the model takes %d channel(s): decoding JPEGs on the CPU\n",
                           channels);
            } else if (kiln_gpu_decode_available(why, sizeof why)) {
                io.decode = KILN_DECODE_GPU;
            } else {
                printf("%s: decoding JPEGs on the CPU\n", why);
            }
        }
        kiln_status lst = kiln_loader_create_images(ctx, &trl, &io, &lo, &l);
        if (lst && io.decode == KILN_DECODE_GPU && lst != KILN_ERR_INVALID_ARGUMENT) {
            /* nvJPEG loaded but its decoder could not be set up: the CPU path, said once */
            printf("GPU decoding unavailable (%s): decoding JPEGs on the CPU\n", kiln_context_message(ctx));
            io.decode = KILN_DECODE_CPU;
            lst = kiln_loader_create_images(ctx, &trl, &io, &lo, &l);
        }
        if (lst) {
            rc = fail(ctx, a.data);
            goto out;
        }
        const bool gpu_decode = io.decode == KILN_DECODE_GPU;
        kiln_loader_options eo = kiln_loader_options_default();
        eo.shuffle = false;
        eo.batch_size = a.batch < tel.n ? a.batch : tel.n > 0 ? tel.n : 1;
        eo.workers = lo.workers;
        eo.slots = lo.workers + 2;
        io.train = false;
        /* the evaluation session runs on device 0 (evaluate): its batches decoded there */
        if (o.device_index != 0) io.decode = KILN_DECODE_CPU;
        lst = kiln_loader_create_images(ctx, &tel, &io, &eo, &el);
        if (lst && io.decode == KILN_DECODE_GPU && lst != KILN_ERR_INVALID_ARGUMENT) {
            printf("GPU decoding of the test split unavailable (%s): decoding it on the CPU\n", kiln_context_message(ctx));
            io.decode = KILN_DECODE_CPU;
            lst = kiln_loader_create_images(ctx, &tel, &io, &eo, &el);
        }
        if (lst) {
            rc = fail(ctx, a.data);
            goto out;
        }
        kiln_load_stats dec;
        kiln_loader_stats(l, &dec, false); /* the decoder's name (its counts are all 0 yet) */
        printf("streaming: %d %s threads, %d batches in the ring (%s memory)%s%s%s\n", lo.workers,
               gpu_decode ? "file reading" : "decoding", lo.slots, o.device == KILN_DEVICE_CUDA ? "pinned" : "host",
               gpu_decode ? "; JPEGs decoded on the GPU by " : "", gpu_decode ? dec.decoder : "",
               gpu_decode ? " (KILN_NVJPEG_LOG=1: per batch)" : "");
    } else if (kiln_loader_create(ctx, d.train_images, d.train_labels, &lo, &l)) { /* e.g. --batch over the data set */
        rc = fail(ctx, a.data);
        goto out;
    }
    const int64_t steps = kiln_loader_steps_per_epoch(l);
    /* epochs of --step-size / --warmup in optimizer steps (StepLR steps once per epoch by
     * default; cosine and poly decay over the run) */
    if (apply_optim_flags(&of, a.lr, (steps + a.accumulate - 1) / a.accumulate, a.epochs, &o)) {
        rc = 2;
        goto out;
    }
    if (mnist && kiln_model_mnist_net(ctx, -1, a.seed, a.dropout, &m)) {
        rc = fail(ctx, "mnist-net");
        goto out;
    }
    if (a.init) {
        /* starting weights by name (e.g. PyTorch's state_dict saved as safetensors) */
        int loaded = 0;
        if (kiln_model_load_weights(m, a.init, &loaded)) {
            rc = fail(ctx, a.init);
            goto out;
        }
        if (!loaded) {
            /* training from random weights when the file was meant to set them is a silent
             * wrong answer: refuse */
            fprintf(stderr, "kiln train: --init %s: no tensor in the file is named as a weight of the model "
                            "(`kiln info` on an ONNX export lists the names)\n", a.init);
            rc = 1;
            goto out;
        }
        printf("initial weights: %d tensors from %s\n", loaded, a.init);
        init_loaded = loaded;
    }
    if (kiln_trainer_create(m, "loss", &o, &t)) {
        rc = fail(ctx, a.model);
        goto out;
    }
    /* batches decoded on the GPU: their memory is reused once the steps read it */
    if (stream) kiln_loader_set_stream(l, kiln_trainer_stream(t));
    if (a.losses && !(lf = fopen(a.losses, "w"))) {
        fprintf(stderr, "kiln train: cannot write %s\n", a.losses);
        rc = 1;
        goto out;
    }
    int64_t epoch = 0, step = 0, resume_epoch = 0, resume_step = 0;
    /* a checkpoint's position in samples of its epoch's order: the rest of that epoch on
     * this run's ranks and batch, whatever the saving run's (docs/train.md) */
    kiln_train_position rp = {.sample = -1};
    const int world = kiln_dist_size(dist);
    if (a.resume) {
        if (kiln_trainer_load_position(t, a.resume, &rp) ||
            (rp.sample >= 0 ? kiln_loader_seek_sample(l, rp.epoch, rp.sample) : kiln_loader_seek(l, rp.epoch, rp.step_in_epoch))) {
            rc = fail(ctx, a.resume);
            goto out;
        }
        kiln_loader_position(l, &epoch, &step);
        if (rp.sample >= 0 && (rp.world_size != world || rp.batch != a.batch)) {
            /* the schedule counts optimizer steps of this run's epochs: set the counters to
             * where a run of this world size and batch would be */
            printf("note: %s was saved by %lld rank(s) of batch %lld at sample %lld of epoch %lld; this run "
                   "goes on with %d rank(s) of batch %lld from step %lld of %lld (step counters set to this run's)\n",
                   a.resume, (long long)rp.world_size, (long long)rp.batch, (long long)rp.sample, (long long)rp.epoch + 1,
                   world, (long long)a.batch, (long long)step, (long long)steps);
            if (kiln_trainer_set_steps(t, epoch * steps + step)) {
                rc = fail(ctx, a.resume);
                goto out;
            }
        }
        /* kiln_trainer_train_epoch (CUDA, the data set resident) takes the resumed epoch up
         * where the loader does: the rest of its order, sharded over this run's ranks */
        if (rp.sample > 0 && epoch == rp.epoch && kiln_trainer_set_epoch_start(t, rp.epoch, rp.sample)) {
            rc = fail(ctx, a.resume);
            goto out;
        }
        if (epoch >= a.epochs) {
            /* a finished run: neither train nor print an accuracy not measured */
            char where[64];
            if (step) snprintf(where, sizeof where, "at step %lld of epoch %lld", (long long)step, (long long)epoch + 1);
            else snprintf(where, sizeof where, "at the end of epoch %lld", (long long)epoch);
            fprintf(stderr, "kiln train: nothing left to do: %s is %s%s %lld; pass --epochs M with M > %lld to train further\n",
                    a.resume, where, epoch == a.epochs && !step ? " of" : ", past --epochs", (long long)a.epochs,
                    (long long)epoch);
            rc = 1;
            goto out;
        }
        printf("resumed from %s at epoch %lld step %lld\n", a.resume, (long long)epoch + 1, (long long)step);
        resume_epoch = epoch;
        resume_step = step;
    }
    kiln_train_memory tmem; /* the step's planned peak (with what --memory-limit recomputes) */
    const bool have_mem = kiln_trainer_plan_memory(t, a.batch, 0, 0, &tmem) == KILN_OK;
    if (have_mem) print_train_memory("memory: step at", &tmem);
    else printf("memory: the step's peak could not be planned (%s)\n", kiln_context_message(ctx));
    if (memory_limit && have_mem)
        printf("memory limit %.2f GiB (%zu bytes): %s\n", memory_limit / 1073741824.0, memory_limit,
               tmem.peak_bytes <= memory_limit ? "fits" : "over (the plan's estimate)");
    kiln_train_stats ts;
    kiln_trainer_stats(t, &ts);
    setup_ms = now_ms() - t0;
    printf("%s: %lld parameters; %lld steps of %lld per epoch; setup %.0f ms\n", a.model, (long long)ts.param_count,
           (long long)steps, (long long)a.batch, setup_ms);
    if (o.device == KILN_DEVICE_CUDA && !a.no_warmup && !stream) {
        /* the one-time work (plans, algorithm searches, graph captures) before the first
         * epoch's clock starts, reported on its own line; the training state is untouched */
        const double tw = now_ms();
        const kiln_status wst = kiln_trainer_warmup(t, d.train_images, d.train_labels, a.batch);
        if (wst) {
            rc = fail(ctx, "warm-up");
            if (wst == KILN_ERR_OUT_OF_MEMORY && have_mem) train_oom_hint(ctx, &o, &tmem, memory_limit);
            goto out;
        }
        warmup_ms = now_ms() - tw;
        printf("warm-up: data set on the device, each batch shape's step planned, run once and captured "
               "(training state restored): %.0f ms\n", warmup_ms);
    }
    bool tty = isatty(STDOUT_FILENO);
    int64_t done = 0;
    double acc = 0;
    bool measured = false;
    for (; epoch < a.epochs; epoch++, step = 0) {
        /* the rate counts the steps this process runs (not those a resumed checkpoint skips) */
        const int64_t first = step;
        /* where this epoch stops: its end, or earlier where --max-steps runs out (the bar
         * counts to there, and its line ends there, before the summary lines) */
        const int64_t stop = a.max_steps && step + (a.max_steps - done) < steps ? step + (a.max_steps - done) : steps;
        if (!mnist && !stream && cd.augment && epoch != cd.epoch_ready) {
            /* this epoch's transformed training images; on the CPU a loader over them,
             * continuing the stream where the run is (its prefetched batches dropped) */
            kiln_loader_free(l);
            l = NULL;
            if ((rc = classifier_epoch(ctx, &cd, a.seed, epoch, &d))) goto out;
            if (kiln_loader_create(ctx, d.train_images, d.train_labels, &lo, &l) ||
                (epoch == rp.epoch && rp.sample >= 0 ? kiln_loader_seek_sample(l, epoch, rp.sample)
                                                     : kiln_loader_seek(l, epoch, step))) {
                rc = fail(ctx, "loader");
                goto out;
            }
        }
        double te = now_ms(), last = 0;
        float loss = 0;
        kiln_load_stats ls0;
        kiln_loader_stats(l, &ls0, true); /* this epoch's waits from here */
        if (o.device == KILN_DEVICE_CUDA && !stream) {
            /* the data set lives on the GPU; each step gathers its batch there. Read the
             * loss (a synchronization) only every 100 steps. */
            while (step < steps) {
                int64_t end = step + 100 < steps ? step + 100 : steps;
                if (a.max_steps && done + (end - step) > a.max_steps) end = step + (a.max_steps - done);
                const double lr = train_lr(t);
                if (kiln_trainer_train_epoch(t, d.train_images, d.train_labels, a.batch, a.seed, epoch, step, end, &loss)) {
                    rc = fail(ctx, "training");
                    goto out;
                }
                done += end - step;
                step = end;
                train_log_step(&tl, epoch * steps + step, epoch + 1, loss, lr);
                double now = now_ms();
                progress(tty, epoch, a.epochs, step, stop, (double)(step - first) * 1000.0 / (now - te + 1e-9), loss,
                         step == stop);
                if (a.max_steps && done >= a.max_steps) break;
            }
        }
        for (; (o.device == KILN_DEVICE_CPU || stream) && step < steps; step++) {
            const kiln_batch *b = NULL;
            kiln_tensor *in[2];
            if (kiln_loader_next(l, &b)) { rc = fail(ctx, "loader"); goto out; }
            in[0] = b->x;
            in[1] = b->y;
            const double lr = train_lr(t);
            /* on CUDA reading the loss waits for the step: only every 100 steps and at the end */
            const bool want = o.device == KILN_DEVICE_CPU || lf || (step + 1) % 100 == 0 || step + 1 == stop ||
                              (a.max_steps && done + 1 >= a.max_steps);
            kiln_status st = kiln_trainer_step(t, 2, in, want ? &loss : NULL);
            kiln_loader_release(l, b);
            if (lf && !st) fprintf(lf, "%.9g\n", loss);
            if (st) { rc = fail(ctx, "training step"); goto out; }
            if (want) train_log_step(&tl, epoch * steps + step + 1, epoch + 1, loss, lr);
            done++;
            double now = now_ms();
            if ((tty && now - last > 100) || (step + 1) % 100 == 0 || step + 1 == stop) {
                progress(tty, epoch, a.epochs, step + 1, stop, (double)(step + 1 - first) * 1000.0 / (now - te + 1e-9), loss,
                         step + 1 == stop);
                last = now;
            }
            if (a.max_steps && done >= a.max_steps) {
                step++;
                break;
            }
        }
        double secs = (now_ms() - te) / 1000;
        /* how long the steps waited for data, and the loader's rate (streaming: decoding) */
        kiln_load_stats ls;
        kiln_loader_stats(l, &ls, true);
        const bool used_loader = o.device == KILN_DEVICE_CPU || stream;
        const double data_rate = ls.busy_s > 0 ? (double)ls.samples / ls.busy_s * (ls.workers ? ls.workers : 1) : NAN;
        if (used_loader)
            printf("data: waited %.2f s of %.2f s (%.1f%%); %s %lld images at %.0f img/s (%d threads)\n", ls.wait_s,
                   secs, secs > 0 ? 100 * ls.wait_s / secs : 0.0, stream ? "decoded" : "gathered", (long long)ls.samples,
                   data_rate, ls.workers);
        if (used_loader && ls.decoder[0])
            printf("decode: %s on the GPU: %lld images, %lld on the CPU instead (not baseline RGB JPEGs, or refused); "
                   "%.2f s on the GPU (%.0f img/s)\n", ls.decoder, (long long)ls.gpu_images, (long long)ls.cpu_images,
                   ls.gpu_decode_s, ls.gpu_decode_s > 0 ? (double)ls.gpu_images / ls.gpu_decode_s : 0.0);
        if (a.save) {
            bool end = step >= steps;
            const kiln_train_position sp = {.epoch = end ? epoch + 1 : epoch,
                                            .sample = end ? 0 : kiln_loader_epoch_sample(l, epoch, step),
                                            .step_in_epoch = end ? 0 : step, .world_size = world, .batch = a.batch};
            if (kiln_trainer_save_position(t, a.save, &sp)) {
                rc = fail(ctx, a.save);
                goto out;
            }
        }
        /* data parallelism: rank 0 alone evaluates (the weights are the same everywhere; the
         * others' output goes nowhere, and their evaluation would sit on device 0) */
        if ((!dist || kiln_dist_rank(dist) == 0) && evaluate(ctx, t, &d, el, o.device, output, mnist ? 1000 : a.batch, &acc)) {
            rc = 1;
            goto out;
        }
        measured = true;
        printf("epoch %lld: %.2f s, last loss %.4f, test accuracy %.4f\n", (long long)epoch + 1, secs, loss, acc);
        train_log_epoch(&tl, &(train_epoch_rec){.epoch = epoch + 1, .steps = step - first, .time_s = secs,
                                                .steps_per_s = secs > 0 ? (double)(step - first) / secs : NAN,
                                                .last_loss = loss, .test_accuracy = acc,
                                                .data_wait_s = used_loader ? ls.wait_s : NAN,
                                                .data_img_s = used_loader ? data_rate : NAN,
                                                .end_step = epoch * steps + step});
        if (a.max_steps && done >= a.max_steps) break;
    }
    if (!measured) { /* not reached (a finished run is refused above), but never print an unmeasured accuracy */
        fprintf(stderr, "kiln train: no epoch ran: nothing was trained or evaluated\n");
        rc = 1;
        goto out;
    }
    printf("test accuracy: %.4f\n", acc);
    if (a.export_path && export_onnx(ctx, t, output, a.export_path)) {
        rc = 1;
        goto out;
    }
    fflush(stdout);
    if (a.json) {
        kiln_trainer_stats(t, &ts);
        if (!(jw = kj_new())) { fprintf(stderr, "kiln train: out of memory\n"); rc = 1; goto out; }
        json_train(jw, &(train_facts){.model = a.model, .data = a.data, .device = a.device, .amp = a.amp,
                                      .resume = a.resume, .save = a.save, .init = a.init, .init_tensors = init_loaded,
                                      .epochs = a.epochs, .batch = a.batch,
                                      .accumulate = a.accumulate, .max_steps = a.max_steps, .steps_per_epoch = steps,
                                      .param_count = ts.param_count, .resume_epoch = resume_epoch,
                                      .resume_step = resume_step, .seed = a.seed, .lr = o.lr, .setup_ms = setup_ms,
                                      .warmup_ms = warmup_ms, .dropout = a.dropout, .shuffle = !a.no_shuffle,
                                      .threads = a.threads, .log = &tl, .test_accuracy = acc, .stats = &ts});
        if (have_mem) json_train_memory(jw, "memory", &tmem);
        if (memory_limit) kj_int(jw, "memory_limit", (long long)memory_limit);
    }
    /* after the accuracy is reported: the profile restores the state, but nothing it does
     * can reach the numbers above */
    if (a.profile) rc = profile_step(ctx, t, &d, a.batch, o.device == KILN_DEVICE_CUDA, jw);
    if (!rc && a.plot) rc = train_plot(&tl, a.plot, a.plot_w, a.plot_h, a.data, a.batch);
    if (!rc && jw) {
        kj_end(jw);
        rc = kj_write(jw, a.json, "train");
    }
out:
    kj_free(jw);
    train_log_free(&tl);
    if (lf) fclose(lf);
    kiln_loader_free(l);
    kiln_loader_free(el);
    for (int i = 0; i < ring_n; i++) kiln_host_free(o.device, ring[i]);
    free(ring);
    kiln_image_list_free(&trl);
    kiln_image_list_free(&tel);
    kiln_trainer_free(t);
    kiln_dist_free(dist);
    kiln_model_free(m);
    kiln_model_free(fwd);
    if (!mnist) memset(&d, 0, sizeof d); /* cd's tensors */
    classifier_data_free(&cd);
    kiln_mnist_free(&d);
    kiln_context_free(ctx);
    return rc;
}

/* Element i of a numeric tensor as double (the CLI only sees the public API). */
static double elem(const kiln_tensor *t, int64_t i) {
    const void *p = kiln_tensor_data(t);
    switch (kiln_tensor_dtype(t)) {
    case KILN_F32: return ((const float *)p)[i];
    case KILN_F64: return ((const double *)p)[i];
    case KILN_I32: return ((const int32_t *)p)[i];
    case KILN_I64: return (double)((const int64_t *)p)[i];
    case KILN_U8: case KILN_BOOL: return ((const uint8_t *)p)[i];
    case KILN_I8: return ((const int8_t *)p)[i];
    default: return NAN;
    }
}

static int cmd_compare(int argc, char **argv) {
    const char *pa = NULL, *pb = NULL;
    double rtol = 1e-5, atol = 1e-6;
    static const struct option lo[] = {
        {"rtol", required_argument, NULL, 'r'}, {"atol", required_argument, NULL, 'a'}, {"help", no_argument, NULL, 'h'}, {0}};
    for (int c; (c = next_opt("compare", argc, argv, lo)) != -1;) {
        if (c == 'h') return cmd_usage("compare", stdout);
        else if (c == 'r') rtol = atof(optarg);
        else if (c == 'a') atol = atof(optarg);
        else return 2;
    }
    if (argc - optind != 2) {
        fprintf(stderr, "kiln compare: need two arrays, A.npy and B.npy\n");
        return cmd_usage("compare", stderr);
    }
    pa = argv[optind];
    pb = argv[optind + 1];
    kiln_context *ctx = NULL;
    kiln_tensor *a = NULL, *b = NULL;
    if (kiln_context_create(&ctx)) return 1;
    int rc = 1;
    if (kiln_tensor_load_npy(ctx, pa, &a)) {
        fail(ctx, pa);
        goto out;
    }
    if (kiln_tensor_load_npy(ctx, pb, &b)) {
        fail(ctx, pb);
        goto out;
    }
    int same = kiln_tensor_ndim(a) == kiln_tensor_ndim(b);
    for (int d = 0; same && d < kiln_tensor_ndim(a); d++) same = kiln_tensor_dim(a, d) == kiln_tensor_dim(b, d);
    if (!same) {
        fprintf(stderr, "kiln compare: shapes differ\n");
        goto out;
    }
    int64_t n = kiln_tensor_numel(a), bad = 0;
    double max_abs = 0, budget = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = elem(a, i), y = elem(b, i), err = fabs(x - y), tol = atol + rtol * fabs(y);
        if (isnan(x) || isnan(y) || err > tol) bad++;
        if (err > max_abs) max_abs = err;
        if (tol > 0 && err / tol > budget) budget = err / tol;
    }
    printf("%s vs %s: %lld elements, max abs err %.3g, %.1f%% of the error budget (rtol %g, atol %g): %s\n",
           pa, pb, (long long)n, max_abs, budget * 100, rtol, atol, bad ? "DIFFERENT" : "match");
    rc = bad ? 1 : 0;
out:
    kiln_tensor_free(a);
    kiln_tensor_free(b);
    kiln_context_free(ctx);
    return rc;
}

/* OpenMP's idle threads must sleep, not spin, or a machine whose cores other processes
 * keep busy makes multi-threaded runs 10-30x slower (kiln.h, "Busy machines"). libgomp
 * reads OMP_WAIT_POLICY only when it is loaded, so the command line sets it and starts
 * itself again, unless the caller chose a policy (or the restart is impossible: then it
 * runs on as it is). */
static void wait_passively(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1)) return;
    execv("/proc/self/exe", argv);
}

/* CUDA's versions are numbers like 12040 (12.4) and cuDNN's like 90100 (9.1.0). */
static void print_cuda_version(const char *what, long v) {
    if (v > 0) printf("%s %ld.%ld", what, v / 1000, v % 1000 / 10);
    else printf("%s unknown", what);
}

static void print_cudnn_version(const char *what, long v) {
    if (v >= 10000) printf("%s %ld.%ld.%ld", what, v / 10000, v % 10000 / 100, v % 100); /* cuDNN 9: M*10000 */
    else if (v > 0) printf("%s %ld.%ld.%ld", what, v / 1000, v % 1000 / 100, v % 100);  /* cuDNN 8: M*1000 */
    else printf("%s unknown", what);
}

#ifdef KILN_GIT_HASH_HEADER
#include "kiln_git_hash.h" /* written at each build (cmake/git_hash.cmake) */
#endif
#ifndef KILN_GIT_HASH
#define KILN_GIT_HASH "unknown"
#endif

static int cmd_version(int argc, char **argv) {
    static const struct option lo[] = {{"help", no_argument, NULL, 'h'}, {0}};
    for (int c; (c = next_opt("version", argc, argv, lo)) != -1;)
        return c == 'h' ? cmd_usage("version", stdout) : 2;
    kiln_build_info b;
    kiln_get_build_info(&b);
    printf("kiln %s\n", kiln_version());
    printf("git: %s\n", KILN_GIT_HASH);
    if (!b.cuda) {
        printf("CUDA: not built in (CPU only)\n");
        return 0;
    }
    printf("CUDA: built in\n");
    print_cuda_version("  CUDA runtime: built with", b.cuda_runtime_built);
    print_cuda_version(", loaded", b.cuda_runtime);
    if (b.cuda_driver > 0) print_cuda_version("; driver supports up to", b.cuda_driver);
    else printf("; no CUDA driver found");
    print_cudnn_version("\n  cuDNN: built with", b.cudnn_built);
    print_cudnn_version(", loaded", b.cudnn);
    printf("\n");
    return 0;
}

/* kiln cache show|clear: the autotune cache file (kiln_autotune_cache_path). */
static int cmd_cache(int argc, char **argv) {
    static const struct option lo[] = {{"help", no_argument, NULL, 'h'}, {0}};
    for (int c; (c = next_opt("cache", argc, argv, lo)) != -1;)
        return c == 'h' ? cmd_usage("cache", stdout) : 2;
    const char *what = optind < argc ? argv[optind] : NULL;
    if (!what) {
        fprintf(stderr, "kiln cache: show or clear?\n");
        return cmd_usage("cache", stderr);
    }
    if (strcmp(what, "show") != 0 && strcmp(what, "clear") != 0) {
        fprintf(stderr, "kiln cache: unknown action '%s' (show or clear)\n", what);
        return cmd_usage("cache", stderr);
    }
    if (optind + 1 < argc) {
        fprintf(stderr, "kiln cache: unexpected argument '%s'\n", argv[optind + 1]);
        return cmd_usage("cache", stderr);
    }
    kiln_build_info b;
    kiln_get_build_info(&b);
    char path[4096];
    if (!kiln_autotune_cache_path(path, sizeof path)) {
        printf("no autotune cache: the disk cache is off (KILN_CACHE_DIR is empty, or no HOME to put it under)\n");
        return 0;
    }
    struct stat st;
    const bool exists = stat(path, &st) == 0;
    long entries = 0;
    if (exists) {
        FILE *f = fopen(path, "r");
        if (f) {
            /* one choice a line; '#' lines are comments */
            char line[2048];
            bool start = true;
            while (fgets(line, sizeof line, f)) {
                if (start && line[0] != '#' && line[0] != '\n') entries++;
                start = strchr(line, '\n') != NULL;
            }
            fclose(f);
        }
    }
    if (strcmp(what, "show") == 0) {
        printf("autotune cache (cuDNN algorithm choices): %s\n", path);
        if (exists) printf("  %lld bytes, %ld entries\n", (long long)st.st_size, entries);
        else printf("  no file yet%s\n", b.cuda ? " (written by the first CUDA session that searches an algorithm)" : "");
        if (!b.cuda) printf("  (this kiln is built without CUDA: nothing here reads or writes it)\n");
        return 0;
    }
    if (!exists) {
        printf("no autotune cache at %s: nothing to remove\n", path);
        return 0;
    }
    if (remove(path) != 0) {
        fprintf(stderr, "kiln cache: cannot remove %s: %s\n", path, strerror(errno));
        return 1;
    }
    printf("removed %s (%lld bytes, %ld entries)\n", path, (long long)st.st_size, entries);
    return 0;
}

static int cmd_ops(int argc, char **argv) {
    static const struct option lo[] = {{"help", no_argument, NULL, 'h'}, {0}};
    for (int c; (c = next_opt("ops", argc, argv, lo)) != -1;)
        return c == 'h' ? cmd_usage("ops", stdout) : 2;
    if (optind < argc) {
        fprintf(stderr, "kiln ops: unexpected argument '%s'\n", argv[optind]);
        return cmd_usage("ops", stderr);
    }
    for (int i = 0; i < kiln_op_count(); i++) printf("%s\n", kiln_op_name(i));
    return 0;
}

int main(int argc, char **argv) {
    wait_passively(argv);
    if (argc < 2) return usage(stderr);
    const char *cmd = argv[1];
    /* each command's arguments with the command's name as their argv[0] (for getopt) */
    if (strcmp(cmd, "run") == 0) return cmd_run(argc - 1, argv + 1);
    if (strcmp(cmd, "train") == 0) return cmd_train(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0) return cmd_bench(argc - 1, argv + 1);
    if (strcmp(cmd, "launch") == 0) {
        int lrc = kiln_cli_launch(argc - 1, argv + 1);
        return lrc < 0 ? cmd_usage("launch", stdout) : lrc;
    }
    if (strcmp(cmd, "compare") == 0) return cmd_compare(argc - 1, argv + 1);
    if (strcmp(cmd, "info") == 0) return cmd_info(argc - 1, argv + 1);
    if (strcmp(cmd, "convert") == 0) return cmd_convert(argc - 1, argv + 1);
    if (strcmp(cmd, "cache") == 0) return cmd_cache(argc - 1, argv + 1);
    if (strcmp(cmd, "ops") == 0) return cmd_ops(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) return cmd_version(argc - 1, argv + 1);
    if (strcmp(cmd, "onnx-test") == 0) {
        for (int i = 2; i < argc; i++)
            if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return cmd_usage("onnx-test", stdout);
        return kiln_onnx_test_main(argc - 1, argv + 1, stdout);
    }
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        if (argc > 2 && strcmp(argv[2], "help") != 0 && strcmp(argv[2], "--help") != 0 && strcmp(argv[2], "-h") != 0) {
            for (int i = 0; i < N_COMMANDS; i++)
                if (strcmp(commands[i].name, argv[2]) == 0) return cmd_usage(argv[2], stdout);
            fprintf(stderr, "kiln help: unknown command '%s'\n", argv[2]);
            return usage(stderr);
        }
        return usage(stdout);
    }
    fprintf(stderr, "kiln: unknown %s '%s'\n", cmd[0] == '-' ? "option" : "command", cmd);
    return usage(stderr);
}

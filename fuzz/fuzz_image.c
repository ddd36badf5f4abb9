/*
 * fuzz_image.c — libFuzzer target for the JPEG and PNG decoders (src/data/images.c): any
 * bytes through kiln_image_decode, the first byte choosing the channels asked for (as
 * stored, grey or RGB) and, with bit 2 set, the decode at a reduced size as the streaming
 * loader asks for it (kiln_image_decode_scaled: a JPEG's DCT scale M/8 from a need of
 * (bits 3-5 + 1)/8 of each side, with bit 6 only a region that the second byte places,
 * as the loader decodes a crop; the decoded image must hold that need, be no larger than
 * the file's size and lie inside the frame it reports). A failure must leave a message and never be KILN_ERR_INTERNAL; a
 * decoded image must have sane dims, the channels asked for, and pixels ASan can read; a
 * centre crop and a resize of it must work. The GPU decoder's header probe (kiln_jpeg_probe)
 * runs on the same bytes: sane sizes, and the size of what it would send to nvJPEG is the
 * CPU decoder's. See fuzz/README.md.
 */
#include "data/data.h"
#include "kiln.h"
#include "kiln_tools.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static kiln_context *ctx;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (kiln_context_create(&ctx) != KILN_OK) abort();
    return 0;
}

static void broken(const char *what, kiln_status st) {
    fprintf(stderr, "broken contract: %s: %s '%s'\n", what, kiln_status_name(st), kiln_context_message(ctx));
    abort();
}

/* the need: eighths of each side, and (arg[1] != 0) a region from arg[1]'s bits */
static void need(void *arg, int w, int h, int *nw, int *nh, int region[4]) {
    const int *a = arg;
    *nw = (w * a[0] + 7) / 8;
    *nh = (h * a[0] + 7) / 8;
    if (a[1]) {
        region[0] = w * (a[1] & 3) / 4, region[1] = h * ((a[1] >> 2) & 3) / 4;
        region[2] = w / 2 + 1, region[3] = h / 3 + 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const int want[4] = {0, 1, 3, 0};
    const int channels = want[data[0] & 3];
    const bool scaled = data[0] & 4;
    int arg[2] = {((data[0] >> 3) & 7) + 1, size > 1 && (data[0] & 0x40) ? 1 + (data[1] & 15) : 0};
    const int eighths = arg[0];
    /* the GPU decoder's header probe on the same bytes: sane sizes, and what it sends to
     * nvJPEG is a 3-component image of the size the CPU decoder finds */
    kiln_jpeg_info info;
    const bool probed = kiln_jpeg_probe(data + 1, size - 1, &info);
    if (probed && (info.w < 1 || info.h < 1 || (info.gpu_ok && (info.components != 3 || info.w > KILN_IMAGE_MAX_SIDE ||
                                                                info.h > KILN_IMAGE_MAX_SIDE))))
        broken("kiln_jpeg_probe", KILN_OK);
    kiln_image_frame fr = {0};
    kiln_image im = {0};
    kiln_status st = scaled ? kiln_image_decode_scaled(ctx, data + 1, size - 1, "fuzz input", channels, need, arg, &im,
                                                       &fr)
                            : kiln_image_decode(ctx, data + 1, size - 1, "fuzz input", channels, &im);
    if (st) {
        if (st == KILN_ERR_INTERNAL || !kiln_context_message(ctx)[0]) broken("decode failed", st);
        if (im.pixels) broken("a failed decode left pixels", st);
        return 0;
    }
    if (im.w < 1 || im.h < 1 || im.w > KILN_IMAGE_MAX_SIDE || im.h > KILN_IMAGE_MAX_SIDE || !im.pixels ||
        (im.c != 1 && im.c != 3) || (channels && im.c != channels))
        broken("decoded image dims or channels", st);
    if (probed && info.gpu_ok && !scaled && (im.w != info.w || im.h != info.h))
        broken("kiln_jpeg_probe's size differs from the decoder's", st);
    if (scaled && (fr.scaled_w > fr.full_w || fr.scaled_h > fr.full_h || fr.scaled_w < (fr.full_w * eighths + 7) / 8 ||
                   fr.scaled_h < (fr.full_h * eighths + 7) / 8 || fr.x0 < 0 || fr.y0 < 0 ||
                   fr.x0 + im.w > fr.scaled_w || fr.y0 + im.h > fr.scaled_h || (!arg[1] && (im.w != fr.scaled_w ||
                                                                                           im.h != fr.scaled_h))))
        broken("a scaled decode's size", st);
    unsigned sum = 0;
    for (size_t i = 0; i < (size_t)im.w * im.h * im.c; i++) sum += im.pixels[i];
    /* small images: a crop and a resize (big ones would only slow the fuzzer down) */
    if ((int64_t)im.w * im.h <= 4096) {
        kiln_image out = {0};
        const int crop = (im.w < im.h ? im.w : im.h) / 2 + 1;
        st = kiln_image_resize_crop(ctx, &im, 0, crop, crop, &out);
        if (st || out.w != crop || out.h != crop) broken("centre crop", st);
        kiln_image_free(&out);
        st = kiln_image_resize_crop(ctx, &im, 7, 5, 5, &out);
        if (st || out.w != 5 || out.h != 5 || out.c != im.c) broken("resize and crop", st);
        for (int i = 0; i < 25 * out.c; i++) sum += out.pixels[i];
        kiln_image_free(&out);
    }
    kiln_image_free(&im);
    return (int)(sum & 0); /* the reads must happen: sum feeds the return */
}

/*
 * Restart markers as a row and column index into a JPEG's entropy-coded data (jpeg_restart.c).
 */
#ifndef STAVE_JPEG_RESTART_H
#define STAVE_JPEG_RESTART_H

#include <stddef.h>

#include "jpeg_errors.h"

/* A stand-alone JPEG holding only some restart intervals of another, and where it sits in that one. */
typedef struct {
    unsigned char *data; /* malloc'ed; the caller frees it */
    size_t size;
    long long origin_x_px; /* full-resolution position of its top-left pixel in the source image */
    long long origin_y_px;
} stave_subimage;

/* Cuts the restart intervals that cover the full-resolution box [x0, x1) x [y0, y1) out of a baseline
 * single-scan JPEG whose intervals line up with its MCU rows. Returns 1 and fills sub, or 0 when the
 * file has no usable intervals, the cut would keep the whole image, or anything looks wrong (the
 * caller then decodes the stream itself, and libjpeg reports what is wrong with it). Needs no GIL. */
int stave_cut_subimage(const unsigned char *data, size_t size, long long x0, long long y0, long long x1,
                       long long y1, stave_subimage *sub);

/* Lossless transcode: the same DCT coefficients (every decoded pixel identical), entropy-coded again
 * with optimized Huffman tables and a restart marker after every run of MCUs that divides an MCU row
 * and is at most max_interval_px pixels wide (one MCU when none is that narrow). APPn and COM markers
 * are kept. On success *out (malloc'ed) and *out_size are set and 0 is returned; -1 with err->message
 * otherwise. Needs no GIL. */
int stave_add_restarts(const unsigned char *data, size_t size, int max_interval_px, unsigned char **out,
                       size_t *out_size, stave_error_mgr *err);

#endif

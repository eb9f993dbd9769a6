/*
 * stave._jpeg_region: the host-side steps of the image loader that Python bindings cannot do well.
 *
 * decode_region(data, denom, x, y, w, h, out, strict=True, restarts=True)
 *     Decodes only a region of a JPEG. With restarts, a JPEG whose restart markers line up with its MCU
 *     rows is first cut down to the restart intervals around the region (jpeg_restart.c). Then
 *     libjpeg-turbo's partial-decode API: jpeg_crop_scanline()
 *     narrows IDCT, upsampling and colour conversion to the iMCU columns around the region,
 *     jpeg_skip_scanlines() skips the IDCT of the rows above it (their entropy-coded data must still
 *     be read: JPEG has no row index), and decoding stops after the region's last row. simplejpeg and
 *     Debian's TurboJPEG 2.1 API expose none of this. Returns (x0, width, height): the region starts
 *     at column x0 (x rounded down to an iMCU boundary) and is width x height RGB pixels, rows packed
 *     at width * 3 bytes in ``out``. With strict, a corrupt-data warning fails the decode.
 *
 * decode_crop(data, denom, x, y, w, h, margin, out, strict=True, restarts=True)
 *     The same decode, for a region ``margin`` pixels larger than the crop on every side (so that the
 *     crop's pixels equal a full decode's), writing only the crop's w x h pixels, rows packed: what the
 *     resize reads next, with no copy in between. Returns (w, h); a crop that sticks out of the image
 *     is an error.
 *
 * cut_restart_intervals(data, x0, y0, x1, y1)
 *     That cut on its own, for tests and inspection: (jpeg, origin_x, origin_y), or None.
 *
 * add_restarts(data, max_interval_px)
 *     A lossless transcode that gives a JPEG those restart markers, an interval at most max_interval_px
 *     wide (stave pack's stored form).
 *
 * planar_normalize(src, dst, scale, shift, flip)
 *     HxWx3 uint8 -> 3xHxW float32, dst = src * scale[c] - shift[c], mirrored when flip: one pass
 *     instead of a transpose, a cast and two broadcast passes (vectorized with AVX2 where the CPU has
 *     it, else a 256-entry table per channel).
 *
 * All release the GIL: the loader calls them from several decode threads at once.
 *
 * Input is untrusted: libjpeg's errors are caught (longjmp back to the caller, reported as ValueError
 * with libjpeg's message), corrupt-data warnings fail the decode, the number of scans is bounded
 * (a progressive file with thousands of tiny scans is a known CPU bomb), and the output buffer's size
 * is checked before any row is written.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jpeg_errors.h"
#include "jpeg_restart.h"

typedef struct {
    int x0, width, height;
} region_result;

/* A rectangle in the scaled image's pixels. */
typedef struct {
    int x, y, w, h;
} pixel_rect;

/* Runs without the GIL. Decodes the region (clamped into the image); without keep, its rows land in
 * out, widened to whole iMCU columns; with keep (a rectangle inside the region), only those pixels do,
 * packed at keep.w * 3 bytes per row, and decoding stops after its last row. Returns 0 on success,
 * -1 with err->message set. */
static int decode_stream(const unsigned char *data, size_t size, int denom, pixel_rect region, const pixel_rect *keep,
                         unsigned char *out, size_t out_size, int strict, stave_error_mgr *err, region_result *result) {
    struct jpeg_decompress_struct cinfo;
    stave_progress_mgr progress;
    JSAMPROW rows[16];
    /* volatile: assigned after setjmp and freed on the longjmp path */
    unsigned char *volatile staging = NULL;
    memset(&progress, 0, sizeof(progress));
    stave_init_errors(&cinfo.err, err);
    if (setjmp(err->jump)) {
        jpeg_destroy_decompress(&cinfo);
        free(staging);
        return -1;
    }
    jpeg_create_decompress(&cinfo);
    progress.pub.progress_monitor = stave_on_progress;
    cinfo.progress = &progress.pub;
    jpeg_mem_src(&cinfo, data, (unsigned long)size);
    cinfo.mem->max_memory_to_use = (long)MAX_MEMORY_BYTES;
    jpeg_read_header(&cinfo, TRUE);
    if ((long long)cinfo.image_width * (long long)cinfo.image_height > MAX_PIXELS) {
        snprintf(err->message, sizeof(err->message), "%ux%u image exceeds the %lld pixel limit (decompression bomb?)",
                 cinfo.image_width, cinfo.image_height, MAX_PIXELS);
        longjmp(err->jump, 1);
    }
    cinfo.out_color_space = JCS_RGB;
    cinfo.scale_num = 1;
    cinfo.scale_denom = (unsigned int)denom;
    jpeg_start_decompress(&cinfo);
    if (cinfo.output_components != 3) {
        snprintf(err->message, sizeof(err->message), "decoder produced %d components, not RGB", cinfo.output_components);
        longjmp(err->jump, 1);
    }
    long long out_w = (long long)cinfo.output_width, out_h = (long long)cinfo.output_height;
    /* Clamp the region into the scaled image (in 64 bits: x + w must not overflow for any int the
     * caller passes); an empty region is the caller's error. */
    long long left = region.x, top = region.y, right = (long long)region.x + region.w, bottom = (long long)region.y + region.h;
    if (left < 0) left = 0;
    if (top < 0) top = 0;
    if (right > out_w) right = out_w;
    if (bottom > out_h) bottom = out_h;
    if (right <= left || bottom <= top) {
        snprintf(err->message, sizeof(err->message), "region outside the %lldx%lld image", out_w, out_h);
        longjmp(err->jump, 1);
    }
    int y = (int)top, h = (int)(bottom - top);
    if (keep != NULL && (keep->w <= 0 || keep->h <= 0 || keep->x < left || keep->y < top ||
                         (long long)keep->x + keep->w > right || (long long)keep->y + keep->h > bottom)) {
        snprintf(err->message, sizeof(err->message), "crop %dx%d+%d+%d is not inside the decoded region", keep->w, keep->h,
                 keep->x, keep->y);
        longjmp(err->jump, 1);
    }
    JDIMENSION xoffset = (JDIMENSION)left, width = (JDIMENSION)(right - left);
    if ((long long)width < out_w) {
        /* Rounds xoffset down to an iMCU boundary and widens width to match. */
        jpeg_crop_scanline(&cinfo, &xoffset, &width);
    } else {
        xoffset = 0;
        width = (JDIMENSION)out_w;
    }
    size_t row_bytes = (size_t)width * 3; /* width <= 65535 after the crop: no overflow below */
    size_t needed = keep != NULL ? (size_t)keep->w * 3 * (size_t)keep->h : row_bytes * (size_t)h;
    if (needed > out_size) {
        snprintf(err->message, sizeof(err->message), "output buffer of %zu bytes is smaller than the %zu the region needs",
                 out_size, needed);
        longjmp(err->jump, 1);
    }
    int last_row = keep != NULL ? keep->y + keep->h : y + h; /* rows [y, last_row) are read */
    if (keep != NULL) {
        staging = malloc(row_bytes * 16);
        if (staging == NULL) {
            snprintf(err->message, sizeof(err->message), "out of memory");
            longjmp(err->jump, 1);
        }
    }
    if (y > 0) {
        JDIMENSION skipped = jpeg_skip_scanlines(&cinfo, (JDIMENSION)y);
        if (skipped != (JDIMENSION)y) {
            snprintf(err->message, sizeof(err->message), "could skip only %u of %d rows", skipped, y);
            longjmp(err->jump, 1);
        }
    }
    int row = y;
    while (row < last_row) {
        int batch = last_row - row;
        if (batch > 16) batch = 16;
        for (int i = 0; i < batch; i++)
            rows[i] = keep != NULL ? staging + (size_t)i * row_bytes : out + (size_t)(row - y + i) * row_bytes;
        JDIMENSION got = jpeg_read_scanlines(&cinfo, rows, (JDIMENSION)batch);
        if (got == 0) {
            snprintf(err->message, sizeof(err->message), "decoder stopped at row %d of %d", row, last_row);
            longjmp(err->jump, 1);
        }
        if (keep != NULL) {
            /* Margin rows and columns are decoded so that the kept pixels equal a full decode's; only
             * the kept ones are copied, rows packed, so the resize reads them without another copy. */
            for (int i = 0; i < (int)got; i++) {
                int r = row + i;
                if (r < keep->y) continue;
                const unsigned char *from = staging + (size_t)i * row_bytes + (size_t)(keep->x - (int)xoffset) * 3;
                memcpy(out + (size_t)(r - keep->y) * keep->w * 3, from, (size_t)keep->w * 3);
            }
        }
        row += (int)got;
    }
    /* The rows below are never decoded: abort instead of finishing the image. */
    jpeg_abort_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    free(staging);
    if (strict && err->warnings > 0) return -1;
    result->x0 = keep != NULL ? keep->x : (int)xoffset;
    result->width = keep != NULL ? keep->w : (int)width;
    result->height = keep != NULL ? keep->h : h;
    return 0;
}

/* Runs without the GIL. With use_restarts, a JPEG whose restart markers line up with its MCU rows is
 * first cut down to the intervals around the region (jpeg_restart.c), so libjpeg entropy-decodes only
 * those; if that cut cannot be made or its decode fails, the whole stream is decoded instead, and its
 * errors are the ones reported. */
static int decode_region_nogil(const unsigned char *data, size_t size, int denom, pixel_rect region, const pixel_rect *keep,
                               unsigned char *out, size_t out_size, int strict, int use_restarts,
                               stave_error_mgr *err, region_result *result) {
    stave_subimage sub;
    if (use_restarts && region.w > 0 && region.h > 0 &&
        stave_cut_subimage(data, size, (long long)region.x * denom, (long long)region.y * denom,
                           ((long long)region.x + region.w) * denom, ((long long)region.y + region.h) * denom, &sub)) {
        /* The cut starts on an MCU boundary, a multiple of 8 full-resolution pixels: exact at any scale. */
        int origin_x = (int)(sub.origin_x_px / denom), origin_y = (int)(sub.origin_y_px / denom);
        pixel_rect sub_region = {region.x - origin_x, region.y - origin_y, region.w, region.h};
        pixel_rect sub_keep = keep != NULL ? (pixel_rect){keep->x - origin_x, keep->y - origin_y, keep->w, keep->h} : region;
        int rc = decode_stream(sub.data, sub.size, denom, sub_region, keep != NULL ? &sub_keep : NULL, out, out_size, 1,
                               err, result);
        free(sub.data);
        if (rc == 0) {
            result->x0 += origin_x;
            return 0;
        }
    }
    return decode_stream(data, size, denom, region, keep, out, out_size, strict, err, result);
}

/* Releases both buffers; returns 1, or 0 with a ValueError set. */
static int run_decode(Py_buffer *data, Py_buffer *out, int denom, pixel_rect region, const pixel_rect *keep, int strict,
                      int use_restarts, region_result *result) {
    stave_error_mgr err;
    int rc;
    if (denom != 1 && denom != 2 && denom != 4 && denom != 8) {
        PyBuffer_Release(data);
        PyBuffer_Release(out);
        PyErr_Format(PyExc_ValueError, "denom must be 1, 2, 4 or 8, got %d", denom);
        return 0;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = decode_region_nogil((const unsigned char *)data->buf, (size_t)data->len, denom, region, keep,
                             (unsigned char *)out->buf, (size_t)out->len, strict, use_restarts, &err, result);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(data);
    PyBuffer_Release(out);
    if (rc != 0) {
        PyErr_Format(PyExc_ValueError, "%s", err.message[0] ? err.message : "JPEG decode failed");
        return 0;
    }
    return 1;
}

static PyObject *decode_region(PyObject *self, PyObject *args) {
    Py_buffer data, out;
    int denom, strict = 1, use_restarts = 1;
    pixel_rect region;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*iiiiiw*|pp", &data, &denom, &region.x, &region.y, &region.w, &region.h, &out, &strict,
                          &use_restarts))
        return NULL;
    region_result result = {0, 0, 0};
    if (!run_decode(&data, &out, denom, region, NULL, strict, use_restarts, &result)) return NULL;
    return Py_BuildValue("iii", result.x0, result.width, result.height);
}

static PyObject *decode_crop(PyObject *self, PyObject *args) {
    Py_buffer data, out;
    int denom, margin, strict = 1, use_restarts = 1;
    pixel_rect keep;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*iiiiiiw*|pp", &data, &denom, &keep.x, &keep.y, &keep.w, &keep.h, &margin, &out, &strict,
                          &use_restarts))
        return NULL;
    if (keep.x < 0 || keep.y < 0 || keep.w <= 0 || keep.h <= 0 || keep.w > 65535 || keep.h > 65535 || margin < 0 ||
        margin > 64 || keep.x > 65535 || keep.y > 65535) {
        PyBuffer_Release(&data);
        PyBuffer_Release(&out);
        PyErr_Format(PyExc_ValueError, "bad crop %dx%d+%d+%d (margin %d)", keep.w, keep.h, keep.x, keep.y, margin);
        return NULL;
    }
    /* Everything is below 2^17 here: no int overflow. The region is clamped into the image later. */
    pixel_rect region = {keep.x - margin, keep.y - margin, keep.w + 2 * margin, keep.h + 2 * margin};
    region_result result = {0, 0, 0};
    if (!run_decode(&data, &out, denom, region, &keep, strict, use_restarts, &result)) return NULL;
    return Py_BuildValue("ii", result.width, result.height);
}

static PyObject *cut_restart_intervals(PyObject *self, PyObject *args) {
    Py_buffer data;
    long long x0, y0, x1, y1;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*LLLL", &data, &x0, &y0, &x1, &y1)) return NULL;
    stave_subimage sub;
    int cut;
    Py_BEGIN_ALLOW_THREADS
    cut = stave_cut_subimage((const unsigned char *)data.buf, (size_t)data.len, x0, y0, x1, y1, &sub);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    if (!cut) Py_RETURN_NONE;
    PyObject *result = Py_BuildValue("(y#LL)", (const char *)sub.data, (Py_ssize_t)sub.size, sub.origin_x_px, sub.origin_y_px);
    free(sub.data);
    return result;
}

static PyObject *add_restarts(PyObject *self, PyObject *args) {
    Py_buffer data;
    int max_interval_px;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*i", &data, &max_interval_px)) return NULL;
    if (max_interval_px < 1 || max_interval_px > 65535) {
        PyBuffer_Release(&data);
        PyErr_Format(PyExc_ValueError, "max_interval_px must be in 1..65535, got %d", max_interval_px);
        return NULL;
    }
    stave_error_mgr err;
    unsigned char *out = NULL;
    size_t out_size = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stave_add_restarts((const unsigned char *)data.buf, (size_t)data.len, max_interval_px, &out, &out_size, &err);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    if (rc != 0) {
        PyErr_Format(PyExc_ValueError, "%s", err.message[0] ? err.message : "JPEG transcode failed");
        return NULL;
    }
    PyObject *result = PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)out_size);
    free(out);
    return result;
}

static void planar_normalize_table(const unsigned char *src, float *dst, Py_ssize_t height, Py_ssize_t width,
                                   const float *scale, const float *shift, int flip) {
    /* One table per channel: 768 floats stay in L1, and a load replaces the convert, multiply and
     * subtract; the values are bit-identical to torch's (v * scale - shift) in float32. */
    float table[3][256];
    for (int c = 0; c < 3; c++)
        for (int v = 0; v < 256; v++) table[c][v] = (float)v * scale[c] - shift[c];
    Py_ssize_t plane = height * width;
    for (Py_ssize_t r = 0; r < height; r++) {
        const unsigned char *row = src + r * width * 3;
        float *restrict d0 = dst + r * width, *restrict d1 = d0 + plane, *restrict d2 = d1 + plane;
        for (Py_ssize_t i = 0; i < width; i++) {
            const unsigned char *p = row + (flip ? width - 1 - i : i) * 3;
            d0[i] = table[0][p[0]];
            d1[i] = table[1][p[1]];
            d2[i] = table[2][p[2]];
        }
    }
}

#if defined(__x86_64__) || defined(__i386__)
#define HAVE_AVX2_PATH 1
/* Pixels per step of a mirrored row: three chunks of floats on the stack, in L1. */
#define MIRROR_CHUNK_PX 512

/* With AVX2, gcc vectorizes this loop (stride-3 loads, convert, multiply, subtract): twice the table's
 * speed. Two roundings, as in torch's separate mul_ and sub_ (built without FMA contraction). */
__attribute__((target("avx2"))) static void normalize_pixels_avx2(const unsigned char *restrict row, float *restrict d0,
                                                                 float *restrict d1, float *restrict d2, Py_ssize_t n,
                                                                 const float *scale, const float *shift) {
    const float s0 = scale[0], s1 = scale[1], s2 = scale[2], t0 = shift[0], t1 = shift[1], t2 = shift[2];
    for (Py_ssize_t i = 0; i < n; i++) {
        d0[i] = (float)row[3 * i] * s0 - t0;
        d1[i] = (float)row[3 * i + 1] * s1 - t1;
        d2[i] = (float)row[3 * i + 2] * s2 - t2;
    }
}

/* A reversed copy vectorizes where a reversed stride-3 load does not: mirror through a chunk. */
__attribute__((target("avx2"))) static void reverse_copy_avx2(const float *restrict from, float *restrict to, Py_ssize_t n) {
    const float *restrict last = from + n - 1;
    for (Py_ssize_t i = 0; i < n; i++) to[i] = last[-i];
}

static void planar_normalize_avx2(const unsigned char *src, float *dst, Py_ssize_t height, Py_ssize_t width,
                                  const float *scale, const float *shift, int flip) {
    Py_ssize_t plane = height * width;
    float chunk[3][MIRROR_CHUNK_PX];
    for (Py_ssize_t r = 0; r < height; r++) {
        const unsigned char *row = src + r * width * 3;
        float *d0 = dst + r * width, *d1 = d0 + plane, *d2 = d1 + plane;
        if (!flip) {
            normalize_pixels_avx2(row, d0, d1, d2, width, scale, shift);
            continue;
        }
        for (Py_ssize_t start = 0; start < width; start += MIRROR_CHUNK_PX) {
            Py_ssize_t n = width - start < MIRROR_CHUNK_PX ? width - start : MIRROR_CHUNK_PX;
            normalize_pixels_avx2(row + 3 * start, chunk[0], chunk[1], chunk[2], n, scale, shift);
            /* Source columns [start, start + n) land mirrored at [width - start - n, width - start). */
            Py_ssize_t at = width - start - n;
            reverse_copy_avx2(chunk[0], d0 + at, n);
            reverse_copy_avx2(chunk[1], d1 + at, n);
            reverse_copy_avx2(chunk[2], d2 + at, n);
        }
    }
}
#endif

static int use_avx2 = 0;

static void planar_normalize_nogil(const unsigned char *src, float *dst, Py_ssize_t height, Py_ssize_t width,
                                   const float *scale, const float *shift, int flip) {
#ifdef HAVE_AVX2_PATH
    if (use_avx2) {
        planar_normalize_avx2(src, dst, height, width, scale, shift, flip);
        return;
    }
#endif
    planar_normalize_table(src, dst, height, width, scale, shift, flip);
}

static PyObject *planar_normalize(PyObject *self, PyObject *args) {
    Py_buffer src, dst;
    Py_ssize_t height, width;
    float scale[3], shift[3];
    int flip;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*w*nn(fff)(fff)p", &src, &dst, &height, &width, &scale[0], &scale[1], &scale[2],
                          &shift[0], &shift[1], &shift[2], &flip))
        return NULL;
    /* Sizes checked in a way that cannot overflow: a plane of more than 2^40 pixels is refused first. */
    if (height <= 0 || width <= 0 || height > ((Py_ssize_t)1 << 20) || width > ((Py_ssize_t)1 << 20) ||
        src.len < height * width * 3 || dst.len < height * width * 3 * (Py_ssize_t)sizeof(float)) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        PyErr_Format(PyExc_ValueError, "buffers too small for a %zdx%zd image", height, width);
        return NULL;
    }
    if (((uintptr_t)dst.buf) % sizeof(float) != 0) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        PyErr_SetString(PyExc_ValueError, "dst is not aligned for float32");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    planar_normalize_nogil((const unsigned char *)src.buf, (float *)dst.buf, height, width, scale, shift, flip);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"decode_region", decode_region, METH_VARARGS,
     "decode_region(data, denom, x, y, w, h, out, strict=True, restarts=True) -> (x0, width, height): decode a region "
     "of a JPEG as RGB."},
    {"decode_crop", decode_crop, METH_VARARGS,
     "decode_crop(data, denom, x, y, w, h, margin, out, strict=True, restarts=True) -> (w, h): decode exactly the "
     "w x h crop at (x, y) of the scaled image, rows packed, decoding margin pixels around it for exactness."},
    {"cut_restart_intervals", cut_restart_intervals, METH_VARARGS,
     "cut_restart_intervals(data, x0, y0, x1, y1) -> (jpeg, origin_x, origin_y) or None: the stand-alone JPEG of the "
     "restart intervals covering a full-resolution box (what decode_region decodes), for tests and inspection."},
    {"add_restarts", add_restarts, METH_VARARGS,
     "add_restarts(data, max_interval_px) -> bytes: the same JPEG, losslessly re-coded with restart markers."},
    {"planar_normalize", planar_normalize, METH_VARARGS,
     "planar_normalize(src, dst, height, width, scale, shift, flip): HWC uint8 -> CHW float32 normalized."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_jpeg_region",
    "Partial JPEG decode (libjpeg-turbo) and a fused uint8 -> normalized float32 planar copy.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__jpeg_region(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
#ifdef HAVE_AVX2_PATH
    __builtin_cpu_init();
    use_avx2 = __builtin_cpu_supports("avx2") ? 1 : 0;
#endif
    PyModule_AddIntConstant(m, "NORMALIZE_AVX2", use_avx2);
    PyModule_AddIntConstant(m, "JPEG_LIB_VERSION", JPEG_LIB_VERSION);
#ifdef LIBJPEG_TURBO_VERSION_NUMBER
    PyModule_AddIntConstant(m, "LIBJPEG_TURBO_VERSION_NUMBER", LIBJPEG_TURBO_VERSION_NUMBER);
#endif
    PyModule_AddIntConstant(m, "MAX_SCANS", MAX_SCANS);
    return m;
}

/*
 * Restart markers as a row and column index into a JPEG's entropy-coded data.
 *
 * Huffman-coded JPEG data has no index: to reach a block, a decoder must decode every block before
 * it, so even a region decode (jpeg_crop_scanline + jpeg_skip_scanlines) pays the entropy decoding of
 * every row above the region's bottom, full width. Restart markers change that: at each marker the
 * DC predictors reset and the data is byte-aligned, so a run of restart intervals is a stand-alone
 * piece of entropy-coded data. When the intervals line up with MCU rows (an interval divides a row,
 * or is a whole number of rows), the intervals that cover a box form a smaller image of their own:
 * stave_cut_subimage() copies them behind the source's tables with a new frame size and renumbered
 * markers, and libjpeg then decodes only that. stave pack adds such markers with
 * stave_add_restarts(), a lossless transcode (the DCT coefficients are copied, not re-quantized).
 */
#include <stdlib.h>
#include <string.h>

#include <jerror.h>

#include "jpeg_restart.h"

#define MARKER_SOF0 0xC0
#define MARKER_SOF1 0xC1
#define MARKER_DHT 0xC4
#define MARKER_JPG 0xC8
#define MARKER_DAC 0xCC
#define MARKER_RST0 0xD0
#define MARKER_RST7 0xD7
#define MARKER_SOI 0xD8
#define MARKER_EOI 0xD9
#define MARKER_SOS 0xDA
#define MARKER_DRI 0xDD
#define MARKER_APP0 0xE0
#define MARKER_APP14 0xEE
#define MARKER_COM 0xFE

static unsigned read_u16(const unsigned char *p) { return ((unsigned)p[0] << 8) | p[1]; }

static void write_u16(unsigned char *p, unsigned v) {
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)(v & 0xFF);
}

/* Where the parts of a JPEG's header are, and the geometry of its one scan. */
typedef struct {
    size_t sof, sos_end;
    unsigned width, height, restart;
    unsigned mcu_w, mcu_h, mcus_per_row, mcu_rows;
} header_layout;

/* Accepts only what the cut handles: baseline or extended sequential Huffman, 8-bit, 1 or 3
 * components, all in one interleaved scan covering the whole spectrum, with restart intervals. */
static int parse_header(const unsigned char *data, size_t size, header_layout *h) {
    memset(h, 0, sizeof(*h));
    if (size < 4 || data[0] != 0xFF || data[1] != MARKER_SOI) return 0;
    size_t pos = 2, sos = 0;
    while (pos + 4 <= size) {
        if (data[pos] != 0xFF) return 0;
        unsigned marker = data[pos + 1];
        if (marker == 0xFF) { /* fill byte before a marker */
            pos++;
            continue;
        }
        if (marker == 0x00 || marker == 0x01 || marker == MARKER_SOI || marker == MARKER_EOI ||
            (marker >= MARKER_RST0 && marker <= MARKER_RST7))
            return 0;
        size_t length = read_u16(data + pos + 2);
        if (length < 2 || pos + 2 + length > size) return 0;
        if (marker == MARKER_SOF0 || marker == MARKER_SOF1) {
            if (h->sof || length < 8) return 0;
            h->sof = pos;
        } else if (marker >= 0xC0 && marker <= 0xCF && marker != MARKER_DHT && marker != MARKER_JPG) {
            return 0; /* progressive, lossless, hierarchical or arithmetic coding (DAC included) */
        } else if (marker == MARKER_DRI) {
            if (length != 4) return 0;
            h->restart = read_u16(data + pos + 4);
        } else if (marker == MARKER_SOS) {
            if (length < 3) return 0;
            sos = pos;
            h->sos_end = pos + 2 + length;
            break;
        }
        pos += 2 + length;
    }
    if (!h->sof || !sos || h->restart == 0) return 0;
    const unsigned char *sof = data + h->sof;
    unsigned components = sof[9];
    if (read_u16(sof + 2) != 8 + 3 * components || sof[4] != 8 || (components != 1 && components != 3)) return 0;
    h->height = read_u16(sof + 5);
    h->width = read_u16(sof + 7);
    if (h->width == 0 || h->height == 0) return 0; /* height 0: defined later by a DNL marker */
    if ((long long)h->width * h->height > MAX_PIXELS) return 0; /* libjpeg refuses it with a message */
    unsigned hmax = 1, vmax = 1;
    for (unsigned c = 0; c < components; c++) {
        unsigned hs = sof[11 + 3 * c] >> 4, vs = sof[11 + 3 * c] & 15;
        if (hs < 1 || hs > 4 || vs < 1 || vs > 4) return 0;
        if (hs > hmax) hmax = hs;
        if (vs > vmax) vmax = vs;
    }
    const unsigned char *scan = data + sos;
    unsigned in_scan = scan[4];
    if (in_scan != components || read_u16(scan + 2) != 6 + 2 * in_scan) return 0;
    const unsigned char *spectral = scan + 5 + 2 * in_scan;
    if (spectral[0] != 0 || spectral[1] != 63 || spectral[2] != 0) return 0;
    /* A one-component scan is not interleaved: its MCU is a single 8x8 block whatever the factors. */
    h->mcu_w = components == 1 ? 8 : 8 * hmax;
    h->mcu_h = components == 1 ? 8 : 8 * vmax;
    h->mcus_per_row = (h->width + h->mcu_w - 1) / h->mcu_w;
    h->mcu_rows = (h->height + h->mcu_h - 1) / h->mcu_h;
    return 1;
}

/* Size of the header the sub-image needs: everything before the scan's data except APPn other than
 * JFIF/Adobe (which decide the colour transform) and comments. Copies it to out when out is set. */
static size_t copy_header(const unsigned char *data, const header_layout *h, unsigned char *out, size_t *sof_at) {
    size_t pos = 2, n = 2;
    if (out) {
        out[0] = 0xFF;
        out[1] = MARKER_SOI;
    }
    while (pos < h->sos_end) {
        if (data[pos + 1] == 0xFF) { /* fill byte (parse_header checked the layout) */
            pos++;
            continue;
        }
        unsigned marker = data[pos + 1];
        size_t length = read_u16(data + pos + 2);
        int drop = marker == MARKER_COM || (marker > MARKER_APP0 && marker <= 0xEF && marker != MARKER_APP14);
        if (!drop) {
            if (out) {
                if (pos == h->sof) *sof_at = n;
                memcpy(out + n, data + pos, 2 + length);
            }
            n += 2 + length;
        }
        pos += 2 + length;
    }
    return n;
}

int stave_cut_subimage(const unsigned char *data, size_t size, long long x0, long long y0, long long x1,
                       long long y1, stave_subimage *sub) {
    header_layout h;
    memset(sub, 0, sizeof(*sub));
    if (!parse_header(data, size, &h)) return 0;
    if (x0 < 0) x0 = 0;
    if (y0 < 0) y0 = 0;
    if (x1 > h.width) x1 = h.width;
    if (y1 > h.height) y1 = h.height;
    if (x1 <= x0 || y1 <= y0) return 0;
    /* The interval grid: columns of intervals within a row, or rows of whole-row intervals. */
    unsigned cols_per_interval, rows_per_interval;
    if (h.mcus_per_row % h.restart == 0) {
        cols_per_interval = h.restart;
        rows_per_interval = 1;
    } else if (h.restart % h.mcus_per_row == 0) {
        cols_per_interval = h.mcus_per_row;
        rows_per_interval = h.restart / h.mcus_per_row;
    } else {
        return 0; /* intervals wrap across rows: no rectangle of them is an image */
    }
    unsigned grid_cols = h.mcus_per_row / cols_per_interval;
    unsigned grid_rows = (h.mcu_rows + rows_per_interval - 1) / rows_per_interval;
    unsigned span_w = cols_per_interval * h.mcu_w, span_h = rows_per_interval * h.mcu_h;
    unsigned j0 = (unsigned)(x0 / span_w), j1 = (unsigned)((x1 + span_w - 1) / span_w);
    unsigned r0 = (unsigned)(y0 / span_h), r1 = (unsigned)((y1 + span_h - 1) / span_h);
    if (j1 > grid_cols) j1 = grid_cols;
    if (r1 > grid_rows) r1 = grid_rows;
    if (j0 == 0 && j1 == grid_cols && r0 == 0 && r1 == grid_rows) return 0; /* nothing to cut away */

    /* Find where each interval up to the last one needed starts and ends. Inside entropy-coded data
     * 0xFF is followed by 0x00 (a stuffed byte), by 0xFF (fill) or by a marker. */
    size_t needed = (size_t)(r1 - 1) * grid_cols + j1;
    /* Each interval but the last ends in a 2-byte marker: a header promising more intervals than the
     * data could hold is refused before anything is allocated for them. */
    if (needed - 1 > (size - h.sos_end) / 2) return 0;
    size_t *starts = malloc(sizeof(size_t) * 2 * needed);
    if (starts == NULL) return 0;
    size_t *ends = starts + needed;
    size_t pos = h.sos_end;
    int ok = 1;
    for (size_t i = 0; i < needed && ok; i++) {
        starts[i] = pos;
        for (;;) {
            const unsigned char *ff = pos < size ? memchr(data + pos, 0xFF, size - pos) : NULL;
            if (ff == NULL || (size_t)(ff - data) + 1 >= size) {
                ok = 0; /* truncated: let libjpeg decode (and report) the whole stream */
                break;
            }
            size_t at = (size_t)(ff - data);
            unsigned next = data[at + 1];
            if (next == 0x00 || next == 0xFF) {
                pos = at + (next == 0x00 ? 2 : 1);
                continue;
            }
            ends[i] = at;
            if (next >= MARKER_RST0 && next <= MARKER_RST7) {
                /* Out-of-sequence numbering means damage: leave it to libjpeg's resynchronization. */
                if (next - MARKER_RST0 != i % 8) ok = 0;
                pos = at + 2;
            } else if (i + 1 < needed) {
                ok = 0; /* the scan ended early */
            }
            break;
        }
    }
    if (!ok) {
        free(starts);
        return 0;
    }
    size_t header_bytes = copy_header(data, &h, NULL, NULL);
    size_t payload = 0, intervals = 0;
    for (unsigned r = r0; r < r1; r++) {
        for (unsigned j = j0; j < j1; j++) {
            size_t i = (size_t)r * grid_cols + j;
            payload += ends[i] - starts[i];
            intervals++;
        }
    }
    size_t total = header_bytes + payload + 2 * intervals + 2;
    unsigned char *out = malloc(total);
    if (out == NULL) {
        free(starts);
        return 0;
    }
    size_t sof_at = 0;
    size_t n = copy_header(data, &h, out, &sof_at);
    unsigned long long right = (unsigned long long)j1 * span_w, bottom = (unsigned long long)r1 * span_h;
    unsigned sub_w = (unsigned)((right < h.width ? right : h.width) - (unsigned long long)j0 * span_w);
    unsigned sub_h = (unsigned)((bottom < h.height ? bottom : h.height) - (unsigned long long)r0 * span_h);
    write_u16(out + sof_at + 5, sub_h);
    write_u16(out + sof_at + 7, sub_w);
    size_t k = 0;
    for (unsigned r = r0; r < r1; r++) {
        for (unsigned j = j0; j < j1; j++) {
            size_t i = (size_t)r * grid_cols + j;
            memcpy(out + n, data + starts[i], ends[i] - starts[i]);
            n += ends[i] - starts[i];
            if (++k < intervals) { /* the decoder expects RST0, RST1, ... from the sub-image's start */
                out[n++] = 0xFF;
                out[n++] = (unsigned char)(MARKER_RST0 + (k - 1) % 8);
            }
        }
    }
    out[n++] = 0xFF;
    out[n++] = MARKER_EOI;
    free(starts);
    sub->data = out;
    sub->size = n;
    sub->origin_x_px = (long long)j0 * span_w;
    sub->origin_y_px = (long long)r0 * span_h;
    return 1;
}

/* A destination manager that grows a malloc'ed buffer the caller owns (libjpeg's jpeg_mem_dest keeps
 * its latest buffer private until the end, so an error mid-way would leak it). */
typedef struct {
    struct jpeg_destination_mgr pub;
    unsigned char *buffer;
    size_t capacity, limit;
} growing_destination;

static void destination_init(j_compress_ptr cinfo) {
    growing_destination *dest = (growing_destination *)cinfo->dest;
    dest->pub.next_output_byte = dest->buffer;
    dest->pub.free_in_buffer = dest->capacity;
}

static boolean destination_grow(j_compress_ptr cinfo) {
    growing_destination *dest = (growing_destination *)cinfo->dest;
    size_t used = dest->capacity, grown = dest->capacity * 2;
    unsigned char *bigger = grown <= dest->limit ? realloc(dest->buffer, grown) : NULL;
    if (bigger == NULL) {
        cinfo->err->msg_code = JERR_OUT_OF_MEMORY;
        cinfo->err->msg_parm.i[0] = 0;
        (*cinfo->err->error_exit)((j_common_ptr)cinfo);
    }
    dest->buffer = bigger;
    dest->capacity = grown;
    dest->pub.next_output_byte = bigger + used;
    dest->pub.free_in_buffer = grown - used;
    return TRUE;
}

static void destination_term(j_compress_ptr cinfo) { (void)cinfo; }

static int is_app_marker(jpeg_saved_marker_ptr m, int code, const char *tag, unsigned tag_len) {
    return m->marker == code && m->data_length >= tag_len && memcmp(m->data, tag, tag_len) == 0;
}

int stave_add_restarts(const unsigned char *data, size_t size, int max_interval_px, unsigned char **out,
                       size_t *out_size, stave_error_mgr *err) {
    struct jpeg_decompress_struct src;
    struct jpeg_compress_struct dst;
    stave_progress_mgr progress;
    growing_destination dest;
    memset(&src, 0, sizeof(src));
    memset(&dst, 0, sizeof(dst));
    memset(&progress, 0, sizeof(progress));
    memset(&dest, 0, sizeof(dest));
    *out = NULL;
    *out_size = 0;
    stave_init_errors(&src.err, err);
    dst.err = src.err;
    if (setjmp(err->jump)) {
        jpeg_destroy_compress(&dst);
        jpeg_destroy_decompress(&src);
        free(dest.buffer);
        return -1;
    }
    jpeg_create_decompress(&src);
    jpeg_create_compress(&dst);
    progress.pub.progress_monitor = stave_on_progress;
    src.progress = &progress.pub;
    src.mem->max_memory_to_use = (long)MAX_MEMORY_BYTES;
    dst.mem->max_memory_to_use = (long)MAX_MEMORY_BYTES;
    jpeg_mem_src(&src, data, (unsigned long)size);
    jpeg_save_markers(&src, JPEG_COM, 0xFFFF);
    for (int m = 0; m < 16; m++) jpeg_save_markers(&src, JPEG_APP0 + m, 0xFFFF);
    jpeg_read_header(&src, TRUE);
    if ((long long)src.image_width * (long long)src.image_height > MAX_PIXELS) {
        snprintf(err->message, sizeof(err->message), "%ux%u image exceeds the %lld pixel limit (decompression bomb?)",
                 src.image_width, src.image_height, MAX_PIXELS);
        longjmp(err->jump, 1);
    }
    if (src.num_components != 1 && src.num_components != 3) {
        snprintf(err->message, sizeof(err->message), "%d components: only grey and colour JPEGs get restart markers",
                 src.num_components);
        longjmp(err->jump, 1);
    }
    jvirt_barray_ptr *coefficients = jpeg_read_coefficients(&src);
    if (err->warnings > 0) longjmp(err->jump, 1); /* corrupt data: keep the file as it is */
    jpeg_copy_critical_parameters(&src, &dst);
    unsigned mcu_w = src.num_components == 1 ? 8 : 8 * (unsigned)src.max_h_samp_factor;
    unsigned mcus_per_row = (src.image_width + mcu_w - 1) / mcu_w;
    unsigned interval = 1;
    unsigned max_mcus = (unsigned)max_interval_px / mcu_w;
    for (unsigned d = max_mcus > 0 ? max_mcus : 1; d >= 1; d--) {
        if (mcus_per_row % d == 0) {
            interval = d;
            break;
        }
    }
    dst.restart_interval = interval;
    dst.optimize_coding = TRUE;
    /* Room for the input plus the markers; anything much larger means something is off. */
    unsigned long long mcus = (unsigned long long)mcus_per_row * ((src.image_height + 8 * src.max_v_samp_factor - 1) /
                                                                  (8 * (unsigned)src.max_v_samp_factor));
    dest.limit = 2 * size + 8 * mcus + ((size_t)1 << 20);
    dest.capacity = size + size / 8 + 4096;
    dest.buffer = malloc(dest.capacity);
    if (dest.buffer == NULL) {
        snprintf(err->message, sizeof(err->message), "out of memory");
        longjmp(err->jump, 1);
    }
    dest.pub.init_destination = destination_init;
    dest.pub.empty_output_buffer = destination_grow;
    dest.pub.term_destination = destination_term;
    dst.dest = &dest.pub;
    jpeg_write_coefficients(&dst, coefficients);
    for (jpeg_saved_marker_ptr m = src.marker_list; m != NULL; m = m->next) {
        /* jpeg_copy_critical_parameters already asked for these two; a copy would duplicate them. */
        if (dst.write_JFIF_header && is_app_marker(m, JPEG_APP0, "JFIF", 5)) continue;
        if (dst.write_Adobe_marker && is_app_marker(m, JPEG_APP0 + 14, "Adobe", 5)) continue;
        jpeg_write_marker(&dst, m->marker, m->data, m->data_length);
    }
    jpeg_finish_compress(&dst);
    jpeg_finish_decompress(&src);
    *out_size = dest.capacity - dest.pub.free_in_buffer;
    *out = dest.buffer;
    dest.buffer = NULL;
    jpeg_destroy_compress(&dst);
    jpeg_destroy_decompress(&src);
    return 0;
}

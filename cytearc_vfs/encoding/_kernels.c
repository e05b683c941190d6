/*
 * Compiled inner loops of the gather reader (cytearc_vfs._kernels).
 *
 * gather_columns(src, src_cols, itemsize, index, out)
 *
 *     out[i, j] = src[i, index[j]] for every row i, with src a C-contiguous
 *     block of rows x src_cols items of itemsize bytes (1, 2, 4 or 8) and
 *     out a C-contiguous block of rows x len(index) items. index holds int64
 *     source columns, each in [0, src_cols): a composite's column map, whose
 *     absent features point at an all-zero source column.
 *
 * gather_columns(src, src_cols, itemsize, index, out, zero_column, plan)
 * plan_gather(index, src_cols, itemsize, zero_column)
 *
 *     The same, where src column zero_column is known to hold only zeros
 *     (the all-zero column of a strip: its items are written as zero), with
 *     the shuffle plan that plan_gather made for the same arguments.
 *
 * numpy's np.take does the same through a generic per-item loop that checks
 * and clips every index; the item loop here, with the indices checked once
 * per call, is ~1.6x faster for 1- and 2-byte counts and runs without the
 * GIL, so the placements of two sources go on in parallel. The module needs
 * no numpy headers: the arrays come in through the buffer protocol.
 *
 * With a plan, on x86-64 (SSSE3, every x86-64 CPU since 2006), ~4x faster
 * than the item loop for 1- and 2-byte counts of a composite's column maps
 * (1.7x for 4-byte; none is made for 8-byte items): a source that holds a
 * subset of the union's features, in the union's order, fills each 16
 * output bytes from one or two 16-byte windows of its row (its features are
 * nearly consecutive there; the absent ones are zeros). The plan holds, per
 * 16-byte output block, its window starts and byte shuffles (pshufb; 0x80
 * writes a zero byte), so a block is a load and a shuffle per window and
 * one store, not 16 (uint8) or 8 (uint16) item copies. It is made once per
 * column map (it costs about the item loop's gather of 11 rows) and checked
 * on every call: a plan that does not match the arguments is refused; on a
 * machine without SSSE3 none is made (None). Blocks whose columns need more
 * windows (features in another order, or the end of a union, where later
 * sources' own features are listed) and the row's last partial block are
 * copied item by item.
 *
 * scatter_columns(src, src_cols, itemsize, cells, out, out_cols, rows, targets)
 *
 *     out[rows[i], targets[j]] = src[j, cells[i]]: a feature-major strip's
 *     selected cells become output rows (below, where it is defined).
 *
 * read_row_frames(fd, chunk_rows, offsets, sizes, counts, rows, out, rows_per_frame,
 *                 block_bytes)
 *
 *     Reads the frames of the wanted rows of row-framed inner chunks
 *     (row_frames.py) of one shard file into out, one after another: for
 *     each chunk i (offsets[i], sizes[i]: its bytes in the file), the frame
 *     index at its end, then only the frames that hold its counts[i] wanted
 *     rows (the next counts[i] entries of rows, sorted, local to the chunk;
 *     consecutive frames in one pread). Frames hold rows_per_frame rows
 *     (default 1; the last frame of a chunk may hold fewer). Returns (frame
 *     bytes written, bytes read), or None when a chunk is not framed so
 *     (e.g. rewritten by zarr as one frame): the caller then reads whole
 *     chunks.
 *
 *     With block_bytes > 0 the chunks are Blosc containers of zstd blocks of
 *     block_bytes and a crc32c (blosc_blocks.py) instead: the index is the
 *     Blosc header and block starts at the chunk's beginning, and each
 *     block's 4-byte size before its frame is dropped from out, so out holds
 *     the frames one after another as with row frames. A block must end
 *     where the next begins, so a damaged table never reads another block.
 *     None also when a chunk is not laid out so (other flags or sizes) or a
 *     wanted block is stored raw.
 *
 * read_ranges(fd, offsets, sizes, out)
 *
 *     Reads the byte ranges offsets[i]:offsets[i] + sizes[i] of one file
 *     into out, one after another (ranges that follow each other in the
 *     file in one pread), without the GIL: the touched inner chunks of a
 *     portable shard (a few KiB each, thousands per read of random cells).
 *     Returns the bytes read; EOFError where the file ends first.
 *
 * scatter_entries(out, width, itemsize, cell_major, out_majors, bounds, minor, minor_size,
 *                 values, lookup)
 *
 *     The entries of a CSR (cell_major) or CSC element's majors into a dense
 *     block out of rows x width items: major i's entries are
 *     bounds[i]:bounds[i + 1] of minor (int32 or int64: minor_size) and
 *     values (already of out's item type); each goes to row out_majors[i],
 *     column lookup[minor] (or minor where lookup is empty; -1: not
 *     selected), or transposed for CSC. Indices out of range raise
 *     IndexError (a damaged element), with the entries before them written.
 *     Without the GIL: numpy's flat fancy assignment, with the owner and
 *     target arrays it needs, took ~25 ms a source for 1,000 cells.
 *
 * nonzero_rows(block, width, itemsize, is_float, out_cols, row, at, indptr, indices, data)
 *
 *     A dense block of rows x width items as CSR, for sparse reads of
 *     sources without a sparse encoding: from block row `row` and entry
 *     `at` on, each row's non-zero items are written as entries (column
 *     out_cols[j], int64 in, written as int32 or int64 by the item size of
 *     indices; the value into data) and indptr[row + 1] set (int64, one
 *     more than the rows), until the rows end or a row's entries would not
 *     fit in data with one slot to spare (the fill is branch-free: zeros
 *     are written one past the entries and overwritten); returns (row, at) where it stopped, so the caller grows
 *     the arrays and goes on. Items are integers of 1, 2, 4 or 8 bytes, or
 *     (is_float) floats of 4 or 8 bytes, where -0.0 is zero and NaN is not
 *     (as numpy's nonzero). Zeros are skipped 32 bytes at a time, each row is
 *     counted and then filled while it is in the core's cache, and it runs
 *     without the GIL: numpy's flatnonzero and the row and column arithmetic
 *     after it made ~1 GB/s of a 2%-dense block on one thread.
 *
 * The Python reader did the same with one pread per chunk (the whole chunk,
 * ~26x the frames it needs for a gene of a 26-gene countsT chunk) and some
 * microseconds of Python per chunk; every pread dropped and retook the GIL,
 * waiting for the other decoding thread's Python. Here a whole job runs
 * without the GIL.
 *
 * The package works without this module (it is built only where a C
 * compiler is available): the reader then uses np.take and Python reads.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifndef _WIN32
#include <errno.h>
#include <unistd.h>
#endif

#define GATHER_ITEMS(T, from_row, to_row, first, stop)                        \
    do {                                                                     \
        const T *from_ = (const T *)(from_row);                              \
        T *to_ = (T *)(to_row);                                              \
        for (Py_ssize_t j_ = (first); j_ < (stop); j_++) {                   \
            to_[j_] = from_[columns[j_]];                                    \
        }                                                                    \
    } while (0)

/* Items [first, stop) of one row, item by item. */
static void
gather_items(const char *from, char *to, const int64_t *columns, Py_ssize_t itemsize,
             Py_ssize_t first, Py_ssize_t stop)
{
    switch (itemsize) {
    case 1:
        GATHER_ITEMS(uint8_t, from, to, first, stop);
        break;
    case 2:
        GATHER_ITEMS(uint16_t, from, to, first, stop);
        break;
    case 4:
        GATHER_ITEMS(uint32_t, from, to, first, stop);
        break;
    default:
        GATHER_ITEMS(uint64_t, from, to, first, stop);
        break;
    }
}


#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(CYTEARC_NO_SHUFFLES)
#include <tmmintrin.h>
#define SHUFFLE_BLOCKS 1
#define BLOCK 16

/*
 * A shuffle plan (plan_gather): a header of PLAN_HEADER int64 (PLAN_MAGIC,
 * width, src_cols, itemsize, zero_column, blocks), then for each full
 * 16-byte output block the byte offsets of its at most two 16-byte source
 * windows in a row (window_at[2b], window_at[2b+1]; -1: no second window;
 * -1 first: copy the block item by item), then one 16-byte shuffle per
 * window, 0x80 where the other window (or a zero) fills the byte. Blocks
 * take two windows where a source has a few features of its own between
 * the union's (a union lists the first source's features first).
 */
#define PLAN_MAGIC 0x43565346504C414ELL
#define PLAN_HEADER 6

static void
plan_block(const int64_t *block, Py_ssize_t per_block, Py_ssize_t src_cols, Py_ssize_t itemsize,
           int64_t zero_column, int64_t *starts, unsigned char *shuffle)
{
    int window_of[BLOCK]; /* 0 or 1 for each item; -1 for a zero */
    int64_t low[2] = {INT64_MAX, INT64_MAX};
    for (Py_ssize_t t = 0; t < per_block; t++) {
        window_of[t] = -1;
        if (block[t] != zero_column && block[t] < low[0]) {
            low[0] = block[t];
        }
    }
    for (Py_ssize_t t = 0; t < per_block; t++) {
        if (block[t] != zero_column) {
            if (block[t] - low[0] < per_block) {
                window_of[t] = 0;
            } else if (block[t] < low[1]) {
                low[1] = block[t];
            }
        }
    }
    for (Py_ssize_t t = 0; t < per_block; t++) {
        if (block[t] != zero_column && window_of[t] < 0) {
            if (block[t] - low[1] >= per_block) {
                starts[0] = starts[1] = -1; /* three windows or more */
                return;
            }
            window_of[t] = 1;
        }
    }
    memset(shuffle, 0x80, 2 * BLOCK);
    starts[0] = 0; /* a block of zeros: window 0 shuffles in none */
    starts[1] = -1;
    for (int w = 0; w < 2; w++) {
        if (low[w] == INT64_MAX) {
            continue;
        }
        /* a window must end inside the row: start it earlier near the end */
        const int64_t start = low[w] < src_cols - per_block ? low[w] : src_cols - per_block;
        starts[w] = start * itemsize;
        for (Py_ssize_t t = 0; t < per_block; t++) {
            for (Py_ssize_t q = 0; window_of[t] == w && q < itemsize; q++) {
                shuffle[w * BLOCK + t * itemsize + q] =
                    (unsigned char)((block[t] - start) * itemsize + q);
            }
        }
    }
}

/*
 * The rows go in groups of ROW_GROUP: each block's plan (48 bytes, more
 * than the block's source and output bytes) is read once for the group
 * (the gather of a strip ~1.3x faster than row by row).
 */
#define ROW_GROUP 8

__attribute__((target("ssse3"))) static void
shuffle_rows(const char *src_bytes, Py_ssize_t src_row, char *out_bytes, Py_ssize_t out_row,
             Py_ssize_t rows, const int64_t *columns, Py_ssize_t width, Py_ssize_t itemsize,
             Py_ssize_t blocks, const int64_t *window_at, const unsigned char *shuffles)
{
    const Py_ssize_t per_block = BLOCK / itemsize;
    for (Py_ssize_t i0 = 0; i0 < rows; i0 += ROW_GROUP) {
        const Py_ssize_t group = rows - i0 < ROW_GROUP ? rows - i0 : ROW_GROUP;
        const char *from = src_bytes + i0 * src_row;
        char *to = out_bytes + i0 * out_row;
        for (Py_ssize_t b = 0; b < blocks; b++) {
            const int64_t first = window_at[2 * b], second = window_at[2 * b + 1];
            if (first < 0) {
                for (Py_ssize_t g = 0; g < group; g++) {
                    gather_items(from + g * src_row, to + g * out_row, columns, itemsize,
                                 b * per_block, (b + 1) * per_block);
                }
                continue;
            }
            const __m128i first_shuffle =
                _mm_loadu_si128((const __m128i *)(shuffles + 2 * b * BLOCK));
            const __m128i second_shuffle =
                _mm_loadu_si128((const __m128i *)(shuffles + 2 * b * BLOCK + BLOCK));
            const char *window = from + first;
            char *block = to + b * BLOCK;
            if (second < 0) {
                for (Py_ssize_t g = 0; g < group; g++) {
                    const __m128i items = _mm_loadu_si128((const __m128i *)(window + g * src_row));
                    _mm_storeu_si128((__m128i *)(block + g * out_row),
                                     _mm_shuffle_epi8(items, first_shuffle));
                }
                continue;
            }
            const char *other = from + second;
            for (Py_ssize_t g = 0; g < group; g++) {
                const __m128i items = _mm_or_si128(
                    _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(window + g * src_row)),
                                     first_shuffle),
                    _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(other + g * src_row)),
                                     second_shuffle));
                _mm_storeu_si128((__m128i *)(block + g * out_row), items);
            }
        }
        for (Py_ssize_t g = 0; g < group; g++) {
            gather_items(from + g * src_row, to + g * out_row, columns, itemsize,
                         blocks * per_block, width);
        }
    }
}
#endif

static PyObject *
gather_columns(PyObject *self, PyObject *args)
{
    Py_buffer src, index, out;
    Py_ssize_t src_cols, itemsize;
    long long zero_column = -1;
    PyObject *plan_object = Py_None;
    PyObject *result = NULL;

    (void)self;
    if (!PyArg_ParseTuple(args, "y*nny*w*|LO", &src, &src_cols, &itemsize, &index, &out,
                          &zero_column, &plan_object)) {
        return NULL;
    }
    if (itemsize != 1 && itemsize != 2 && itemsize != 4 && itemsize != 8) {
        PyErr_Format(PyExc_ValueError, "gather_columns: itemsize %zd is not 1, 2, 4 or 8",
                     itemsize);
        goto done;
    }
    if (index.len % (Py_ssize_t)sizeof(int64_t) != 0 || src_cols < 1) {
        PyErr_SetString(PyExc_ValueError,
                        "gather_columns: index must be int64 and src_cols positive");
        goto done;
    }
    {
        const Py_ssize_t width = index.len / (Py_ssize_t)sizeof(int64_t);
        const Py_ssize_t src_row = src_cols * itemsize;
        const Py_ssize_t out_row = width * itemsize;
        const Py_ssize_t rows = src.len / src_row;
        const int64_t *columns = (const int64_t *)index.buf;
        const char *src_bytes = (const char *)src.buf;
        char *out_bytes = (char *)out.buf;

        if (rows * src_row != src.len || out.len != rows * out_row || src_row < 0) {
            PyErr_Format(PyExc_ValueError,
                         "gather_columns: %zd source bytes and %zd output bytes are not the "
                         "same rows of %zd and %zd items",
                         src.len, out.len, src_cols, width);
            goto done;
        }
        for (Py_ssize_t j = 0; j < width; j++) {
            if (columns[j] < 0 || columns[j] >= src_cols) {
                PyErr_Format(PyExc_IndexError,
                             "gather_columns: column %lld is outside the %zd source columns",
                             (long long)columns[j], src_cols);
                goto done;
            }
        }
#ifdef SHUFFLE_BLOCKS
        Py_ssize_t blocks = 0;
        const int64_t *window_at = NULL;
        const unsigned char *shuffles = NULL;
#endif
        if (plan_object != Py_None) {
#ifdef SHUFFLE_BLOCKS
            if (!PyBytes_Check(plan_object)) {
                PyErr_SetString(PyExc_TypeError, "gather_columns: plan must come from plan_gather");
                goto done;
            }
            const int64_t *plan = (const int64_t *)PyBytes_AS_STRING(plan_object);
            const Py_ssize_t plan_len = PyBytes_GET_SIZE(plan_object);
            if (plan_len < PLAN_HEADER * 8 || plan[0] != PLAN_MAGIC || plan[1] != width ||
                plan[2] != src_cols || plan[3] != itemsize || plan[4] != zero_column ||
                plan[5] != width / (BLOCK / itemsize) ||
                plan_len != PLAN_HEADER * 8 + plan[5] * (2 * 8 + 2 * BLOCK)) {
                PyErr_SetString(PyExc_ValueError,
                                "gather_columns: the plan is for another index, source width, "
                                "itemsize or zero column");
                goto done;
            }
            window_at = plan + PLAN_HEADER;
            shuffles = (const unsigned char *)(window_at + 2 * plan[5]);
            for (int64_t w = 0; w < 2 * plan[5]; w++) {
                if (window_at[w] < -1 || window_at[w] > src_row - BLOCK) {
                    PyErr_SetString(PyExc_ValueError,
                                    "gather_columns: the plan has a window outside the rows");
                    goto done;
                }
            }
            /* a plan made on another machine: copy item by item */
            blocks = __builtin_cpu_supports("ssse3") ? (Py_ssize_t)plan[5] : 0;
#else
            /* a plan made on an x86-64 machine (a pickled reader): item by item */
            (void)plan_object;
#endif
        }
        Py_BEGIN_ALLOW_THREADS
#ifdef SHUFFLE_BLOCKS
        if (blocks > 0) {
            shuffle_rows(src_bytes, src_row, out_bytes, out_row, rows, columns, width, itemsize,
                         blocks, window_at, shuffles);
        } else
#endif
        {
            for (Py_ssize_t i = 0; i < rows; i++) {
                gather_items(src_bytes + i * src_row, out_bytes + i * out_row, columns, itemsize,
                             0, width);
            }
        }
        Py_END_ALLOW_THREADS
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&index);
    PyBuffer_Release(&out);
    return result;
}

#define SCATTER_ITEMS(T)                                                     \
    for (Py_ssize_t i = 0; i < n; i++) {                                     \
        const T *from = (const T *)src_bytes + cells[i];                     \
        T *to = (T *)out_bytes + rows[i] * out_cols;                         \
        for (Py_ssize_t j = 0; j < k; j++) {                                 \
            to[targets[j]] = from[j * src_cols];                             \
        }                                                                    \
    }

/*
 * scatter_columns(src, src_cols, itemsize, cells, out, out_cols, rows, targets)
 *
 *     out[rows[i], targets[j]] = src[j, cells[i]]: the selected columns
 *     (cells) of a feature-major strip become output rows, its rows output
 *     columns. numpy's out[np.ix_(rows, targets)] = src[:, cells].T is as
 *     fast (~0.5 ns a value) but holds the GIL while it writes, so the other
 *     decoding thread, done with its pread and zstd, waits for it; this loop
 *     does not. It fills one output row at a time (reading the strip's rows
 *     side by side), so each output cache line is written while at hand.
 */
static PyObject *
scatter_columns(PyObject *self, PyObject *args)
{
    Py_buffer src, cells_buf, out, rows_buf, targets_buf;
    Py_ssize_t src_cols, itemsize, out_cols;
    PyObject *result = NULL;

    (void)self;
    if (!PyArg_ParseTuple(args, "y*nny*w*ny*y*", &src, &src_cols, &itemsize, &cells_buf, &out,
                          &out_cols, &rows_buf, &targets_buf)) {
        return NULL;
    }
    const Py_ssize_t n = cells_buf.len / 8, k = targets_buf.len / 8;
    const int64_t *cells = (const int64_t *)cells_buf.buf;
    const int64_t *rows = (const int64_t *)rows_buf.buf;
    const int64_t *targets = (const int64_t *)targets_buf.buf;
    if ((itemsize != 1 && itemsize != 2 && itemsize != 4 && itemsize != 8) || src_cols < 1 ||
        out_cols < 1 || cells_buf.len % 8 || rows_buf.len != cells_buf.len || targets_buf.len % 8 ||
        src.len != k * src_cols * itemsize || out.len % (out_cols * itemsize)) {
        PyErr_SetString(PyExc_ValueError,
                        "scatter_columns: cells, rows and targets must be int64 (cells and rows "
                        "of one length), src len(targets) rows of src_cols items and out rows of "
                        "out_cols items, of itemsize 1, 2, 4 or 8");
        goto done;
    }
    const Py_ssize_t out_rows = out.len / (out_cols * itemsize);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (cells[i] < 0 || cells[i] >= src_cols || rows[i] < 0 || rows[i] >= out_rows) {
            PyErr_Format(PyExc_IndexError,
                         "scatter_columns: cell %lld or row %lld is outside the %zd source "
                         "columns or %zd output rows",
                         (long long)cells[i], (long long)rows[i], src_cols, out_rows);
            goto done;
        }
    }
    for (Py_ssize_t j = 0; j < k; j++) {
        if (targets[j] < 0 || targets[j] >= out_cols) {
            PyErr_Format(PyExc_IndexError,
                         "scatter_columns: target %lld is outside the %zd output columns",
                         (long long)targets[j], out_cols);
            goto done;
        }
    }
    {
        const char *src_bytes = (const char *)src.buf;
        char *out_bytes = (char *)out.buf;
        Py_BEGIN_ALLOW_THREADS
        switch (itemsize) {
        case 1:
            SCATTER_ITEMS(uint8_t)
            break;
        case 2:
            SCATTER_ITEMS(uint16_t)
            break;
        case 4:
            SCATTER_ITEMS(uint32_t)
            break;
        default:
            SCATTER_ITEMS(uint64_t)
            break;
        }
        Py_END_ALLOW_THREADS
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&cells_buf);
    PyBuffer_Release(&out);
    PyBuffer_Release(&rows_buf);
    PyBuffer_Release(&targets_buf);
    return result;
}

#ifndef _WIN32
/* The row-frame index (row_frames.py): magic, payload size, frame sizes,
 * rows per frame, frame count, tag; all uint32 little-endian. */
#define FRAME_MAGIC 0x184D2A5Eu
#define INDEX_FIXED_BYTES 20
/* The c-blosc 1 header (blosc_blocks.py): version, compressor version,
 * flags, type size, then uint32 sizes; its flags for zstd blocks that are
 * neither shuffled, split nor stored raw. */
#define BLOSC_HEADER_BYTES 16
#define BLOSC_ZSTD_BLOCKS_FLAGS 0x90

enum frame_status { FRAMES_OK, FRAMES_OTHER_FRAMING, FRAMES_IO, FRAMES_SHORT, FRAMES_FULL, FRAMES_ROW };

static uint32_t
little_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* pread exactly n bytes at `at`; FRAMES_SHORT where the file ends first. */
static enum frame_status
read_exactly(int fd, char *into, int64_t n, int64_t at, int64_t *end)
{
    while (n > 0) {
        ssize_t got = pread(fd, into, (size_t)n, (off_t)at);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got < 0) {
            return FRAMES_IO;
        }
        if (got == 0) {
            *end = at + n;
            return FRAMES_SHORT;
        }
        into += got;
        n -= got;
        at += got;
    }
    return FRAMES_OK;
}

static PyObject *
read_row_frames(PyObject *self, PyObject *args)
{
    int fd;
    Py_ssize_t chunk_rows, per_frame = 1, block_bytes = 0;
    Py_buffer offsets_buf, sizes_buf, counts_buf, rows_buf, out;
    PyObject *result = NULL;
    unsigned char *index = NULL;
    int64_t *starts = NULL;

    (void)self;
    if (!PyArg_ParseTuple(args, "iny*y*y*y*w*|nn", &fd, &chunk_rows, &offsets_buf, &sizes_buf,
                          &counts_buf, &rows_buf, &out, &per_frame, &block_bytes)) {
        return NULL;
    }
    const int blosc = block_bytes > 0;
    const Py_ssize_t n_chunks = offsets_buf.len / 8;
    const Py_ssize_t n_rows = rows_buf.len / 8;
    const int64_t *offsets = (const int64_t *)offsets_buf.buf;
    const int64_t *sizes = (const int64_t *)sizes_buf.buf;
    const int64_t *counts = (const int64_t *)counts_buf.buf;
    const int64_t *rows = (const int64_t *)rows_buf.buf;
    if (chunk_rows < 2 || chunk_rows > (1 << 24) || offsets_buf.len % 8 || rows_buf.len % 8 ||
        sizes_buf.len != offsets_buf.len || counts_buf.len != offsets_buf.len || per_frame < 1 ||
        per_frame >= chunk_rows) {
        PyErr_SetString(PyExc_ValueError,
                        "read_row_frames: offsets, sizes and counts must be int64 arrays of one "
                        "length, rows int64, chunk_rows at least 2 and rows_per_frame from 1 to "
                        "chunk_rows - 1");
        goto done;
    }
    /* frames of per_frame rows; the last may hold fewer */
    const Py_ssize_t n_frames = (chunk_rows + per_frame - 1) / per_frame;
    {
        int64_t wanted = 0;
        for (Py_ssize_t i = 0; i < n_chunks; i++) {
            if (counts[i] < 0 || offsets[i] < 0 || sizes[i] < 0) {
                PyErr_SetString(PyExc_ValueError, "read_row_frames: negative count, offset or size");
                goto done;
            }
            wanted += counts[i];
        }
        if (wanted != n_rows) {
            PyErr_SetString(PyExc_ValueError, "read_row_frames: counts do not add up to the rows");
            goto done;
        }
    }
    const int64_t index_bytes =
        (blosc ? BLOSC_HEADER_BYTES : INDEX_FIXED_BYTES) + 4 * (int64_t)n_frames;
    index = malloc((size_t)index_bytes);
    starts = malloc(sizeof(int64_t) * (size_t)(n_frames + 1));
    if (index == NULL || starts == NULL) {
        PyErr_NoMemory();
        goto done;
    }

    enum frame_status status = FRAMES_OK;
    int64_t written = 0, read_bytes = 0, short_end = 0;
    int saved_errno = 0;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t next_row = 0;
    for (Py_ssize_t i = 0; i < n_chunks && status == FRAMES_OK; i++) {
        const int64_t chunk_start = offsets[i], chunk_size = sizes[i];
        if (chunk_size < index_bytes) {
            status = FRAMES_OTHER_FRAMING; /* a single frame (no index) */
            break;
        }
        status = read_exactly(fd, (char *)index, index_bytes,
                              blosc ? chunk_start : chunk_start + chunk_size - index_bytes, &short_end);
        if (status != FRAMES_OK) {
            break;
        }
        read_bytes += index_bytes;
        if (blosc) {
            /* whole blocks of block_bytes but the last, starts ascending after
             * the table, and the compressed size the chunk's */
            const int64_t nbytes = little_u32(index + 4), last_block = nbytes - (n_frames - 1) * block_bytes;
            if (index[2] != BLOSC_ZSTD_BLOCKS_FLAGS || little_u32(index + 8) != (uint32_t)block_bytes ||
                little_u32(index + 12) != (uint32_t)(chunk_size - 4) || last_block < 1 ||
                last_block > block_bytes) {
                status = FRAMES_OTHER_FRAMING;
                break;
            }
            for (Py_ssize_t frame = 0; frame < n_frames; frame++) {
                starts[frame] = little_u32(index + BLOSC_HEADER_BYTES + 4 * frame);
            }
            starts[n_frames] = chunk_size - 4; /* the crc32c follows the last block */
            for (Py_ssize_t frame = 0; frame < n_frames && status == FRAMES_OK; frame++) {
                if (starts[frame] < (frame ? starts[frame - 1] + 4 : index_bytes) ||
                    starts[frame] + 4 > starts[frame + 1]) {
                    status = FRAMES_OTHER_FRAMING;
                }
            }
            if (status != FRAMES_OK) {
                break;
            }
        }
        const unsigned char *end = index + index_bytes - 12;
        if (!blosc && (little_u32(index) != FRAME_MAGIC ||
            little_u32(index + 4) != (uint32_t)(index_bytes - 8) ||
            little_u32(end) != (uint32_t)per_frame || little_u32(end + 4) != (uint32_t)n_frames ||
            memcmp(end + 8, "CRF1", 4) != 0)) {
            status = FRAMES_OTHER_FRAMING;
            break;
        }
        if (!blosc) {
            starts[0] = 0;
            for (Py_ssize_t frame = 0; frame < n_frames; frame++) {
                starts[frame + 1] = starts[frame] + little_u32(index + 8 + 4 * frame);
            }
            if (starts[n_frames] != chunk_size - index_bytes) {
                status = FRAMES_OTHER_FRAMING; /* sizes that do not add up: not an index */
                break;
            }
        }
        const Py_ssize_t stop = next_row + (Py_ssize_t)counts[i];
        int64_t previous = -1, previous_row = -1; /* the last frame and row read of this chunk */
        while (next_row < stop) {
            if (rows[next_row] <= previous_row || rows[next_row] >= chunk_rows) {
                status = FRAMES_ROW;
                break;
            }
            /* the wanted rows' frames, consecutive ones in one pread */
            const int64_t first = rows[next_row] / per_frame;
            int64_t last = first;
            Py_ssize_t last_at = next_row;
            while (last_at + 1 < stop && rows[last_at + 1] > rows[last_at] &&
                   rows[last_at + 1] < chunk_rows && rows[last_at + 1] / per_frame <= last + 1) {
                last_at++;
                last = rows[last_at] / per_frame;
            }
            previous_row = rows[last_at];
            if (first <= previous) {
                status = FRAMES_ROW;
                break;
            }
            int64_t length = starts[last + 1] - starts[first];
            if (length > out.len - written) {
                status = FRAMES_FULL;
                break;
            }
            status = read_exactly(fd, (char *)out.buf + written, length, chunk_start + starts[first],
                                  &short_end);
            if (status != FRAMES_OK) {
                break;
            }
            read_bytes += length;
            if (blosc) {
                /* drop each block's size, keeping its frame: frames back to back */
                char *block = (char *)out.buf + written, *into = block;
                for (int64_t b = first; b <= last; b++) {
                    const int64_t stored = starts[b + 1] - starts[b] - 4;
                    const int64_t size = little_u32((const unsigned char *)block);
                    const int64_t raw = b == n_frames - 1 ? little_u32(index + 4) - b * block_bytes
                                                          : block_bytes;
                    if (size != stored || size == raw) { /* not a frame: raw, or damaged */
                        status = FRAMES_OTHER_FRAMING;
                        break;
                    }
                    memmove(into, block + 4, (size_t)size);
                    into += size;
                    block += size + 4;
                }
                if (status != FRAMES_OK) {
                    break;
                }
                length = into - ((char *)out.buf + written);
            }
            written += length;
            previous = last;
            next_row = last_at + 1;
        }
    }
    saved_errno = errno;
    Py_END_ALLOW_THREADS

    switch (status) {
    case FRAMES_OK:
        result = Py_BuildValue("LL", (long long)written, (long long)read_bytes);
        break;
    case FRAMES_OTHER_FRAMING:
        result = Py_NewRef(Py_None);
        break;
    case FRAMES_IO:
        errno = saved_errno;
        PyErr_SetFromErrno(PyExc_OSError);
        break;
    case FRAMES_SHORT:
        PyErr_Format(PyExc_EOFError, "the file ends before byte %lld", (long long)short_end);
        break;
    case FRAMES_FULL:
        PyErr_SetString(PyExc_ValueError, "read_row_frames: the frames do not fit in out");
        break;
    case FRAMES_ROW:
        PyErr_Format(PyExc_IndexError,
                     "read_row_frames: rows must be sorted, unique and below %zd in each chunk",
                     chunk_rows);
        break;
    }
done:
    free(index);
    free(starts);
    PyBuffer_Release(&offsets_buf);
    PyBuffer_Release(&sizes_buf);
    PyBuffer_Release(&counts_buf);
    PyBuffer_Release(&rows_buf);
    PyBuffer_Release(&out);
    return result;
}
#endif

#ifndef _WIN32
static PyObject *
read_ranges(PyObject *self, PyObject *args)
{
    int fd;
    Py_buffer offsets_buf, sizes_buf, out;
    PyObject *result = NULL;

    (void)self;
    if (!PyArg_ParseTuple(args, "iy*y*w*", &fd, &offsets_buf, &sizes_buf, &out)) {
        return NULL;
    }
    const Py_ssize_t n = offsets_buf.len / 8;
    const int64_t *offsets = (const int64_t *)offsets_buf.buf;
    const int64_t *sizes = (const int64_t *)sizes_buf.buf;
    if (offsets_buf.len % 8 || sizes_buf.len != offsets_buf.len) {
        PyErr_SetString(PyExc_ValueError,
                        "read_ranges: offsets and sizes must be int64 arrays of one length");
        goto done;
    }
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (offsets[i] < 0 || sizes[i] < 0) {
            PyErr_SetString(PyExc_ValueError, "read_ranges: negative offset or size");
            goto done;
        }
        total += sizes[i];
    }
    if (total > out.len) {
        PyErr_SetString(PyExc_ValueError, "read_ranges: the ranges do not fit in out");
        goto done;
    }
    enum frame_status status = FRAMES_OK;
    int64_t written = 0, short_end = 0;
    int saved_errno = 0;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t i = 0;
    while (i < n && status == FRAMES_OK) {
        Py_ssize_t j = i + 1;
        while (j < n && offsets[j] == offsets[j - 1] + sizes[j - 1]) {
            j++;
        }
        const int64_t length = offsets[j - 1] + sizes[j - 1] - offsets[i];
        status = read_exactly(fd, (char *)out.buf + written, length, offsets[i], &short_end);
        written += length;
        i = j;
    }
    saved_errno = errno;
    Py_END_ALLOW_THREADS
    switch (status) {
    case FRAMES_OK:
        result = PyLong_FromLongLong((long long)written);
        break;
    case FRAMES_SHORT:
        PyErr_Format(PyExc_EOFError, "the file ends before byte %lld", (long long)short_end);
        break;
    default:
        errno = saved_errno;
        PyErr_SetFromErrno(PyExc_OSError);
        break;
    }
done:
    PyBuffer_Release(&offsets_buf);
    PyBuffer_Release(&sizes_buf);
    PyBuffer_Release(&out);
    return result;
}
#endif

static PyObject *
plan_gather(PyObject *self, PyObject *args)
{
    Py_buffer index;
    Py_ssize_t src_cols, itemsize;
    long long zero_column = -1;
    PyObject *result = NULL;

    (void)self;
    if (!PyArg_ParseTuple(args, "y*nn|L", &index, &src_cols, &itemsize, &zero_column)) {
        return NULL;
    }
    if ((itemsize != 1 && itemsize != 2 && itemsize != 4 && itemsize != 8) ||
        index.len % (Py_ssize_t)sizeof(int64_t) != 0 || src_cols < 1) {
        PyErr_SetString(PyExc_ValueError,
                        "plan_gather: index must be int64, src_cols positive and itemsize 1, 2, "
                        "4 or 8");
        goto done;
    }
#ifdef SHUFFLE_BLOCKS
    {
        const int64_t *columns = (const int64_t *)index.buf;
        const Py_ssize_t width = index.len / (Py_ssize_t)sizeof(int64_t);
        const Py_ssize_t per_block = BLOCK / itemsize;
        const Py_ssize_t blocks = width / per_block;
        for (Py_ssize_t j = 0; j < width; j++) {
            if (columns[j] < 0 || columns[j] >= src_cols) {
                PyErr_Format(PyExc_IndexError,
                             "plan_gather: column %lld is outside the %zd source columns",
                             (long long)columns[j], src_cols);
                goto done;
            }
        }
        /* 8-byte items: two per block, no faster than the item loop */
        if (itemsize == 8 || blocks == 0 || src_cols < per_block ||
            !__builtin_cpu_supports("ssse3")) {
            result = Py_NewRef(Py_None); /* shuffles cannot help */
            goto done;
        }
        result = PyBytes_FromStringAndSize(NULL, (PLAN_HEADER * 8) + blocks * (2 * 8 + 2 * BLOCK));
        if (result == NULL) {
            goto done;
        }
        int64_t *plan = (int64_t *)PyBytes_AS_STRING(result);
        const int64_t header[PLAN_HEADER] = {PLAN_MAGIC, width, src_cols, itemsize,
                                             zero_column, blocks};
        memcpy(plan, header, sizeof(header));
        int64_t *window_at = plan + PLAN_HEADER;
        unsigned char *shuffles = (unsigned char *)(window_at + 2 * blocks);
        for (Py_ssize_t b = 0; b < blocks; b++) {
            plan_block(columns + b * per_block, per_block, src_cols, itemsize, zero_column,
                       window_at + 2 * b, shuffles + 2 * b * BLOCK);
        }
    }
#else
    result = Py_NewRef(Py_None);
#endif
done:
    PyBuffer_Release(&index);
    return result;
}

/* Zeros are skipped a span of 32 bytes (four 8-byte words) at a time. */
#define SPAN 32

static inline int
all_zero(const char *span)
{
    uint64_t w[4];
    memcpy(w, span, SPAN);
    return (w[0] | w[1] | w[2] | w[3]) == 0;
}

/* Per item type T: the non-zero items of rows as CSR entries, skipping
 * all-zero 32-byte spans (all-zero bits are a zero of every type; a span with
 * bits set is looked at item by item, as values: -0.0 is zero, NaN is not).
 * Each row is counted, then filled while it is still in the core's cache.
 * From row *row and entry *at on, until the rows end or the next row's
 * entries would pass capacity; *row and *at say where it stopped. */
#define NONZERO_KERNEL(T, NAME)                                                          \
    static void nonzero_rows_##NAME(const char *block, Py_ssize_t rows, Py_ssize_t width,  \
                                    const int64_t *out_cols, int64_t *indptr,            \
                                    void *indices, int wide_indices, T *data,            \
                                    int64_t capacity, Py_ssize_t *row, int64_t *at)      \
    {                                                                                    \
        const Py_ssize_t per_span = SPAN / (Py_ssize_t)sizeof(T);                        \
        const Py_ssize_t words = width / per_span;                                       \
        int32_t *narrow_out = (int32_t *)indices;                                        \
        int64_t *wide_out = (int64_t *)indices;                                          \
        int64_t k = *at;                                                                 \
        Py_ssize_t i = *row;                                                             \
        for (; i < rows; i++) {                                                          \
            const char *bytes = block + i * width * (Py_ssize_t)sizeof(T);               \
            const T *items = (const T *)bytes;                                           \
            /* a branch-free count, which the compiler vectorizes */                     \
            uint32_t n32 = 0; /* a narrow sum vectorizes wider */                       \
            for (Py_ssize_t j = 0; j < width; j++) {                                     \
                n32 += items[j] != 0;                                                    \
            }                                                                            \
            int64_t n = n32;                                                             \
            if (k + n >= capacity) { /* one slot beyond the entries stays free */       \
                break;                                                                   \
            }                                                                            \
            const int64_t row_end = k + n;                                               \
            for (Py_ssize_t w = 0; w <= words && k < row_end; w++) {                     \
                const Py_ssize_t first = w * per_span;                                   \
                const Py_ssize_t stop = w < words ? first + per_span : width;            \
                if (w < words && all_zero(bytes + w * SPAN)) {                           \
                    continue;                                                            \
                }                                                                        \
                /* branch-free: every item is written at k, which moves on past the \
                 * non-zero ones (the zeros' writes land one past the row's entries,  \
                 * on the next row's first or the slot kept free at the end) */      \
                if (wide_indices) {                                                      \
                    for (Py_ssize_t j = first; j < stop; j++) {                          \
                        wide_out[k] = out_cols[j];                                       \
                        data[k] = items[j];                                              \
                        k += items[j] != 0;                                              \
                    }                                                                    \
                } else {                                                                 \
                    for (Py_ssize_t j = first; j < stop; j++) {                          \
                        narrow_out[k] = (int32_t)out_cols[j];                            \
                        data[k] = items[j];                                              \
                        k += items[j] != 0;                                              \
                    }                                                                    \
                }                                                                        \
            }                                                                            \
            indptr[i + 1] = k;                                                           \
        }                                                                                \
        *row = i;                                                                        \
        *at = k;                                                                         \
    }

NONZERO_KERNEL(uint8_t, u1)
NONZERO_KERNEL(uint16_t, u2)
NONZERO_KERNEL(uint32_t, u4)
NONZERO_KERNEL(uint64_t, u8)
NONZERO_KERNEL(float, f4)
NONZERO_KERNEL(double, f8)

static PyObject *
nonzero_rows(PyObject *self, PyObject *args)
{
    Py_buffer block, cols_buf, indptr_buf, indices_buf, data_buf;
    Py_ssize_t width, itemsize, row;
    long long at;
    int is_float;
    PyObject *result = NULL;

    (void)self;
    if (!PyArg_ParseTuple(args, "y*nnpy*nLw*w*w*", &block, &width, &itemsize, &is_float,
                          &cols_buf, &row, &at, &indptr_buf, &indices_buf, &data_buf)) {
        return NULL;
    }
    const int item_ok = is_float ? (itemsize == 4 || itemsize == 8)
                                 : (itemsize == 1 || itemsize == 2 || itemsize == 4 ||
                                    itemsize == 8);
    if (!item_ok || width < 1 || width > (Py_ssize_t)UINT32_MAX ||
        block.len % (width * itemsize) != 0) {
        PyErr_SetString(PyExc_ValueError,
                        "nonzero_rows: block must be rows x width items of itemsize 1, 2, 4 or "
                        "8 (floats: 4 or 8), width positive and below 2**32");
        goto done;
    }
    const Py_ssize_t rows = block.len / (width * itemsize);
    const int64_t capacity = data_buf.len / itemsize;
    const int wide = capacity && indices_buf.len / capacity == 8;
    if (cols_buf.len != width * (Py_ssize_t)sizeof(int64_t) ||
        indptr_buf.len != (rows + 1) * (Py_ssize_t)sizeof(int64_t) || row < 0 || row > rows ||
        at < 0 || at > capacity || data_buf.len % itemsize ||
        indices_buf.len != capacity * (wide ? 8 : 4)) {
        PyErr_SetString(PyExc_ValueError,
                        "nonzero_rows: out_cols must be int64, one per column; indptr int64, one "
                        "more than the rows; indices (int32 or int64) and data of one length; "
                        "row and at within them");
        goto done;
    }
    const int64_t *out_cols = (const int64_t *)cols_buf.buf;
    int64_t *indptr = (int64_t *)indptr_buf.buf;
    const char *items = (const char *)block.buf;
    int64_t reached = at;
    Py_BEGIN_ALLOW_THREADS
#define RUN(NAME, T)                                                                       \
    nonzero_rows_##NAME(items, rows, width, out_cols, indptr, indices_buf.buf, wide,       \
                        (T *)data_buf.buf, capacity, &row, &reached)
    indptr[row] = reached;
    const int kind = is_float ? (itemsize == 4 ? 4 : 5)
                              : (itemsize == 1 ? 0 : itemsize == 2 ? 1 : itemsize == 4 ? 2 : 3);
    switch (kind) {
    case 0:
        RUN(u1, uint8_t);
        break;
    case 1:
        RUN(u2, uint16_t);
        break;
    case 2:
        RUN(u4, uint32_t);
        break;
    case 3:
        RUN(u8, uint64_t);
        break;
    case 4:
        RUN(f4, float);
        break;
    default:
        RUN(f8, double);
        break;
    }
#undef RUN
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("nL", row, (long long)reached);
done:
    PyBuffer_Release(&block);
    PyBuffer_Release(&cols_buf);
    PyBuffer_Release(&indptr_buf);
    PyBuffer_Release(&indices_buf);
    PyBuffer_Release(&data_buf);
    return result;
}

/* Per item type T and minor index type M: the entries of majors into a dense
 * block; 0, or 1 at the first index out of range (nothing past it written). */
#define SCATTER_KERNEL(T, M, NAME)                                                       \
    static int scatter_##NAME(char *out, Py_ssize_t rows, Py_ssize_t width,              \
                              const int64_t *out_majors, const int64_t *bounds,          \
                              Py_ssize_t majors, const M *minor, const T *values,        \
                              const int64_t *lookup, Py_ssize_t lookup_len,              \
                              int cell_major)                                            \
    {                                                                                    \
        T *items = (T *)out;                                                             \
        const Py_ssize_t minors = lookup ? lookup_len : cell_major ? width : rows;       \
        const Py_ssize_t majors_out = cell_major ? rows : width;                         \
        const Py_ssize_t targets = cell_major ? width : rows;                            \
        for (Py_ssize_t i = 0; i < majors; i++) {                                        \
            const int64_t major = out_majors[i];                                         \
            if (major < 0 || major >= majors_out) {                                      \
                return 1;                                                                \
            }                                                                            \
            for (int64_t e = bounds[i]; e < bounds[i + 1]; e++) {                        \
                const int64_t m = (int64_t)minor[e];                                     \
                if (m < 0 || m >= minors) {                                              \
                    return 1;                                                            \
                }                                                                        \
                const int64_t target = lookup ? lookup[m] : m;                           \
                if (target < 0) {                                                        \
                    continue; /* a minor not selected */                                 \
                }                                                                        \
                if (target >= targets) {                                                 \
                    return 1;                                                            \
                }                                                                        \
                if (cell_major) {                                                        \
                    items[major * width + target] = values[e];                           \
                } else {                                                                 \
                    items[target * width + major] = values[e];                           \
                }                                                                        \
            }                                                                            \
        }                                                                                \
        return 0;                                                                        \
    }

SCATTER_KERNEL(uint8_t, int32_t, u1_i4)
SCATTER_KERNEL(uint16_t, int32_t, u2_i4)
SCATTER_KERNEL(uint32_t, int32_t, u4_i4)
SCATTER_KERNEL(uint64_t, int32_t, u8_i4)
SCATTER_KERNEL(uint8_t, int64_t, u1_i8)
SCATTER_KERNEL(uint16_t, int64_t, u2_i8)
SCATTER_KERNEL(uint32_t, int64_t, u4_i8)
SCATTER_KERNEL(uint64_t, int64_t, u8_i8)

static PyObject *
scatter_entries(PyObject *self, PyObject *args)
{
    Py_buffer out, majors_buf, bounds_buf, minor_buf, values_buf, lookup_buf;
    Py_ssize_t width, itemsize, minor_size;
    int cell_major;
    PyObject *result = NULL;

    (void)self;
    if (!PyArg_ParseTuple(args, "w*nnpy*y*y*ny*y*", &out, &width, &itemsize, &cell_major,
                          &majors_buf, &bounds_buf, &minor_buf, &minor_size, &values_buf,
                          &lookup_buf)) {
        return NULL;
    }
    const Py_ssize_t majors = majors_buf.len / 8;
    const int64_t *bounds = (const int64_t *)bounds_buf.buf;
    const Py_ssize_t entries = minor_size > 0 ? minor_buf.len / minor_size : -1;
    if ((itemsize != 1 && itemsize != 2 && itemsize != 4 && itemsize != 8) || width < 1 ||
        out.len % (width * itemsize) != 0 || majors_buf.len % 8 ||
        bounds_buf.len != (majors + 1) * 8 || (minor_size != 4 && minor_size != 8) ||
        minor_buf.len % minor_size || values_buf.len != entries * itemsize ||
        lookup_buf.len % 8) {
        PyErr_SetString(PyExc_ValueError,
                        "scatter_entries: out must be rows x width items of itemsize 1, 2, 4 or 8; "
                        "out_majors int64; bounds int64, one more than the majors; minor int32 "
                        "or int64 and values (of itemsize) of one length; lookup int64");
        goto done;
    }
    for (Py_ssize_t i = 0; i < majors; i++) {
        if (bounds[i] < 0 || bounds[i] > bounds[i + 1] || bounds[i + 1] > entries) {
            PyErr_SetString(PyExc_ValueError,
                            "scatter_entries: bounds must ascend within the entries");
            goto done;
        }
    }
    const Py_ssize_t rows = out.len / (width * itemsize);
    const int64_t *lookup = lookup_buf.len ? (const int64_t *)lookup_buf.buf : NULL;
    const Py_ssize_t lookup_len = lookup_buf.len / 8;
    const int64_t *out_majors = (const int64_t *)majors_buf.buf;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
#define SCATTER(NAME, T, M)                                                                \
    scatter_##NAME((char *)out.buf, rows, width, out_majors, bounds, majors,               \
                   (const M *)minor_buf.buf, (const T *)values_buf.buf, lookup, lookup_len, \
                   cell_major)
    if (minor_size == 4) {
        bad = itemsize == 1   ? SCATTER(u1_i4, uint8_t, int32_t)
              : itemsize == 2 ? SCATTER(u2_i4, uint16_t, int32_t)
              : itemsize == 4 ? SCATTER(u4_i4, uint32_t, int32_t)
                              : SCATTER(u8_i4, uint64_t, int32_t);
    } else {
        bad = itemsize == 1   ? SCATTER(u1_i8, uint8_t, int64_t)
              : itemsize == 2 ? SCATTER(u2_i8, uint16_t, int64_t)
              : itemsize == 4 ? SCATTER(u4_i8, uint32_t, int64_t)
                              : SCATTER(u8_i8, uint64_t, int64_t);
    }
#undef SCATTER
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_IndexError,
                        "scatter_entries: an entry's index is outside the block or the lookup");
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&out);
    PyBuffer_Release(&majors_buf);
    PyBuffer_Release(&bounds_buf);
    PyBuffer_Release(&minor_buf);
    PyBuffer_Release(&values_buf);
    PyBuffer_Release(&lookup_buf);
    return result;
}

static PyMethodDef kernel_methods[] = {
    {"gather_columns", gather_columns, METH_VARARGS,
     "gather_columns(src, src_cols, itemsize, index, out, zero_column=-1, plan=None): "
     "out[i, j] = src[i, index[j]] (zero where index[j] is zero_column, an all-zero column); "
     "plan: plan_gather's for the same arguments."},
    {"scatter_columns", scatter_columns, METH_VARARGS,
     "scatter_columns(src, src_cols, itemsize, cells, out, out_cols, rows, targets): "
     "out[rows[i], targets[j]] = src[j, cells[i]]."},
    {"plan_gather", plan_gather, METH_VARARGS,
     "plan_gather(index, src_cols, itemsize, zero_column=-1): a shuffle plan for "
     "gather_columns, or None where shuffles cannot help."},
    {"scatter_entries", scatter_entries, METH_VARARGS,
     "scatter_entries(out, width, itemsize, cell_major, out_majors, bounds, minor, minor_size, "
     "values, lookup): the entries of sorted majors into a dense block."},
    {"nonzero_rows", nonzero_rows, METH_VARARGS,
     "nonzero_rows(block, width, itemsize, is_float, out_cols, row, at, indptr, indices, data): "
     "the non-zero items of a dense block's rows from row on as CSR entries from at on, until "
     "the rows end or data is full; (row, at) where it stopped."},
#ifndef _WIN32
    {"read_row_frames", read_row_frames, METH_VARARGS,
     "read_row_frames(fd, chunk_rows, offsets, sizes, counts, rows, out, rows_per_frame=1, "
     "block_bytes=0): the frames of the wanted rows of row-framed chunks (Blosc blocks of "
     "block_bytes if > 0), read into out; (frame bytes, bytes read) or None."},
    {"read_ranges", read_ranges, METH_VARARGS,
     "read_ranges(fd, offsets, sizes, out): the byte ranges of a file, one after another, "
     "into out; the bytes read."},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kernel_module = {
    PyModuleDef_HEAD_INIT, "_kernels",
    "Compiled inner loops of the gather reader.", -1, kernel_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__kernels(void)
{
    return PyModule_Create(&kernel_module);
}

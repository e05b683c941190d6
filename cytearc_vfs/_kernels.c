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
 * numpy's np.take does the same through a generic per-item loop that checks
 * and clips every index; this loop, with the indices checked once per call,
 * is ~1.6x faster for 1- and 2-byte counts and runs without the GIL, so the
 * placements of two sources go on in parallel. The module needs no numpy
 * headers: all three arrays come in through the buffer protocol.
 *
 * read_row_frames(fd, chunk_rows, offsets, sizes, counts, rows, out)
 *
 *     Reads the wanted one-row frames of row-framed inner chunks
 *     (row_frames.py) of one shard file into out, one after another: for
 *     each chunk i (offsets[i], sizes[i]: its bytes in the file), the frame
 *     index at its end, then only the frames of its counts[i] wanted rows
 *     (the next counts[i] entries of rows, sorted, local to the chunk;
 *     consecutive rows in one pread). Returns (frame bytes written, bytes
 *     read), or None when a chunk is not one frame per row with
 *     chunk_rows frames: the caller then reads whole chunks.
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

#define GATHER_ROWS(T)                                                       \
    for (Py_ssize_t i = 0; i < rows; i++) {                                  \
        const T *from = (const T *)(src_bytes + i * src_row);                \
        T *to = (T *)(out_bytes + i * out_row);                              \
        for (Py_ssize_t j = 0; j < width; j++) {                             \
            to[j] = from[columns[j]];                                        \
        }                                                                    \
    }

static PyObject *
gather_columns(PyObject *self, PyObject *args)
{
    Py_buffer src, index, out;
    Py_ssize_t src_cols, itemsize;
    PyObject *result = NULL;

    (void)self;
    if (!PyArg_ParseTuple(args, "y*nny*w*", &src, &src_cols, &itemsize, &index, &out)) {
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

        if (rows * src_row != src.len || out.len != rows * out_row) {
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
        Py_BEGIN_ALLOW_THREADS
        switch (itemsize) {
        case 1:
            GATHER_ROWS(uint8_t)
            break;
        case 2:
            GATHER_ROWS(uint16_t)
            break;
        case 4:
            GATHER_ROWS(uint32_t)
            break;
        default:
            GATHER_ROWS(uint64_t)
            break;
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

#ifndef _WIN32
/* The row-frame index (row_frames.py): magic, payload size, frame sizes,
 * rows per frame, frame count, tag; all uint32 little-endian. */
#define FRAME_MAGIC 0x184D2A5Eu
#define INDEX_FIXED_BYTES 20

enum frame_status { FRAMES_OK, FRAMES_NOT_ONE_ROW, FRAMES_IO, FRAMES_SHORT, FRAMES_FULL, FRAMES_ROW };

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
    Py_ssize_t chunk_rows;
    Py_buffer offsets_buf, sizes_buf, counts_buf, rows_buf, out;
    PyObject *result = NULL;
    unsigned char *index = NULL;
    int64_t *starts = NULL;

    (void)self;
    if (!PyArg_ParseTuple(args, "iny*y*y*y*w*", &fd, &chunk_rows, &offsets_buf, &sizes_buf,
                          &counts_buf, &rows_buf, &out)) {
        return NULL;
    }
    const Py_ssize_t n_chunks = offsets_buf.len / 8;
    const Py_ssize_t n_rows = rows_buf.len / 8;
    const int64_t *offsets = (const int64_t *)offsets_buf.buf;
    const int64_t *sizes = (const int64_t *)sizes_buf.buf;
    const int64_t *counts = (const int64_t *)counts_buf.buf;
    const int64_t *rows = (const int64_t *)rows_buf.buf;
    if (chunk_rows < 2 || chunk_rows > (1 << 24) || offsets_buf.len % 8 || rows_buf.len % 8 ||
        sizes_buf.len != offsets_buf.len || counts_buf.len != offsets_buf.len) {
        PyErr_SetString(PyExc_ValueError,
                        "read_row_frames: offsets, sizes and counts must be int64 arrays of one "
                        "length, rows int64, and chunk_rows at least 2");
        goto done;
    }
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
    const int64_t index_bytes = INDEX_FIXED_BYTES + 4 * (int64_t)chunk_rows;
    index = malloc((size_t)index_bytes);
    starts = malloc(sizeof(int64_t) * (size_t)(chunk_rows + 1));
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
            status = FRAMES_NOT_ONE_ROW; /* a single frame, or frames of several rows */
            break;
        }
        status = read_exactly(fd, (char *)index, index_bytes, chunk_start + chunk_size - index_bytes,
                              &short_end);
        if (status != FRAMES_OK) {
            break;
        }
        read_bytes += index_bytes;
        const unsigned char *end = index + index_bytes - 12;
        if (little_u32(index) != FRAME_MAGIC ||
            little_u32(index + 4) != (uint32_t)(index_bytes - 8) || little_u32(end) != 1 ||
            little_u32(end + 4) != (uint32_t)chunk_rows || memcmp(end + 8, "CRF1", 4) != 0) {
            status = FRAMES_NOT_ONE_ROW;
            break;
        }
        starts[0] = 0;
        for (Py_ssize_t row = 0; row < chunk_rows; row++) {
            starts[row + 1] = starts[row] + little_u32(index + 8 + 4 * row);
        }
        if (starts[chunk_rows] != chunk_size - index_bytes) {
            status = FRAMES_NOT_ONE_ROW; /* sizes that do not add up: not an index */
            break;
        }
        const Py_ssize_t stop = next_row + (Py_ssize_t)counts[i];
        int64_t previous = -1; /* the last row read of this chunk */
        while (next_row < stop) {
            const int64_t first = rows[next_row];
            Py_ssize_t last_at = next_row;
            while (last_at + 1 < stop && rows[last_at + 1] == rows[last_at] + 1) {
                last_at++;
            }
            const int64_t last = rows[last_at];
            if (first <= previous || last >= chunk_rows) {
                status = FRAMES_ROW;
                break;
            }
            const int64_t length = starts[last + 1] - starts[first];
            if (length > out.len - written) {
                status = FRAMES_FULL;
                break;
            }
            status = read_exactly(fd, (char *)out.buf + written, length, chunk_start + starts[first],
                                  &short_end);
            if (status != FRAMES_OK) {
                break;
            }
            written += length;
            read_bytes += length;
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
    case FRAMES_NOT_ONE_ROW:
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

static PyMethodDef kernel_methods[] = {
    {"gather_columns", gather_columns, METH_VARARGS,
     "gather_columns(src, src_cols, itemsize, index, out): out[i, j] = src[i, index[j]]."},
#ifndef _WIN32
    {"read_row_frames", read_row_frames, METH_VARARGS,
     "read_row_frames(fd, chunk_rows, offsets, sizes, counts, rows, out): the wanted one-row "
     "frames of row-framed chunks, read into out; (frame bytes, bytes read) or None."},
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

/* What the compiled send path's translation units share (_faststore_send.c: single sends, the read's loop;
 * _faststore_batch.c: SEND_BATCH_MESSAGE and batch=true sends). */
#ifndef RMQ_FASTSTORE_SEND_H
#define RMQ_FASTSTORE_SEND_H

#include <Python.h>
#include <string.h>

#define MAX_PROPS 32767
#define MAX_EXT 24

typedef struct { const unsigned char *p; Py_ssize_t n; int esc; } Span; /* a JSON string's raw content */

/* A request header in the plain JSON shape (parse_head): its top-level numbers and its extFields' spans. */
typedef struct {
    long long code, opaque, flag, version;
    int has_code, has_opaque, has_flag, has_version;
    Span lang; /* the language's span (p NULL when absent) */
    int n_ext;
    Span ek[MAX_EXT], ev[MAX_EXT];
} Head;

/* The header [p, end) in the plain shape the clients write (_faststore_send.c); 0 when anything is otherwise. */
int parse_head(const unsigned char *p, const unsigned char *end, Head *h);
/* A span's decoded bytes into buf (room for sp->n bytes); their length. */
Py_ssize_t unescape(const Span *sp, unsigned char *buf);

/* The first ``needle`` in p[0, n) (glibc's memmem: pyconfig.h defines _GNU_SOURCE), or NULL. */
static inline const unsigned char *find(const unsigned char *p, Py_ssize_t n, const char *needle) {
    return n > 0 ? memmem(p, (size_t)n, needle, strlen(needle)) : NULL;
}

/* The reput's hand-off tuple (storage_mmap/reput.py Handoff: at, size, topic, queue id, queue offset, sysflag,
 * store timestamp, prepared offset 0, properties), built without Py_BuildValue's format parsing; steals props. */
static inline PyObject *hand_tuple(long long at, long long size, PyObject *topic, PyObject *qkey, long long qoff,
                                   long long sf, PyObject *ts, PyObject *zero, PyObject *props) {
    PyObject *t = PyTuple_New(9), *a = PyLong_FromLongLong(at), *z = PyLong_FromLongLong(size);
    PyObject *q = PyLong_FromLongLong(qoff), *f = PyLong_FromLongLong(sf);
    if (t == NULL || a == NULL || z == NULL || q == NULL || f == NULL || props == NULL) {
        Py_XDECREF(t); Py_XDECREF(a); Py_XDECREF(z); Py_XDECREF(q); Py_XDECREF(f); Py_XDECREF(props);
        return NULL;
    }
    PyObject *items[9] = {a, z, Py_NewRef(topic), Py_NewRef(qkey), q, f, Py_NewRef(ts), Py_NewRef(zero), props};
    for (int i = 0; i < 9; i++) PyTuple_SET_ITEM(t, i, items[i]);
    return t;
}

/* properties_problem(props) is None */
static inline int props_ok(const unsigned char *p, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        Py_ssize_t j = i;
        while (j < n && p[j] != 2) j++;
        if (j > i) { /* an item: a name, one separator */
            const unsigned char *sep = memchr(p + i, 1, (size_t)(j - i));
            if (sep == NULL || sep == p + i || memchr(sep + 1, 1, (size_t)(p + j - sep - 1)) != NULL) return 0;
        }
        i = j + 1;
    }
    return 1;
}

/* A growable output buffer. */
typedef struct { char *p; Py_ssize_t n, cap; } Out;

static inline int out_room(Out *o, Py_ssize_t more) {
    if (o->n + more <= o->cap) return 1;
    Py_ssize_t cap = o->cap ? o->cap * 2 : 4096;
    while (cap < o->n + more) cap *= 2;
    char *np = PyMem_Realloc(o->p, (size_t)cap);
    if (np == NULL) return 0;
    o->p = np;
    o->cap = cap;
    return 1;
}

static inline char *put(char *o, const char *s, size_t n) {
    memcpy(o, s, n);
    return o + n;
}

static inline char *put_ll(char *o, long long v) {
    char tmp[24];
    int i = 0;
    unsigned long long u = v < 0 ? 0 - (unsigned long long)v : (unsigned long long)v;
    do tmp[i++] = (char)('0' + u % 10); while (u /= 10);
    if (v < 0) *o++ = '-';
    while (i) *o++ = tmp[--i];
    return o;
}

static inline char *put_hex16(char *o, unsigned long long v) {
    for (int i = 15; i >= 0; i--, v >>= 4) o[i] = "0123456789ABCDEF"[v & 15];
    return o + 16;
}

/* The constant parts of a SUCCESS answer (see send_serve) and the message id prefix. */
typedef struct {
    const char *head, *mid, *tail, *idp;
    size_t head_n, mid_n, tail_n, idp_n;
} Answer;

/* What a batch is stored with: the send's header facts and where its records go. */
typedef struct {
    const unsigned char *body, *hprops; /* the batch body; the header's properties as stored (CLUSTER added) */
    Py_ssize_t body_len, hlen;
    long long qid, qoff, sf, born_ts, ts, at, head_size, max_body, limit, room;
    PyObject *topic, *prefix, *qkey, *tq, *born, *store_host, *ts_obj, *handoff, *cbuf, *zero;
    int held, oneway;
    long long opaque;
} Batch;

/* Decode, check, store and answer one batch (_faststore_batch.c): 1 stored (*size: its bytes at mm; the
 * answer appended to out), 0 the pure path's (nothing changed), -1 a Python error (nothing changed). */
int batch_serve(const Batch *b, unsigned char *mm, const Answer *a, Out *out, long long *size);

#endif

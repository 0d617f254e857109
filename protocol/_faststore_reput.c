/* rmq.protocol._faststore, the reput's direct path (issue #30): hand-offs straight into the consume queues
 * and the key index, without a DispatchRequest per record.
 *
 *   reput_put(take, expected, queues, last_ts, ix) -> (n, last_ts)
 *       for each hand-off tuple of ``take`` (reput.Handoff's layout) in order: its properties are read in
 *       place (the pairs rmq.protocol.common.decode_properties keeps, a later name winning), its unit goes
 *       into its consume queue (cq_put_one: ConsumeQueueDispatcher's rules, transaction records skipped)
 *       and its keys (``topic#UNIQ_KEY``, then ``topic#k`` for each space-separated KEYS token) into the
 *       index file ``ix`` describes (IndexDispatcher's guard and IndexFile.put_many's entries, slots and
 *       header). Returns how many records it took and the store timestamp of the last unit put (the value
 *       given when none was).
 *
 *       ``ix``: None (no index), or the list [mm, slots, max_entries, entries_at, reserved, count,
 *       begin_ts, begin_phy, slot_count, end_phy, end_ts, guard] of the index file being written and the
 *       dispatcher's guard; items 5.. are set to the new values before the call returns or raises, so the
 *       caller keeps the file's attributes in step whatever happened.
 *
 *       It stops before a record the pure path must decide, having done nothing for it: one that does not
 *       start at ``expected`` (the end of the one before; a segment roll), a schedule-topic record with a
 *       DELAY property (its tags code is its deliver time), a lone surrogate in a hashed string, more keys
 *       than the index file has room for (its roll) or reserved bytes, a consume queue that does not exist
 *       or whose unit is not the common case (cq_put_one returns 0), and any field of another type or
 *       outside its range. Index entries are written only inside the buffer, below entries_at + 20 *
 *       max_entries and the reserved bytes; each record's entry count goes into the header before its
 *       slots point at them (put_many's crash order), the whole header once at the end.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_faststore.h"

#define MAX_KEYS 64 /* keys of one record the direct path hashes; more: the pure path */

enum { X_MM, X_SLOTS, X_MAX, X_AT, X_RESERVED, X_COUNT, X_BEGIN_TS, X_BEGIN_PHY, X_SLOT_COUNT, X_END_PHY, X_END_TS,
       X_GUARD, N_IX };

typedef struct { Py_ssize_t at, len; } Span; /* a value inside the properties string; len 0: absent */

typedef struct {
    int kind;
    const void *data;
} Str;

static inline Py_UCS4 ch(const Str *s, Py_ssize_t i) { return PyUnicode_READ(s->kind, s->data, i); }

/* Does props[a:b] equal the ASCII ``name``? */
static int name_is(const Str *s, Py_ssize_t a, Py_ssize_t b, const char *name) {
    Py_ssize_t n = (Py_ssize_t)strlen(name);
    if (b - a != n) return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (ch(s, a + i) != (Py_UCS4)(unsigned char)name[i]) return 0;
    return 1;
}

/* TAGS, KEYS, UNIQ_KEY and DELAY of a properties string: pairs split at \x02, each cut at its first \x01,
 * kept when both sides are non-empty. */
static void read_props(const Str *s, Py_ssize_t n, Span *tags, Span *keys, Span *uniq, int *delay) {
    Py_ssize_t start = 0;
    while (start <= n) {
        Py_ssize_t end = start, cut = -1;
        while (end < n && ch(s, end) != 2) {
            if (cut < 0 && ch(s, end) == 1) cut = end;
            end++;
        }
        if (cut > start && cut < end - 1) {
            Span v = {cut + 1, end - cut - 1};
            if (name_is(s, start, cut, "TAGS")) *tags = v;
            else if (name_is(s, start, cut, "KEYS")) *keys = v;
            else if (name_is(s, start, cut, "UNIQ_KEY")) *uniq = v;
            else if (name_is(s, start, cut, "DELAY")) *delay = 1;
        }
        start = end + 1;
    }
}

/* Java's String.hashCode continued over s[a:b]; 0 at a lone surrogate. */
static inline int hash_on(const Str *s, Py_ssize_t a, Py_ssize_t b, uint32_t *h) {
    return java_hash_on(s->kind, s->data, a, b, h);
}

static inline int32_t slot_hash(uint32_t h) {
    int32_t v = (int32_t)h;
    return v == INT32_MIN ? 0 : (v < 0 ? -v : v);
}

/* The index keys of one record: hashes of topic#uniq and topic#k for each token of keys; -1 when one
 * cannot be hashed here or there are too many, else how many. */
static int key_hashes(const Str *t, Py_ssize_t tlen, const Str *p, Span uniq, Span keys, int32_t *out) {
    uint32_t base = 0;
    if (!hash_on(t, 0, tlen, &base)) return -1;
    base = 31 * base + '#';
    int n = 0;
    if (uniq.len) {
        uint32_t h = base;
        if (!hash_on(p, uniq.at, uniq.at + uniq.len, &h)) return -1;
        out[n++] = slot_hash(h);
    }
    Py_ssize_t i = keys.at, end = keys.at + keys.len;
    while (keys.len && i < end) {
        Py_ssize_t j = i;
        while (j < end && ch(p, j) != ' ') j++;
        if (j > i) {
            uint32_t h = base;
            if (n == MAX_KEYS || !hash_on(p, i, j, &h)) return -1;
            out[n++] = slot_hash(h);
        }
        i = j + 1;
    }
    return n;
}

typedef struct {
    unsigned char *base;
    Py_ssize_t len;
    long long slots, max, at, reserved, count, begin_ts, begin_phy, slot_count, end_phy, end_ts, guard;
    int wrote;
} Ix;

static int ix_load(PyObject *ix, Ix *x, Py_buffer *view) {
    long long v[N_IX];
    if (!PyList_CheckExact(ix) || PyList_GET_SIZE(ix) != N_IX) goto bad;
    for (int k = X_SLOTS; k < N_IX; k++)
        if (!int_in(PyList_GET_ITEM(ix, k), INT64_MIN, INT64_MAX, &v[k])) goto bad;
    if (v[X_SLOTS] <= 0 || v[X_SLOTS] > INT32_MAX || v[X_COUNT] < 0 || v[X_MAX] < 0 || v[X_MAX] > INT32_MAX
        || v[X_AT] < 40 + v[X_SLOTS] * 4)
        goto bad;
    if (PyObject_GetBuffer(PyList_GET_ITEM(ix, X_MM), view, PyBUF_WRITABLE) < 0) return -1;
    *x = (Ix){(unsigned char *)view->buf, view->len, v[X_SLOTS], v[X_MAX], v[X_AT], v[X_RESERVED], v[X_COUNT],
              v[X_BEGIN_TS], v[X_BEGIN_PHY], v[X_SLOT_COUNT], v[X_END_PHY], v[X_END_TS], v[X_GUARD], 0};
    if (x->at > x->len) { PyBuffer_Release(view); goto bad; }
    return 0;
bad:
    PyErr_SetString(PyExc_ValueError, "reput_put: index state outside the common case");
    return -1;
}

/* The header once, then the new values into the caller's list (an error already set is kept). */
static int ix_store(PyObject *ix, Ix *x) {
    if (x->wrote) {
        unsigned char *b = x->base;
        wr_i64(b, x->begin_ts);
        wr_i64(b + 8, x->end_ts);
        wr_i64(b + 16, x->begin_phy);
        wr_i64(b + 24, x->end_phy);
        wr_i32(b + 32, x->slot_count);
        wr_i32(b + 36, x->count);
    }
    long long v[N_IX] = {0, 0, 0, 0, 0, x->count, x->begin_ts, x->begin_phy, x->slot_count, x->end_phy, x->end_ts, x->guard};
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    int rc = 0;
    for (int k = X_COUNT; k < N_IX && rc == 0; k++) {
        PyObject *n = PyLong_FromLongLong(v[k]);
        if (n == NULL || PyList_SetItem(ix, k, n) < 0) rc = -1;
    }
    if (et != NULL) PyErr_Restore(et, ev, tb);
    return rc;
}

/* Room for ``n`` more entries in the file and its reserved bytes. */
static int ix_room(const Ix *x, int n) {
    long long need = x->at + (x->count + n) * 20;
    return x->count + n <= x->max && need <= x->reserved && need <= x->len && x->at + x->max * 20 >= need;
}

static void ix_add(Ix *x, const int32_t *hashes, int n, long long phy, long long ts) {
    unsigned char *b = x->base;
    wr_i32(b + 36, x->count + n); /* put_many's order: the count first, so no slot points past it */
    for (int k = 0; k < n; k++) {
        int32_t h = hashes[k];
        unsigned char *slot = b + 40 + (h % x->slots) * 4;
        uint32_t u = ((uint32_t)slot[0] << 24) | ((uint32_t)slot[1] << 16) | ((uint32_t)slot[2] << 8) | slot[3];
        long long prev = (int32_t)u;
        if (prev <= 0 || prev > x->count) prev = 0;
        long long diff = 0;
        if (x->begin_ts > 0 && ts > x->begin_ts) {
            diff = (long long)(((unsigned long long)ts - (unsigned long long)x->begin_ts) / 1000);
            if (diff > INT32_MAX) diff = INT32_MAX;
        }
        unsigned char *e = b + x->at + x->count * 20;
        wr_i32(e, h);
        wr_i64(e + 4, phy);
        wr_i32(e + 12, diff);
        wr_i32(e + 16, prev);
        if (x->count <= 1) {
            x->begin_phy = phy;
            x->begin_ts = ts;
        }
        if (prev == 0) x->slot_count++;
        wr_i32(slot, x->count);
        x->count++;
    }
    x->end_phy = phy;
    x->end_ts = ts;
    x->wrote = 1;
}

/* queues[topic][qid], borrowed; NULL without an error when there is none. */
static PyObject *queue_of(PyObject *queues, PyObject *topic, PyObject *qid) {
    PyObject *t = PyDict_GetItemWithError(queues, topic);
    if (t == NULL || !PyDict_CheckExact(t)) return NULL;
    return PyDict_GetItemWithError(t, qid);
}

PyObject *reput_put(PyObject *self, PyObject *args) {
    PyObject *take, *queues, *last_ts, *ix;
    long long expected;
    if (!PyArg_ParseTuple(args, "O!LO!OO:reput_put", &PyList_Type, &take, &expected, &PyDict_Type, &queues, &last_ts, &ix))
        return NULL;
    Ix x = {0};
    Py_buffer view;
    int has_ix = ix != Py_None;
    if (has_ix && ix_load(ix, &x, &view) < 0) return NULL;
    Py_INCREF(last_ts);
    Seen seen[SEEN];
    int nseen = 0, failed = 0;
    Py_ssize_t i = 0;
    for (; i < PyList_GET_SIZE(take); i++) {
        PyObject *h = PyList_GET_ITEM(take, i);
        if (!PyTuple_CheckExact(h) || PyTuple_GET_SIZE(h) != 9) break;
        PyObject *topic = PyTuple_GET_ITEM(h, 2), *qid = PyTuple_GET_ITEM(h, 3), *ts = PyTuple_GET_ITEM(h, 6);
        PyObject *props = PyTuple_GET_ITEM(h, 8);
        long long phys, size, qoff, sys_flag, t, end;
        if (!int_in(PyTuple_GET_ITEM(h, 0), INT64_MIN, INT64_MAX, &phys) || phys != expected
            || !int_in(PyTuple_GET_ITEM(h, 1), 0, INT32_MAX, &size) || !PyUnicode_CheckExact(topic)
            || !PyLong_CheckExact(qid) || !int_in(PyTuple_GET_ITEM(h, 4), 0, INT64_MAX / 20, &qoff)
            || !int_in(PyTuple_GET_ITEM(h, 5), INT64_MIN, INT64_MAX, &sys_flag) || !int_in(ts, INT64_MIN, INT64_MAX, &t)
            || !PyUnicode_CheckExact(props) || __builtin_add_overflow(phys, size, &end))
            break;
        Str p = {PyUnicode_KIND(props), PyUnicode_DATA(props)}, tp = {PyUnicode_KIND(topic), PyUnicode_DATA(topic)};
        Span tags = {0, 0}, keys = {0, 0}, uniq = {0, 0};
        int delay = 0;
        read_props(&p, PyUnicode_GET_LENGTH(props), &tags, &keys, &uniq, &delay);
        if (delay && PyUnicode_GET_LENGTH(topic) == 19 && name_is(&tp, 0, 19, "SCHEDULE_TOPIC_XXXX")) break;
        uint32_t tc = 0;
        if (tags.len && !hash_on(&p, tags.at, tags.at + tags.len, &tc)) break;
        long long tx = sys_flag & 0xC;
        int32_t hashes[MAX_KEYS];
        int nkeys = 0, indexed = has_ix && phys > x.guard;
        if (indexed && tx != 12) {
            nkeys = key_hashes(&tp, PyUnicode_GET_LENGTH(topic), &p, uniq, keys, hashes);
            if (nkeys < 0 || (nkeys > 0 && !ix_room(&x, nkeys))) break;
        }
        if (tx != 4 && tx != 12) {
            PyObject *cq = queue_of(queues, topic, qid);
            if (cq == NULL) {
                if (PyErr_Occurred()) failed = 1;
                break; /* a new queue: the pure path creates it */
            }
            Py_INCREF(cq);
            int rc = cq_put_one(cq, phys, size, (int32_t)tc, qoff, seen, &nseen);
            Py_DECREF(cq);
            if (rc < 0) failed = 1;
            if (rc <= 0) break;
            Py_SETREF(last_ts, Py_NewRef(ts));
        }
        if (indexed) {
            x.guard = phys;
            if (nkeys > 0) ix_add(&x, hashes, nkeys, phys, t);
        }
        expected = end;
    }
    seen_clear(seen, nseen);
    if (has_ix) {
        if (ix_store(ix, &x) < 0) failed = 1;
        PyBuffer_Release(&view);
    }
    if (failed) {
        Py_DECREF(last_ts);
        return NULL;
    }
    return Py_BuildValue("(nN)", i, last_ts);
}

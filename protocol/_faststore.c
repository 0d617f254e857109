/* rmq.protocol._faststore: the compiled commitlog append of the mmap store (issue #30, step 4).
 *
 * Two calls per put (a single message or a batch of one topic and queue):
 *
 *   measure(batch, prefix, head_size, max_body, is_batch) -> int
 *       the bytes the records will take, or -1 when any message is outside the common case (a field of
 *       another type or outside its Java range, an IPv6 born host, a body over max_body, properties
 *       that are not UTF-8 or over 32767 bytes, and for a batch: another topic or queue, a transaction
 *       flag, a DELAY property). The caller then takes the pure path for the whole put, so refusals,
 *       their statuses and remarks stay the pure path's by construction.
 *
 *   pack(mm, pos, total, batch, prefix, store_host, store_v6, phys, queue_id, queue_offset, step,
 *        store_timestamp, handoff, topic) -> None
 *       writes the records (the layout of rmq.protocol.record, CRC through the configured crc32, the
 *       library the pure path uses) straight into the writable buffer ``mm`` at [pos, pos + total),
 *       and appends one hand-off tuple per record to ``handoff`` (reput.Handoff's layout). Every write
 *       is checked against that region: a batch whose records would not end exactly at pos + total
 *       raises ValueError before a byte past the region is touched, and the hand-offs it added are
 *       removed again.
 *
 * And one call per run of index keys (the reput's IndexDispatcher):
 *
 *   index_put(mm, items, i, stop, entries_at, count, slots, begin_ts, begin_phy, slot_count, phy, ts)
 *       -> (i, count, begin_ts, begin_phy, slot_count, phy, ts)
 *       adds items[i:stop] ((key, commitlog offset, store timestamp) tuples) to an index file: the
 *       key's Java String.hashCode over UTF-16 units picks a slot, each entry (hash, offset, seconds
 *       since begin_ts, previous entry of the slot) goes at the end and the slot points at it, as
 *       IndexFile.put_many does. It stops early at an item outside the common case (not a 3-tuple of
 *       str and ints in range, a lone surrogate in the key) and returns where it stopped, for the pure
 *       loop to go on from there. The header is the caller's (written before and after the call).
 *
 * And one call per reput turn over the hand-offs of the records this process appended:
 *
 *   requests(take, expected, out) -> int
 *       appends to ``out`` a DispatchRequest per hand-off tuple of ``take`` (properties decoded as
 *       rmq.protocol.common.decode_properties does, the tags code as tags_code), and returns how many
 *       it took; it stops at a record that does not start at ``expected`` (the end of the one before),
 *       at a schedule-topic record with a DELAY property, and at anything outside the common case:
 *       the reput's pure loop decides those.
 *
 * And per pull one call over the consume-queue units it may scan: scan (the records as bytes objects) or
 * pull_join (tag codes, the records in one body), in _faststore_pull.c.
 *
 * And one call per reput batch for the consume queues: cq_put, in _faststore_cq.c; one per socket read of
 * common-case sends: send_serve, in _faststore_send.c; one per reput turn straight from the hand-offs into
 * the consume queues and the index: reput_put, in _faststore_reput.c.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#include "_faststore.h"

#define MAX_PROPS 32767
#define BORN_V6 0x10
#define STORE_V6 0x20

PyObject *crc_fn = NULL; /* bytes -> int: isal's or zlib's crc32, whichever the pure path uses */
int32_t magic = 0;

enum {
    A_TOPIC, A_QID, A_BODY, A_FLAG, A_PROPS, A_SYSFLAG, A_BORN_TS, A_BORN_HOST, A_RECONSUME, A_PREPARED,
    A_STORE_TS, N_ATTR
};
static const char *const attr_names[N_ATTR] = {
    "topic", "queue_id", "body", "flag", "properties", "sys_flag", "born_timestamp", "born_host",
    "reconsume_times", "prepared_tx_offset", "store_timestamp",
};
static PyTypeObject *msg_type = NULL; /* MessageRecord: its slots are read in place */
static Py_ssize_t attr_off[N_ATTR];

/* One message's fields, borrowed from it (the message holds them for the whole call). */
typedef struct {
    PyObject *topic, *props, *prepared_obj, *body_obj;
    const char *body, *born_host, *pb;
    Py_ssize_t body_len, pb_len;
    long long qid, flag, sys_flag, born_ts, reconsume, prepared, store_ts;
} Msg;

/* Reads message ``m`` (borrowed values: the message holds them for the whole call) into ``r``: 1 when it
 * is a common-case message, 0 when not (another type, an unset slot, a field of another type or range). */
static int load(PyObject *m, Msg *r) {
    if (Py_TYPE(m) != msg_type) return 0;
    PyObject *v[N_ATTR];
    for (int i = 0; i < N_ATTR; i++) {
        v[i] = *(PyObject **)((char *)m + attr_off[i]);
        if (v[i] == NULL) return 0;
    }
    const long long I32_MIN = INT32_MIN, I32_MAX = INT32_MAX;
    r->topic = v[A_TOPIC];
    r->props = v[A_PROPS];
    r->prepared_obj = v[A_PREPARED];
    r->body_obj = v[A_BODY];
    if (!PyUnicode_CheckExact(v[A_TOPIC]) || !PyUnicode_CheckExact(v[A_PROPS]) || !PyBytes_CheckExact(v[A_BODY])
        || !PyBytes_CheckExact(v[A_BORN_HOST]) || PyBytes_GET_SIZE(v[A_BORN_HOST]) != 8
        || !int_in(v[A_QID], I32_MIN, I32_MAX, &r->qid) || !int_in(v[A_FLAG], I32_MIN, I32_MAX, &r->flag)
        || !int_in(v[A_SYSFLAG], I32_MIN, I32_MAX, &r->sys_flag)
        || !int_in(v[A_BORN_TS], INT64_MIN, INT64_MAX, &r->born_ts)
        || !int_in(v[A_RECONSUME], I32_MIN, I32_MAX, &r->reconsume)
        || !int_in(v[A_PREPARED], INT64_MIN, INT64_MAX, &r->prepared)
        || !int_in(v[A_STORE_TS], INT64_MIN, INT64_MAX, &r->store_ts)) /* the put's stamp may be the first's */
        return 0;
    r->body = PyBytes_AS_STRING(v[A_BODY]);
    r->body_len = PyBytes_GET_SIZE(v[A_BODY]);
    r->born_host = PyBytes_AS_STRING(v[A_BORN_HOST]);
    r->pb = PyUnicode_AsUTF8AndSize(v[A_PROPS], &r->pb_len); /* cached in the str: no copy per put */
    if (r->pb == NULL) { /* lone surrogates: the pure path raises its own error */
        PyErr_Clear();
        return 0;
    }
    return r->pb_len <= MAX_PROPS;
}

static int has_delay(const Msg *r) {
    static const char key[] = "DELAY\x01";
    const size_t k = sizeof(key) - 1;
    const char *p = r->pb, *end = r->pb + r->pb_len;
    while ((size_t)(end - p) >= k && (p = memchr(p, 'D', (size_t)(end - p) - k + 1)) != NULL) {
        if (memcmp(p, key, k) == 0) return 1;
        p++;
    }
    return 0;
}

static PyObject *measure(PyObject *self, PyObject *args) {
    PyObject *batch, *prefix;
    long long head_size, max_body;
    int is_batch;
    if (!PyArg_ParseTuple(args, "OSLLp", &batch, &prefix, &head_size, &max_body, &is_batch)) return NULL;
    if (!PyList_CheckExact(batch) && !PyTuple_CheckExact(batch)) return PyLong_FromLong(-1);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(batch);
    PyObject **items = PySequence_Fast_ITEMS(batch);
    long long total = 0;
    const long long fixed = head_size + PyBytes_GET_SIZE(prefix) + 2;
    Msg first;
    for (Py_ssize_t i = 0; i < n; i++) {
        Msg r;
        if (!load(items[i], &r) || r.body_len > max_body) return PyLong_FromLong(-1);
        if (i == 0) first = r;
        if (is_batch) { /* RocketMQ's batch rules: the pure path refuses what breaks them, with its remark */
            int same = PyUnicode_Compare(r.topic, first.topic);
            if (same == -1 && PyErr_Occurred()) return NULL;
            if (same != 0 || r.qid != first.qid || (r.sys_flag & 0xC) || has_delay(&r)) return PyLong_FromLong(-1);
        }
        total += fixed + r.body_len + r.pb_len;
    }
    return PyLong_FromLongLong(total);
}

/* The hand-off tuple of one record: (phys, size, topic, queue_id, queue_offset, sys_flag,
 * store_timestamp, prepared_offset, properties). */
static PyObject *handoff_tuple(long long at, long long size, PyObject *topic, PyObject *qid, long long q,
                               long long sf, PyObject *ts, const Msg *r) {
    PyObject *t = PyTuple_New(9);
    if (t == NULL) return NULL;
    PyObject *ints[6] = {PyLong_FromLongLong(at), PyLong_FromLongLong(size), Py_NewRef(qid),
                         PyLong_FromLongLong(q), PyLong_FromLongLong(sf), Py_NewRef(ts)};
    for (int i = 0; i < 6; i++) {
        if (ints[i] == NULL) {
            for (int j = 0; j < 6; j++) Py_XDECREF(ints[j]);
            Py_DECREF(t);
            return NULL;
        }
    }
    PyTuple_SET_ITEM(t, 0, ints[0]);
    PyTuple_SET_ITEM(t, 1, ints[1]);
    Py_INCREF(topic);
    PyTuple_SET_ITEM(t, 2, topic);
    PyTuple_SET_ITEM(t, 3, ints[2]);
    PyTuple_SET_ITEM(t, 4, ints[3]);
    PyTuple_SET_ITEM(t, 5, ints[4]);
    PyTuple_SET_ITEM(t, 6, ints[5]);
    Py_INCREF(r->prepared_obj);
    PyTuple_SET_ITEM(t, 7, r->prepared_obj);
    Py_INCREF(r->props);
    PyTuple_SET_ITEM(t, 8, r->props);
    return t;
}

static long long body_crc(PyObject *body) {
    PyObject *c = PyObject_CallOneArg(crc_fn, body);
    if (c == NULL) return -1;
    unsigned long v = PyLong_AsUnsignedLongMask(c);
    Py_DECREF(c);
    if (v == (unsigned long)-1 && PyErr_Occurred()) return -1;
    return (long long)(v & 0x7FFFFFFFUL);
}

static PyObject *pack(PyObject *self, PyObject *args) {
    PyObject *mm, *batch, *prefix, *store_host, *handoff, *topic, *qid_obj, *ts_obj;
    long long pos, total, store_v6, phys, qid, qoff, step, ts;
    if (!PyArg_ParseTuple(args, "OLLOSSLLO!LLO!O!U", &mm, &pos, &total, &batch, &prefix, &store_host, &store_v6,
                          &phys, &PyLong_Type, &qid_obj, &qoff, &step, &PyLong_Type, &ts_obj, &PyList_Type,
                          &handoff, &topic))
        return NULL;
    int overflow = 0;
    qid = PyLong_AsLongLongAndOverflow(qid_obj, &overflow);
    if (!overflow) ts = PyLong_AsLongLongAndOverflow(ts_obj, &overflow);
    if (overflow || qid < INT32_MIN || qid > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "queue_id or store_timestamp outside its Java type");
        return NULL;
    }
    if (crc_fn == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_faststore.configure() was not called");
        return NULL;
    }
    if (!PyList_CheckExact(batch) && !PyTuple_CheckExact(batch)) {
        PyErr_SetString(PyExc_TypeError, "batch must be a list or tuple");
        return NULL;
    }
    Py_ssize_t sh_len = PyBytes_GET_SIZE(store_host);
    if (sh_len != 8 && sh_len != 20) {
        PyErr_SetString(PyExc_ValueError, "store_host must be 8 or 20 bytes");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(mm, &view, PyBUF_WRITABLE) < 0) return NULL;
    if (pos < 0 || total < 0 || pos > view.len || total > view.len - pos) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "the region to write is outside the buffer");
        return NULL;
    }
    unsigned char *base = (unsigned char *)view.buf + pos;
    const long long head_size = 64 + sh_len + 16, tl = PyBytes_GET_SIZE(prefix);
    const char *sh = PyBytes_AS_STRING(store_host), *tp = PyBytes_AS_STRING(prefix);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(batch), handed = PyList_GET_SIZE(handoff);
    PyObject **items = PySequence_Fast_ITEMS(batch);
    long long p = 0, q = qoff;
    for (Py_ssize_t i = 0; i < n; i++) {
        Msg r;
        if (!load(items[i], &r)) {
            PyErr_SetString(PyExc_ValueError, "a message outside the compiled path's common case");
            goto fail;
        }
        long long size = head_size + r.body_len + tl + 2 + r.pb_len;
        if (size > total - p) {
            PyErr_SetString(PyExc_ValueError, "the records do not fit the region reserved for them");
            goto fail;
        }
        long long crc = body_crc(r.body_obj);
        if (crc < 0) goto fail;
        long long sf = (r.sys_flag & ~(long long)(BORN_V6 | STORE_V6)) | store_v6;
        PyObject *h = handoff_tuple(phys + p, size, topic, qid_obj, q, sf, ts_obj, &r);
        if (h == NULL) goto fail;
        int added = PyList_Append(handoff, h);
        Py_DECREF(h);
        if (added < 0) goto fail;
        unsigned char *w = base + p;
        wr_i32(w, size);
        wr_i32(w + 4, magic);
        wr_i32(w + 8, crc);
        wr_i32(w + 12, qid);
        wr_i32(w + 16, r.flag);
        wr_i64(w + 20, q);
        wr_i64(w + 28, phys + p);
        wr_i32(w + 36, sf);
        wr_i64(w + 40, r.born_ts);
        memcpy(w + 48, r.born_host, 8);
        wr_i64(w + 56, ts);
        memcpy(w + 64, sh, (size_t)sh_len);
        w += 64 + sh_len;
        wr_i32(w, r.reconsume);
        wr_i64(w + 4, r.prepared);
        wr_i32(w + 12, r.body_len);
        w += 16;
        memcpy(w, r.body, (size_t)r.body_len);
        w += r.body_len;
        memcpy(w, tp, (size_t)tl);
        w += tl;
        w[0] = (unsigned char)(r.pb_len >> 8);
        w[1] = (unsigned char)r.pb_len;
        memcpy(w + 2, r.pb, (size_t)r.pb_len);
        p += size;
        q += step;
    }
    PyBuffer_Release(&view);
    if (p != total) {
        PyList_SetSlice(handoff, handed, PyList_GET_SIZE(handoff), NULL);
        PyErr_SetString(PyExc_ValueError, "the records do not fill the region reserved for them");
        return NULL;
    }
    Py_RETURN_NONE;
fail:
    PyBuffer_Release(&view);
    {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyList_SetSlice(handoff, handed, PyList_GET_SIZE(handoff), NULL);
        PyErr_Restore(et, ev, tb);
    }
    return NULL;
}

/* Java's String.hashCode of a str, over its UTF-16 code units; 0 when it has a lone surrogate (the pure
 * path cannot encode it either, and takes over). */
static int java_hash(PyObject *key, int32_t *out) {
    uint32_t h = 0;
    if (!java_hash_on(PyUnicode_KIND(key), PyUnicode_DATA(key), 0, PyUnicode_GET_LENGTH(key), &h)) return 0;
    *out = (int32_t)h;
    return 1;
}

static inline int32_t rd_i32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

static PyObject *index_put(PyObject *self, PyObject *args) {
    PyObject *mm, *items;
    Py_ssize_t i, stop;
    long long at, count, slots, begin_ts, begin_phy, slot_count, phy, ts;
    if (!PyArg_ParseTuple(args, "OO!nnLLLLLLLL", &mm, &PyList_Type, &items, &i, &stop, &at, &count, &slots,
                          &begin_ts, &begin_phy, &slot_count, &phy, &ts))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(mm, &view, PyBUF_WRITABLE) < 0) return NULL;
    if (i < 0 || stop > PyList_GET_SIZE(items) || slots <= 0 || count < 0 || 40 + slots * 4 > at
        || (stop > i && (at > view.len || count + (stop - i) > (view.len - at) / 20))) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "index entries outside the file");
        return NULL;
    }
    unsigned char *base = (unsigned char *)view.buf;
    for (; i < stop; i++) {
        PyObject *it = PyList_GET_ITEM(items, i);
        if (!PyTuple_CheckExact(it) || PyTuple_GET_SIZE(it) != 3 || !PyUnicode_CheckExact(PyTuple_GET_ITEM(it, 0)))
            break;
        long long p, t;
        int32_t h;
        if (!int_in(PyTuple_GET_ITEM(it, 1), INT64_MIN, INT64_MAX, &p)
            || !int_in(PyTuple_GET_ITEM(it, 2), INT64_MIN, INT64_MAX, &t) || !java_hash(PyTuple_GET_ITEM(it, 0), &h))
            break;
        h = h == INT32_MIN ? 0 : (h < 0 ? -h : h);
        unsigned char *slot = base + 40 + (h % slots) * 4;
        long long prev = rd_i32(slot);
        if (prev <= 0 || prev > count) prev = 0;
        long long diff = 0;
        if (begin_ts > 0 && t > begin_ts) {
            diff = (long long)(((unsigned long long)t - (unsigned long long)begin_ts) / 1000);
            if (diff > INT32_MAX) diff = INT32_MAX;
        }
        unsigned char *e = base + at + count * 20;
        wr_i32(e, h);
        wr_i64(e + 4, p);
        wr_i32(e + 12, diff);
        wr_i32(e + 16, prev);
        if (count <= 1) {
            begin_phy = p;
            begin_ts = t;
        }
        if (prev == 0) slot_count++;
        wr_i32(slot, count);
        count++;
        phy = p;
        ts = t;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(nLLLLLL)", i, count, begin_ts, begin_phy, slot_count, phy, ts);
}

/* DispatchRequest: its slots (_faststore.h), written in place on a fresh instance (no __init__ call per record) */
static const char *const req_names[N_REQ] = {
    "topic", "queue_id", "commit_log_offset", "msg_size", "tags_code", "store_timestamp",
    "consume_queue_offset", "sys_flag", "prepared_tx_offset", "keys", "uniq_key", "properties",
};
PyTypeObject *req_type = NULL;
Py_ssize_t req_off[N_REQ];
static PyObject *sep_prop = NULL, *k_tags = NULL, *k_keys = NULL, *k_uniq = NULL, *k_delay = NULL, *schedule = NULL;

/* decode_properties of a str: pairs split at \x02, each cut at its first \x01, kept when both sides
 * are non-empty (a later pair with the same name wins). */
static PyObject *decode_props(PyObject *props) {
    PyObject *d = PyDict_New();
    if (d == NULL) return NULL;
    PyObject *parts = PyUnicode_Split(props, sep_prop, -1);
    if (parts == NULL) goto fail;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(parts); i++) {
        PyObject *item = PyList_GET_ITEM(parts, i);
        Py_ssize_t n = PyUnicode_GET_LENGTH(item);
        Py_ssize_t at = PyUnicode_FindChar(item, 1, 0, n, 1);
        if (at == -2) { Py_DECREF(parts); goto fail; }
        if (at <= 0 || at == n - 1) continue;
        PyObject *k = PyUnicode_Substring(item, 0, at), *v = PyUnicode_Substring(item, at + 1, n);
        int bad = k == NULL || v == NULL || PyDict_SetItem(d, k, v) < 0;
        Py_XDECREF(k);
        Py_XDECREF(v);
        if (bad) { Py_DECREF(parts); goto fail; }
    }
    Py_DECREF(parts);
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

static PyObject *requests(PyObject *self, PyObject *args) {
    PyObject *take, *out;
    long long expected;
    if (!PyArg_ParseTuple(args, "O!LO!", &PyList_Type, &take, &expected, &PyList_Type, &out)) return NULL;
    if (req_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_faststore.configure() was not given the request type");
        return NULL;
    }
    Py_ssize_t i = 0, n = PyList_GET_SIZE(take);
    for (; i < n; i++) {
        PyObject *h = PyList_GET_ITEM(take, i);
        if (!PyTuple_CheckExact(h) || PyTuple_GET_SIZE(h) != 9) break;
        PyObject *topic = PyTuple_GET_ITEM(h, 2), *props = PyTuple_GET_ITEM(h, 8);
        long long phys, size;
        if (!int_in(PyTuple_GET_ITEM(h, 0), INT64_MIN, INT64_MAX, &phys) || phys != expected
            || !int_in(PyTuple_GET_ITEM(h, 1), 0, INT64_MAX, &size) || !PyUnicode_CheckExact(topic)
            || !PyUnicode_CheckExact(props))
            break;
        PyObject *d, *keys = Py_None, *uniq = Py_None, *tc;
        if (PyUnicode_GET_LENGTH(props) == 0) {
            d = PyDict_New();
            tc = PyLong_FromLong(0);
        } else {
            d = decode_props(props);
            if (d == NULL) return NULL;
            int sched = PyUnicode_Compare(topic, schedule);
            if (sched == -1 && PyErr_Occurred()) { Py_DECREF(d); return NULL; }
            PyObject *tags = PyDict_GetItemWithError(d, k_tags);
            int32_t hash = 0;
            if ((sched == 0 && PyDict_GetItemWithError(d, k_delay) != NULL) || PyErr_Occurred()
                || (tags != NULL && !java_hash(tags, &hash))) {
                Py_DECREF(d);
                if (PyErr_Occurred()) return NULL;
                break; /* a delayed message's tags code is its deliver time; a lone surrogate: the pure path */
            }
            tc = PyLong_FromLong(hash);
            keys = PyDict_GetItemWithError(d, k_keys);
            uniq = keys == NULL && PyErr_Occurred() ? NULL : PyDict_GetItemWithError(d, k_uniq);
            if (PyErr_Occurred()) { Py_DECREF(d); Py_XDECREF(tc); return NULL; }
            if (keys == NULL) keys = Py_None;
            if (uniq == NULL) uniq = Py_None;
        }
        if (d == NULL || tc == NULL) { Py_XDECREF(d); Py_XDECREF(tc); return NULL; }
        PyObject *r = req_type->tp_alloc(req_type, 0);
        if (r == NULL) { Py_DECREF(d); Py_DECREF(tc); return NULL; }
        PyObject *vals[N_REQ] = {
            Py_NewRef(topic), Py_NewRef(PyTuple_GET_ITEM(h, 3)), Py_NewRef(PyTuple_GET_ITEM(h, 0)),
            Py_NewRef(PyTuple_GET_ITEM(h, 1)), tc, Py_NewRef(PyTuple_GET_ITEM(h, 6)),
            Py_NewRef(PyTuple_GET_ITEM(h, 4)), Py_NewRef(PyTuple_GET_ITEM(h, 5)), Py_NewRef(PyTuple_GET_ITEM(h, 7)),
            Py_NewRef(keys), Py_NewRef(uniq), d,
        };
        for (int j = 0; j < N_REQ; j++) *(PyObject **)((char *)r + req_off[j]) = vals[j];
        int added = PyList_Append(out, r);
        Py_DECREF(r);
        if (added < 0) return NULL;
        expected = phys + size;
    }
    return PyLong_FromSsize_t(i);
}

/* The object slots of ``type`` named ``names`` into ``off``; -1 (TypeError set) when one is not. */
static int slot_offsets(PyObject *type, const char *const *names, int n, Py_ssize_t *off) {
    PyTypeObject *t = (PyTypeObject *)type;
    for (int i = 0; i < n; i++) {
        PyObject *d = PyObject_GetAttrString(type, names[i]);
        if (d == NULL) return -1;
        int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX &&
                 ((PyMemberDescrObject *)d)->d_common.d_type == t;
        if (ok) off[i] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_DECREF(d);
        if (!ok || off[i] <= 0 || off[i] + (Py_ssize_t)sizeof(PyObject *) > t->tp_basicsize) {
            PyErr_Format(PyExc_TypeError, "%s is not an object slot of %s", names[i], t->tp_name);
            return -1;
        }
    }
    return 0;
}

static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *fn, *type, *rtype;
    int m;
    if (!PyArg_ParseTuple(args, "OiO!O!:configure", &fn, &m, &PyType_Type, &type, &PyType_Type, &rtype)) return NULL;
    if (!PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "crc32 must be callable");
        return NULL;
    }
    PyTypeObject *rt = (PyTypeObject *)rtype;
    if (rt->tp_itemsize != 0 || rt->tp_alloc == NULL) {
        PyErr_SetString(PyExc_TypeError, "the request type must be a plain class with __slots__");
        return NULL;
    }
    Py_ssize_t off[N_ATTR], roff[N_REQ];
    if (slot_offsets(type, attr_names, N_ATTR, off) < 0 || slot_offsets(rtype, req_names, N_REQ, roff) < 0)
        return NULL;
    memcpy(attr_off, off, sizeof off);
    memcpy(req_off, roff, sizeof roff);
    Py_XSETREF(msg_type, (PyTypeObject *)Py_NewRef(type));
    Py_XSETREF(req_type, (PyTypeObject *)Py_NewRef(rtype));
    Py_XSETREF(crc_fn, Py_NewRef(fn));
    magic = (int32_t)m;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS, "configure(crc32, magic, message_type, request_type): CRC function, MAGIC_MESSAGE, MessageRecord, DispatchRequest."},
    {"measure", measure, METH_VARARGS, "Bytes a put's records take, or -1 outside the common case."},
    {"pack", pack, METH_VARARGS, "Write a measured put's records into a buffer region; append hand-offs."},
    {"index_put", index_put, METH_VARARGS, "Add a run of (key, offset, timestamp) entries to an index file."},
    {"requests", requests, METH_VARARGS, "DispatchRequests for a run of hand-offs; how many it took."},
    {"cq_put", cq_put, METH_VARARGS, "Consume-queue units for a run of DispatchRequests; where it stopped, last timestamp."},
    {"send_serve", send_serve, METH_VARARGS, "A read's leading common-case sends stored and answered (_faststore_send.c)."},
    {"reput_put", reput_put, METH_VARARGS, "Consume-queue units and index entries for a run of hand-offs (_faststore_reput.c)."},
    {"scan", pull_scan, METH_VARARGS, "A pull's scan of consume-queue units: the records it returns, or None."},
    {"pull_decode", pull_decode, METH_VARARGS, "A PULL_MESSAGE request's fields in its common shape (_faststore_pullreq.c), or None."},
    {"beat_decode", beat_decode, METH_VARARGS, "A HEART_BEAT request's opaque, language, version and body (_faststore_pullreq.c), or None."},
    {"pull_join", pull_join, METH_VARARGS, "A pull's records by tag codes in one body (_faststore_pull.c), or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_faststore", NULL, -1, methods};

PyMODINIT_FUNC PyInit__faststore(void) {
    sep_prop = PyUnicode_FromString("\x02");
    k_tags = PyUnicode_InternFromString("TAGS");
    k_keys = PyUnicode_InternFromString("KEYS");
    k_uniq = PyUnicode_InternFromString("UNIQ_KEY");
    k_delay = PyUnicode_InternFromString("DELAY");
    schedule = PyUnicode_InternFromString("SCHEDULE_TOPIC_XXXX");
    if (cq_init() < 0 || send_init() < 0 || pull_init() < 0) return NULL;
    if (!sep_prop || !k_tags || !k_keys || !k_uniq || !k_delay || !schedule) return NULL;
    return PyModule_Create(&module);
}

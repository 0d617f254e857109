/* The compiled send path's batches (issue #30): SEND_BATCH_MESSAGE, and SEND_MESSAGE(_V2) with batch=true (as
 * the C++ client sends them), stored as plugins/broker/send.py's _send_batch and storage_mmap/append.py's
 * put_batch store them.
 *
 * The body is MessageBatch's encoding: per member [total, magic, crc, flag, body length] as big-endian
 * int32s, the body, a uint16 properties length and the properties (protocol/message.py decode_batch). Every
 * member gets the header's properties appended (CLUSTER added, WAIT=true kept) and must pass what send.py
 * checks (32767 bytes, well formed, UTF-8, nothing that would defer it: DELAY, TIMER_*, TRAN_MSG) and what
 * put_batch checks (a body within maxMessageSize, the whole within its bound); anything else leaves the
 * whole request to the Python path, which then refuses or stores it. A batch taken is one record per member,
 * packed back to back at the segment's write position with consecutive queue offsets and one store
 * timestamp, one hand-off tuple each, and one answer: every member's message id joined by commas, the queue
 * id as a number, the first queue offset (send.py's _answer). First pass: decode and check, every Python
 * object made; second pass: the queue table, the hand-off list, then the bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_faststore.h"
#include "_faststore_send.h"

#define MEMBER_HEAD 20 /* total, magic, crc, flag, body length */

static long long rd_i32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

/* The next member at *pos of body[0, n): its body and raw properties; 0 when malformed (decode_batch's
 * BatchError). */
typedef struct { const unsigned char *body, *props; Py_ssize_t blen, plen; long long flag; } Member;

static int next_member(const unsigned char *d, Py_ssize_t n, Py_ssize_t *pos, Member *m) {
    Py_ssize_t at = *pos;
    if (n - at < MEMBER_HEAD + 2) return 0;
    long long total = rd_i32(d + at), blen = rd_i32(d + at + 16);
    if (total < MEMBER_HEAD + 2 || total > n - at) return 0;
    Py_ssize_t end = at + (Py_ssize_t)total, p = at + MEMBER_HEAD;
    if (blen < 0 || blen + 2 > end - p) return 0;
    m->flag = rd_i32(d + at + 12);
    m->body = d + p;
    m->blen = (Py_ssize_t)blen;
    p += m->blen;
    m->plen = ((Py_ssize_t)d[p] << 8) | d[p + 1];
    p += 2;
    if (p + m->plen != end) return 0;
    m->props = d + p;
    *pos = end;
    return 1;
}

/* The member's properties as stored into cat (room for MAX_PROPS bytes): its own, a separator unless empty
 * or ending in one, the header's; the length, or -1 when over MAX_PROPS. */
static Py_ssize_t joined(const Member *m, const Batch *b, unsigned char *cat) {
    int sep = m->plen > 0 && m->props[m->plen - 1] != 2;
    Py_ssize_t len = m->plen + sep + b->hlen;
    if (len > MAX_PROPS) return -1;
    memcpy(cat, m->props, (size_t)m->plen);
    if (sep) cat[m->plen] = 2;
    memcpy(cat + m->plen + sep, b->hprops, (size_t)b->hlen);
    return len;
}

/* waits_for_store over stored properties: no WAIT item, or the first one's value "true" in any case. */
static int waits(const unsigned char *p, Py_ssize_t n) {
    if (find(p, n, "WAIT\x01") == NULL) return 1;
    for (Py_ssize_t i = 0; i + 5 <= n; i++) {
        if ((i == 0 || p[i - 1] == 2) && memcmp(p + i, "WAIT\x01", 5) == 0) {
            const unsigned char *v = p + i + 5, *e = memchr(v, 2, (size_t)(n - i - 5));
            Py_ssize_t vn = e ? e - v : p + n - v;
            if (vn != 4) return 0;
            for (int k = 0; k < 4; k++)
                if ((v[k] | 0x20) != "true"[k]) return 0;
            return 1;
        }
    }
    return 1; /* only inside other items: prop_value finds none */
}

int batch_serve(const Batch *b, unsigned char *mm, const Answer *a, Out *out, long long *size_out) {
    const Py_ssize_t cap = b->body_len / (MEMBER_HEAD + 2) + 1;
    unsigned char *cat = PyMem_Malloc(MAX_PROPS + 1);
    unsigned long *crcs = PyMem_Malloc((size_t)cap * sizeof(unsigned long));
    long long *sizes = PyMem_Malloc((size_t)cap * sizeof(long long));
    PyObject *hands = PyList_New(0), *next = NULL;
    int rc = -1;
    if (cat == NULL || crcs == NULL || sizes == NULL || hands == NULL) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    rc = 0;
    const Py_ssize_t tl = PyBytes_GET_SIZE(b->prefix);
    Py_ssize_t pos = 0, n = 0;
    long long total = 0;
    Member m;
    while (pos < b->body_len) { /* first pass: every member decoded, checked, its objects made */
        if (!next_member(b->body, b->body_len, &pos, &m) || m.blen > b->max_body) goto done;
        Py_ssize_t cl = joined(&m, b, cat);
        if (cl < 0 || !props_ok(cat, cl) || find(cat, cl, "DELAY\x01") || find(cat, cl, "TIMER_")
            || find(cat, cl, "TRAN_MSG\x01") || (n == 0 && b->held && !waits(cat, cl)))
            goto done;
        PyObject *props = PyUnicode_DecodeUTF8((const char *)cat, cl, NULL);
        if (props == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) { rc = -1; goto done; }
            PyErr_Clear(); /* decode_batch's "not UTF-8": the pure path answers */
            goto done;
        }
        const long long size = b->head_size + m.blen + tl + 2 + cl;
        PyObject *crc_o = PyByteArray_Resize(b->cbuf, m.blen) == 0
            ? (memcpy(PyByteArray_AS_STRING(b->cbuf), m.body, (size_t)m.blen), PyObject_CallOneArg(crc_fn, b->cbuf))
            : NULL;
        PyObject *hand = hand_tuple(b->at + total, size, b->topic, b->qkey, b->qoff + n, b->sf, b->ts_obj, b->zero,
                                    props);
        crcs[n] = crc_o != NULL ? PyLong_AsUnsignedLongMask(crc_o) : 0;
        Py_XDECREF(crc_o);
        if (crc_o == NULL || hand == NULL || PyErr_Occurred() || PyList_Append(hands, hand) < 0) {
            Py_XDECREF(hand);
            rc = -1;
            goto done;
        }
        Py_DECREF(hand);
        sizes[n++] = size;
        total += size;
    }
    if (n == 0 || total > b->max_body + 192 * 1024 || total + 8 > b->room || b->at + total > b->limit) goto done;
    /* second pass: the answer's room, the queue table and the hand-off list (undone on failure), the bytes */
    const Py_ssize_t room = 8 + (Py_ssize_t)(a->head_n + a->mid_n + a->tail_n + 20 + 16 + 24)
                            + n * (Py_ssize_t)(a->idp_n + 17);
    Py_ssize_t hn = PyList_GET_SIZE(b->handoff);
    next = PyLong_FromLongLong(b->qoff + n);
    if (next == NULL || !out_room(out, room) || PyList_SetSlice(b->handoff, hn, hn, hands) < 0) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        rc = -1;
        goto done;
    }
    if (PyDict_SetItem(b->tq, b->qkey, next) < 0) {
        PyList_SetSlice(b->handoff, hn, PyList_GET_SIZE(b->handoff), NULL);
        rc = -1;
        goto done;
    }
    const Py_ssize_t sh_len = PyBytes_GET_SIZE(b->store_host);
    unsigned char *r = mm;
    pos = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        next_member(b->body, b->body_len, &pos, &m);
        Py_ssize_t cl = joined(&m, b, cat);
        wr_i32(r, sizes[i]);
        wr_i32(r + 4, magic);
        wr_i32(r + 8, (long long)(crcs[i] & 0x7FFFFFFFUL));
        wr_i32(r + 12, b->qid);
        wr_i32(r + 16, m.flag);
        wr_i64(r + 20, b->qoff + i);
        wr_i64(r + 28, b->at + (r - mm));
        wr_i32(r + 36, b->sf);
        wr_i64(r + 40, b->born_ts);
        memcpy(r + 48, PyBytes_AS_STRING(b->born), 8);
        wr_i64(r + 56, b->ts);
        memcpy(r + 64, PyBytes_AS_STRING(b->store_host), (size_t)sh_len);
        unsigned char *w = r + 64 + sh_len;
        wr_i32(w, 0);      /* reconsume times */
        wr_i64(w + 4, 0); /* prepared transaction offset */
        wr_i32(w + 12, m.blen);
        w += 16;
        memcpy(w, m.body, (size_t)m.blen);
        w += m.blen;
        memcpy(w, PyBytes_AS_STRING(b->prefix), (size_t)tl);
        w += tl;
        w[0] = (unsigned char)(cl >> 8);
        w[1] = (unsigned char)cl;
        memcpy(w + 2, cat, (size_t)cl);
        r += sizes[i];
    }
    *size_out = total;
    rc = 1;
    if (b->oneway) goto done;
    /* the answer: send.py's _answer for a stored batch */
    char *o0 = out->p + out->n + 8, *o = o0;
    o = put(o, a->head, a->head_n);
    for (Py_ssize_t i = 0, off = 0; i < n; off += sizes[i++]) {
        if (i) {
            *o++ = ',';
            o = put(o, a->idp, a->idp_n);
        }
        o = put_hex16(o, (unsigned long long)(b->at + off));
    }
    o = put(o, "\",\"queueId\":\"", 13);
    o = put_ll(o, b->qid);
    o = put(o, "\",\"queueOffset\":\"", 17);
    o = put_ll(o, b->qoff);
    o = put(o, a->mid, a->mid_n);
    o = put_ll(o, b->opaque);
    o = put(o, a->tail, a->tail_n);
    const long long hl = o - o0;
    wr_i32((unsigned char *)out->p + out->n, hl + 4);
    wr_i32((unsigned char *)out->p + out->n + 4, hl);
    out->n += 8 + hl;
done:
    Py_XDECREF(next);
    Py_XDECREF(hands);
    PyMem_Free(cat);
    PyMem_Free(crcs);
    PyMem_Free(sizes);
    return rc;
}

/* The compiled send path of rmq.protocol._faststore (issue #30): one call per socket read.
 *
 *   send_serve(src, pos, max_frame, table, prefixes, tq, forbidden, mm, wrote, fsize, fstart, limit, born,
 *              store_host, store_v6, ts, handoff, max_body, cluster, id_prefix, region, trace, version, held)
 *       -> (pos, wrote, answers, counts)
 *
 * From ``pos`` on, ``src`` (the bytes a connection read) is taken frame by frame while each frame is a
 * SEND_MESSAGE_V2, SEND_MESSAGE or SEND_BATCH_MESSAGE request in its common shape: a whole frame with a JSON header in the
 * plain form Java's fastjson, rmq and the C++ client write (no whitespace but a trailing one, known top-level
 * keys, ASCII string or plain int ext values), a request or a oneway one (stored, not answered),
 * a known topic that is not a retry, DLQ or system one, queue id digits in range, a body of at most
 * ``max_body`` bytes, well-formed properties without DELAY / TIMER_* / TRAN_MSG / CLUSTER;
 * with ``held`` (SYNC_FLUSH: the read's answers wait for one flush) also no WAIT left once WAIT=true is
 * stripped (a WAIT=false send is answered at once: the Python path's). A batch (code 320, or batch=true as
 * the C++ client sends them) is _faststore_batch.c's, with the same header checks.
 * Each such message gets what the Python path (plugins/broker/send.py, storage_mmap/append.py) gives
 * it: WAIT=true stripped and CLUSTER appended as send.py does, the record packed into ``mm`` at
 * ``wrote`` (the current segment) with the next queue offset of ``tq``, one hand-off tuple for the
 * reput, and its SUCCESS answer encoded as encode_parts writes it. The first frame outside that shape
 * (or one that would not fit the segment, or pass the reput back-log bound ``limit``) stops the call:
 * it and everything after it take the Python path, whose answers are then the reference by
 * construction. Every read of client bytes is bounds-checked against the frame, every write against
 * the segment's [wrote, fsize - 8).
 *
 * Returns where it stopped, the segment's new write position, the answers (bytes, or None) and
 * ``counts``: [topic, messages, body bytes, sends] per run of one topic, for the broker's statistics.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "_faststore.h"
#include "_faststore_send.h"


/* The fields of a send request the fast path reads, by SendKeys position. */
enum { K_TOPIC, K_QID, K_SYSFLAG, K_BORN, K_FLAG, K_PROPS, K_BATCH, N_KEYS };
static const char *const v2_keys[N_KEYS] = {"b", "e", "f", "g", "h", "i", "m"};
static const char *const long_keys[N_KEYS] = {"topic", "queueId", "sysFlag", "bornTimestamp", "flag", "properties",
                                              "batch"};

/* The K_* index of ext key ``k`` in ``names`` (V2: one letter each), or -1. */
static int field_of(const Span *k, int v2, const char *const *names) {
    if (v2) {
        if (k->n != 1) return -1;
        for (int i = 0; i < N_KEYS; i++)
            if (names[i][0] == k->p[0]) return i;
        return -1;
    }
    for (int i = 0; i < N_KEYS; i++)
        if (names[i][0] == k->p[0] && strlen(names[i]) == (size_t)k->n && memcmp(names[i], k->p, (size_t)k->n) == 0)
            return i;
    return -1;
}

/* A JSON string at *pp (after its opening quote) up to its closing quote, within end: its raw span;
 * escapes are checked (only the ones json accepts, \u to ASCII), raw bytes must be printable ASCII.
 * 0 when anything else. */
static int scan_str(const unsigned char **pp, const unsigned char *end, Span *out) {
    const unsigned char *p = *pp, *s = p;
    int esc = 0;
    while (p < end && *p != '"') {
        unsigned char c = *p;
        if (c < 0x20 || c >= 0x7F) return 0;
        if (c == '\\') {
            esc = 1;
            if (end - p < 2) return 0;
            unsigned char e = p[1];
            if (e == 'u') {
                if (end - p < 6) return 0;
                /* \u00XX below 0x80 only: the ASCII the fast path handles */
                if (p[2] != '0' || p[3] != '0' || !strchr("01234567", p[4]) || p[4] == 0 || !isxdigit(p[5]))
                    return 0;
                p += 6;
                continue;
            }
            if (!strchr("\"\\/bfnrt", e) || e == 0) return 0;
            p += 2;
            continue;
        }
        p++;
    }
    if (p >= end) return 0;
    out->p = s;
    out->n = p - s;
    out->esc = esc;
    *pp = p + 1;
    return 1;
}

/* The decoded bytes of a span into buf (room for sp->n bytes: decoding never grows); its length. */
Py_ssize_t unescape(const Span *sp, unsigned char *buf) {
    if (!sp->esc) {
        memcpy(buf, sp->p, (size_t)sp->n);
        return sp->n;
    }
    const unsigned char *p = sp->p, *end = sp->p + sp->n;
    Py_ssize_t n = 0;
    while (p < end) {
        if (*p != '\\') { buf[n++] = *p++; continue; }
        unsigned char e = p[1];
        if (e == 'u') {
            unsigned v = 0;
            for (int i = 2; i < 6; i++) {
                unsigned char h = p[i];
                v = (v << 4) | (unsigned)(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
            }
            buf[n++] = (unsigned char)v;
            p += 6;
            continue;
        }
        buf[n++] = e == 'b' ? '\b' : e == 'f' ? '\f' : e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : e;
        p += 2;
    }
    return n;
}

/* A plain JSON integer (no leading zero, a Java int) at *pp. */
static int scan_int(const unsigned char **pp, const unsigned char *end, long long *out) {
    const unsigned char *p = *pp;
    int neg = 0;
    if (p < end && *p == '-') { neg = 1; p++; }
    const unsigned char *d = p;
    long long v = 0;
    while (p < end && *p >= '0' && *p <= '9' && p - d < 11) v = v * 10 + (*p++ - '0');
    Py_ssize_t nd = p - d;
    if (nd == 0 || nd > 10 || (nd > 1 && *d == '0') || (p < end && *p >= '0' && *p <= '9')) return 0;
    if (neg) v = -v;
    if (v < INT32_MIN || v > INT32_MAX || (neg && v == 0)) return 0;
    *out = v;
    *pp = p;
    return 1;
}

static int key_is(const Span *k, const char *name) {
    size_t n = strlen(name);
    return !k->esc && (size_t)k->n == n && memcmp(k->p, name, n) == 0;
}

/* The header [p, end) in the plain shape; 0 when anything is otherwise (the pure decoder decides). */
int parse_head(const unsigned char *p, const unsigned char *end, Head *h) {
    memset(h, 0, sizeof(*h));
    int seen = 0; /* bit per top-level key */
    if (p >= end || *p++ != '{') return 0;
    if (p < end && *p == '}') return 0;
    for (;;) {
        Span k;
        if (p >= end || *p++ != '"' || !scan_str(&p, end, &k) || p >= end || *p++ != ':') return 0;
        int bit;
        if (key_is(&k, "code")) { bit = 1; if (!scan_int(&p, end, &h->code)) return 0; h->has_code = 1; }
        else if (key_is(&k, "opaque")) { bit = 2; if (!scan_int(&p, end, &h->opaque)) return 0; h->has_opaque = 1; }
        else if (key_is(&k, "flag")) { bit = 4; if (!scan_int(&p, end, &h->flag)) return 0; h->has_flag = 1; }
        else if (key_is(&k, "version")) { bit = 8; if (!scan_int(&p, end, &h->version)) return 0; h->has_version = 1; }
        else if (key_is(&k, "language") || key_is(&k, "remark") || key_is(&k, "serializeTypeCurrentRPC")) {
            Span v;
            bit = k.p[0] == 'l' ? 16 : k.p[0] == 'r' ? 32 : 64;
            if (p >= end || *p++ != '"' || !scan_str(&p, end, &v)) return 0;
            if (bit == 16) h->lang = v;
        } else if (key_is(&k, "extFields")) {
            bit = 128;
            if (p >= end || *p++ != '{') return 0;
            if (p < end && *p == '}') p++;
            else for (;;) {
                if (h->n_ext == MAX_EXT) return 0;
                Span *ek = &h->ek[h->n_ext], *ev = &h->ev[h->n_ext];
                if (p >= end || *p++ != '"' || !scan_str(&p, end, ek) || ek->esc || p >= end || *p++ != ':') return 0;
                if (p < end && *p == '"') { /* a string, or a plain int as C++ writes some (decoded to its digits) */
                    p++;
                    if (!scan_str(&p, end, ev)) return 0;
                } else {
                    long long v;
                    const unsigned char *d = p;
                    if (!scan_int(&p, end, &v)) return 0;
                    ev->p = d;
                    ev->n = p - d;
                    ev->esc = 0;
                }
                h->n_ext++;
                if (p < end && *p == ',') { p++; continue; }
                if (p < end && *p == '}') { p++; break; }
                return 0;
            }
        } else return 0;
        if (seen & bit) return 0;
        seen |= bit;
        if (p < end && *p == ',') { p++; continue; }
        if (p < end && *p == '}') { /* then only whitespace: C++ ends its header with a newline */
            while (++p < end && (*p == '\n' || *p == ' ' || *p == '\r' || *p == '\t')) {}
            if (p == end) break;
        }
        return 0;
    }
    return h->has_code && h->has_opaque && h->has_flag;
}

/* Plain digits, 1..maxlen of them (send.py's inline parse); -1 otherwise. */
static long long digits(const Span *s, Py_ssize_t maxlen) {
    if (s->p == NULL || s->esc || s->n < 1 || s->n > maxlen) return -1;
    long long v = 0;
    for (Py_ssize_t i = 0; i < s->n; i++) {
        if (s->p[i] < '0' || s->p[i] > '9') return -1;
        v = v * 10 + (s->p[i] - '0');
    }
    return v;
}

/* Per-topic facts, looked up once per call. */
typedef struct {
    PyObject *topic, *prefix, *tq; /* owned topic; borrowed prefix and queue table */
    long long wq, rq;
    int ok;
} Topic;

static PyObject *s_perm, *s_wq, *s_rq, *s_zero;

static int topic_facts(Topic *t, PyObject *topic, PyObject *table, PyObject *prefixes, PyObject *tq,
                       PyObject *forbidden) {
    t->ok = 0;
    t->topic = topic;
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(topic, &n);
    if (s == NULL) return -1;
    if (n == 0 || s[0] == '%' || (n >= 8 && memcmp(s, "rmq_sys_", 8) == 0)) return 0;
    int c = PySet_Contains(forbidden, topic);
    if (c != 0) return c < 0 ? -1 : 0;
    PyObject *tc = PyDict_GetItemWithError(table, topic);
    if (tc == NULL) return PyErr_Occurred() ? -1 : 0;
    t->prefix = PyDict_GetItemWithError(prefixes, topic);
    if (t->prefix == NULL || !PyBytes_CheckExact(t->prefix)) return PyErr_Occurred() ? -1 : 0;
    t->tq = PyDict_GetItemWithError(tq, topic);
    if (t->tq == NULL || !PyDict_CheckExact(t->tq)) return PyErr_Occurred() ? -1 : 0;
    long long perm;
    if (!attr_ll(tc, s_perm, &perm) || !attr_ll(tc, s_wq, &t->wq) || !attr_ll(tc, s_rq, &t->rq)) return 0;
    t->ok = (perm & 2) != 0;
    return 0;
}

static int count_add(PyObject *counts, PyObject *topic, long long n, long long bytes, long long calls) {
    PyObject *row = Py_BuildValue("[OLLL]", topic, n, bytes, calls);
    if (row == NULL) return -1;
    int r = PyList_Append(counts, row);
    Py_DECREF(row);
    return r;
}

PyObject *send_serve(PyObject *self, PyObject *args) {
    PyObject *src, *table, *prefixes, *tq, *forbidden, *mm, *born, *store_host, *handoff, *ts_obj, *cluster, *idp,
        *region, *trace;
    Py_ssize_t pos;
    long long max_frame, wrote, fsize, fstart, limit, store_v6, max_body, version;
    int held;
    if (!PyArg_ParseTuple(args, "OnLO!O!O!OOLLLLSSLO!O!LSSSSLp", &src, &pos, &max_frame, &PyDict_Type, &table,
                          &PyDict_Type, &prefixes, &PyDict_Type, &tq, &forbidden, &mm, &wrote, &fsize, &fstart,
                          &limit, &born, &store_host, &store_v6, &PyLong_Type, &ts_obj, &PyList_Type, &handoff,
                          &max_body, &cluster, &idp, &region, &trace, &version, &held))
        return NULL;
    if (crc_fn == NULL || PyBytes_GET_SIZE(born) != 8 || !PyAnySet_Check(forbidden)) {
        PyErr_SetString(PyExc_ValueError, "send_serve: not configured, or a born host that is not IPv4");
        return NULL;
    }
    long long ts = PyLong_AsLongLong(ts_obj);
    if (ts == -1 && PyErr_Occurred()) return NULL;
    const Py_ssize_t sh_len = PyBytes_GET_SIZE(store_host);
    if (sh_len != 8 && sh_len != 20) {
        PyErr_SetString(PyExc_ValueError, "store_host must be 8 or 20 bytes");
        return NULL;
    }
    Py_buffer in, out_mm;
    if (PyObject_GetBuffer(src, &in, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(mm, &out_mm, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&in);
        return NULL;
    }
    PyObject *counts = PyList_New(0), *result = NULL, *cbuf = PyByteArray_FromStringAndSize(NULL, 0);
    Out out = {NULL, 0, 0};
    unsigned char *scratch = NULL; /* topic, properties as sent, properties as stored */
    Topic cur = {NULL, NULL, NULL, 0, 0, 0};
    long long run_n = 0, run_bytes = 0, run_calls = 0; /* per run of one topic: messages, body bytes, sends */
    Py_ssize_t handed = PyList_GET_SIZE(handoff);
    const Py_ssize_t start = pos;
    int break_all = 0; /* answer parts too long for their buffers: serve nothing */
    if (counts == NULL || cbuf == NULL) goto done;
    if (fsize > out_mm.len || wrote < 0 || wrote > fsize) {
        PyErr_SetString(PyExc_ValueError, "send_serve: the segment's write position is outside its mapping");
        goto done;
    }
    /* the constant parts of every answer (ASCII the broker checked needs no JSON escape) */
    char a_head[128], a_mid[256], a_tail[96];
    if (PyBytes_GET_SIZE(idp) > 64 || PyBytes_GET_SIZE(region) > 96 || PyBytes_GET_SIZE(trace) > 16) break_all = 1;
    const size_t a_head_n = break_all ? 0 : (size_t)snprintf(a_head, sizeof a_head,
        "{\"code\":0,\"extFields\":{\"msgId\":\"%s", PyBytes_AS_STRING(idp));
    const size_t a_mid_n = break_all ? 0 : (size_t)snprintf(a_mid, sizeof a_mid,
        "\",\"MSG_REGION\":\"%s\",\"TRACE_ON\":\"%s\"},\"flag\":1,\"language\":\"JAVA\",\"opaque\":",
        PyBytes_AS_STRING(region), PyBytes_AS_STRING(trace));
    const size_t a_tail_n = (size_t)snprintf(a_tail, sizeof a_tail, ",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":%lld}",
                                             version);
    const Answer ans = {a_head, a_mid, a_tail, PyBytes_AS_STRING(idp), a_head_n, a_mid_n, a_tail_n,
                        (size_t)PyBytes_GET_SIZE(idp)};
    const unsigned char *buf = in.buf;
    const Py_ssize_t n = in.len;
    const long long head_size = 64 + sh_len + 16;
    const Py_ssize_t cl_len = PyBytes_GET_SIZE(cluster);
    scratch = PyMem_Malloc((size_t)(3 * (n > 0 ? n : 1) + cl_len + 2));
    if (scratch == NULL) { PyErr_NoMemory(); goto done; }
    while (!break_all && pos >= 0 && n - pos >= 8) {
        const unsigned char *f = buf + pos;
        long long length = ((long long)f[0] << 24) | (f[1] << 16) | (f[2] << 8) | f[3];
        if (length < 4 || length + 4 > max_frame || length > n - pos - 4) break;
        long long hword = ((long long)f[4] << 24) | (f[5] << 16) | (f[6] << 8) | f[7];
        long long hlen = hword & 0xFFFFFF;
        if ((hword >> 24) != 0 || hlen > length - 4) break; /* JSON headers only */
        const unsigned char *hs = f + 8, *he = hs + hlen, *body = he;
        const Py_ssize_t body_len = (Py_ssize_t)(length - 4 - hlen);
        Head h;
        if (!parse_head(hs, he, &h) || (h.flag != 0 && h.flag != 2) || (h.code != 310 && h.code != 10 && h.code != 320))
            break;
        const int oneway = h.flag == 2; /* RPC_ONEWAY: stored, not answered */
        const int v2 = h.code != 10;
        const char *const *names = v2 ? v2_keys : long_keys;
        Span fld[N_KEYS];
        memset(fld, 0, sizeof(fld));
        int dup = 0;
        for (int i = 0; i < h.n_ext; i++) {
            int k = field_of(&h.ek[i], v2, names);
            if (k < 0) continue;
            if (fld[k].p != NULL) dup = 1;
            fld[k] = h.ev[i];
        }
        if (dup || fld[K_TOPIC].p == NULL || fld[K_TOPIC].n == 0) break;
        long long qid = digits(&fld[K_QID], 9), sys_flag = digits(&fld[K_SYSFLAG], 9);
        long long born_ts = digits(&fld[K_BORN], 18), flag = digits(&fld[K_FLAG], 9);
        if (qid < 0 || sys_flag < 0 || born_ts < 0 || flag < 0 || (sys_flag & 0xC)) break;
        int is_batch = h.code == 320;
        if (fld[K_BATCH].p != NULL && !is_batch) { /* "true", "1", "True", "TRUE": a batch */
            unsigned char bb[5];
            Py_ssize_t bl = fld[K_BATCH].n <= 4 ? unescape(&fld[K_BATCH], bb) : 5;
            is_batch = (bl == 1 && bb[0] == '1') || (bl == 4 && (!memcmp(bb, "true", 4) || !memcmp(bb, "True", 4)
                                                                 || !memcmp(bb, "TRUE", 4)));
        }
        if (body_len > max_body) break;
        /* the topic */
        unsigned char *tb = scratch, *pr = scratch + n, *st = scratch + 2 * n;
        Py_ssize_t tlen = unescape(&fld[K_TOPIC], tb);
        if (cur.topic == NULL || PyUnicode_GET_LENGTH(cur.topic) != tlen
            || memcmp(PyUnicode_DATA(cur.topic), tb, (size_t)tlen) != 0) {
            PyObject *topic = PyUnicode_DecodeASCII((const char *)tb, tlen, NULL);
            if (topic == NULL) goto failed;
            if (cur.topic != NULL && run_n && count_add(counts, cur.topic, run_n, run_bytes, run_calls) < 0) {
                Py_DECREF(topic);
                goto failed;
            }
            run_n = run_bytes = run_calls = 0;
            Py_XDECREF(cur.topic);
            if (topic_facts(&cur, topic, table, prefixes, tq, forbidden) < 0) goto failed;
        }
        if (!cur.ok || (qid >= cur.wq && qid >= cur.rq)) break;
        /* the properties as stored: WAIT=true stripped (its first occurrence, at an item's start; a batch's
         * header keeps it), CLUSTER added */
        Py_ssize_t plen = fld[K_PROPS].p != NULL ? unescape(&fld[K_PROPS], pr) : 0;
        if (find(pr, plen, "CLUSTER\x01") != NULL) break;
        const unsigned char *w = is_batch ? NULL : find(pr, plen, "WAIT\x01true");
        Py_ssize_t slen = plen;
        memcpy(st, pr, (size_t)plen);
        if (w != NULL && (w == pr || w[-1] == 2)) {
            Py_ssize_t i = w - pr, j = i + 9;
            if (j == plen) slen = i ? i - 1 : 0;
            else if (pr[j] == 2) {
                memcpy(st + i, pr + j + 1, (size_t)(plen - j - 1));
                slen = plen - 10;
            }
        }
        if (held && !is_batch && find(st, slen, "WAIT\x01") != NULL) break; /* waits_for_store would read it */
        if (slen > 0 && st[slen - 1] != 2) st[slen++] = 2;
        memcpy(st + slen, PyBytes_AS_STRING(cluster), (size_t)cl_len);
        slen += cl_len;
        if (slen > MAX_PROPS || !props_ok(st, slen) || find(st, slen, "DELAY\x01") || find(st, slen, "TIMER_")
            || find(st, slen, "TRAN_MSG\x01"))
            break;
        /* the queue offset, the room */
        PyObject *qkey = PyLong_FromLongLong(qid);
        if (qkey == NULL) goto failed;
        PyObject *qv = PyDict_GetItemWithError(cur.tq, qkey);
        long long qoff;
        if (qv == NULL || !int_in(qv, 0, INT64_MAX - 1, &qoff)) {
            Py_DECREF(qkey);
            if (PyErr_Occurred()) goto failed;
            break;
        }
        const Py_ssize_t tl = PyBytes_GET_SIZE(cur.prefix);
        const long long at = fstart + wrote;
        const long long sf = (sys_flag & ~0x30LL) | store_v6;
        if (is_batch) {
            Batch bt = {body, st, body_len, slen, qid, qoff, sf, born_ts, ts, at, head_size, max_body, limit,
                        fsize - wrote, cur.topic, cur.prefix, qkey, cur.tq, born, store_host, ts_obj, handoff, cbuf, s_zero,
                        held, oneway, h.opaque};
            long long bsize = 0;
            int r = batch_serve(&bt, (unsigned char *)out_mm.buf + wrote, &ans, &out, &bsize);
            Py_DECREF(qkey);
            if (r < 0) goto failed;
            if (r == 0) break;
            wrote += bsize;
            run_n += PyList_GET_SIZE(handoff) - handed;
            handed = PyList_GET_SIZE(handoff);
            run_bytes += body_len;
            run_calls++;
            pos += 4 + (Py_ssize_t)length;
            continue;
        }
        const long long size = head_size + body_len + tl + 2 + slen;
        if (wrote + size + 8 > fsize || at + size > limit) { Py_DECREF(qkey); break; }
        /* every object first: a failure here leaves nothing half done */
        PyObject *props = PyUnicode_DecodeUTF8((const char *)st, slen, NULL);
        /* the body's CRC by the pure path's function, over a scratch bytearray (a memoryview per message
         * costs more to free than the copy) */
        PyObject *crc_o = PyByteArray_Resize(cbuf, body_len) == 0
            ? (memcpy(PyByteArray_AS_STRING(cbuf), body, (size_t)body_len), PyObject_CallOneArg(crc_fn, cbuf)) : NULL;
        PyObject *next = PyLong_FromLongLong(qoff + 1);
        PyObject *hand = hand_tuple(at, size, cur.topic, qkey, qoff, sf, ts_obj, s_zero, props);
        unsigned long crc = crc_o != NULL ? PyLong_AsUnsignedLongMask(crc_o) : 0;
        Py_XDECREF(crc_o);
        Py_ssize_t room_needed = 8 + (Py_ssize_t)(a_head_n + a_mid_n + a_tail_n) + 16 + fld[K_QID].n + 80;
        if (crc_o == NULL || next == NULL || hand == NULL || PyErr_Occurred() || !out_room(&out, room_needed)
            || PyList_Append(handoff, hand) < 0) {
            Py_XDECREF(next);
            Py_XDECREF(hand);
            Py_DECREF(qkey);
            if (!PyErr_Occurred()) PyErr_NoMemory();
            goto failed; /* the hand-off list and queue table are as they were */
        }
        if (PyDict_SetItem(cur.tq, qkey, next) < 0) {
            Py_ssize_t hn = PyList_GET_SIZE(handoff);
            PyList_SetSlice(handoff, hn - 1, hn, NULL);
            Py_DECREF(next);
            Py_DECREF(hand);
            Py_DECREF(qkey);
            goto failed;
        }
        Py_DECREF(next);
        Py_DECREF(hand);
        Py_DECREF(qkey);
        /* the record */
        unsigned char *r = (unsigned char *)out_mm.buf + wrote;
        wr_i32(r, size);
        wr_i32(r + 4, magic);
        wr_i32(r + 8, (long long)(crc & 0x7FFFFFFFUL));
        wr_i32(r + 12, qid);
        wr_i32(r + 16, flag);
        wr_i64(r + 20, qoff);
        wr_i64(r + 28, at);
        wr_i32(r + 36, sf);
        wr_i64(r + 40, born_ts);
        memcpy(r + 48, PyBytes_AS_STRING(born), 8);
        wr_i64(r + 56, ts);
        memcpy(r + 64, PyBytes_AS_STRING(store_host), (size_t)sh_len);
        r += 64 + sh_len;
        wr_i32(r, 0);      /* reconsume times */
        wr_i64(r + 4, 0); /* prepared transaction offset */
        wr_i32(r + 12, body_len);
        r += 16;
        memcpy(r, body, (size_t)body_len);
        r += body_len;
        memcpy(r, PyBytes_AS_STRING(cur.prefix), (size_t)tl);
        r += tl;
        r[0] = (unsigned char)(slen >> 8);
        r[1] = (unsigned char)slen;
        memcpy(r + 2, st, (size_t)slen);
        wrote += size;
        run_n++;
        run_calls++;
        handed++;
        run_bytes += body_len;
        pos += 4 + (Py_ssize_t)length;
        if (oneway) continue;
        /* the answer: encode_parts of cmd.response(0, None, fields), the per-read parts written once */
        char *o0 = out.p + out.n + 8, *o = o0;
        o = put(o, a_head, a_head_n);
        o = put_hex16(o, (unsigned long long)at);
        o = put(o, "\",\"queueId\":\"", 13);
        o = put(o, (const char *)fld[K_QID].p, (size_t)fld[K_QID].n);
        o = put(o, "\",\"queueOffset\":\"", 17);
        o = put_ll(o, qoff);
        o = put(o, a_mid, a_mid_n);
        o = put_ll(o, h.opaque);
        o = put(o, a_tail, a_tail_n);
        const long long hl = o - o0;
        wr_i32((unsigned char *)out.p + out.n, hl + 4);
        wr_i32((unsigned char *)out.p + out.n + 4, hl);
        out.n += 8 + hl;
    }
    if (0) {
    failed: /* a Python-level failure (no memory): what was served stays served, the rest is the pure path's */
        if (pos == start) goto done;
        PyErr_Clear();
    }
    if (cur.topic != NULL && run_n && count_add(counts, cur.topic, run_n, run_bytes, run_calls) < 0) goto done;
    PyObject *answers = out.n ? PyBytes_FromStringAndSize(out.p, out.n) : Py_NewRef(Py_None);
    if (answers != NULL) result = Py_BuildValue("(nLNO)", pos, wrote, answers, counts);
done:
    Py_XDECREF(cur.topic);
    Py_XDECREF(counts);
    Py_XDECREF(cbuf);
    PyMem_Free(out.p);
    PyMem_Free(scratch);
    PyBuffer_Release(&out_mm);
    PyBuffer_Release(&in);
    return result;
}

int send_init(void) {
    s_perm = PyUnicode_InternFromString("perm");
    s_wq = PyUnicode_InternFromString("writeQueueNums");
    s_rq = PyUnicode_InternFromString("readQueueNums");
    s_zero = PyLong_FromLong(0);
    return s_perm && s_wq && s_rq && s_zero ? 0 : -1;
}

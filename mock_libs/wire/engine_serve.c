/* The server thread of a link: answers the peer's requests on l->srv_fd.
 *
 * A peer in another process reaches our caches in two steps. PIN looks a cache up
 * in our live table, against the table copy the peer took on its first transfer
 * (the watermark: ids below it existed then, semantics.md §9.7; recorded here when the peer took
 * it, never taken from the request), pins it, and answers with its description. A
 * peer the kernel identified (peer_id.h) also gets the tensor addresses of a cache it
 * may read and moves the bytes itself with process_vm_readv/writev; any other peer
 * gets no address and asks us with READ/WRITE to move them over this socket. Every
 * range of a READ or WRITE is checked against a tensor of a cache this connection
 * has pinned and against the cache's rights (docs/security.md §2.3): READ needs a
 * remote-accessible cache or an engine in server-assisted mode, WRITE a
 * remote-accessible cache. UNPIN releases the pin; a closed connection releases
 * every pin it holds, so a peer that dies or gives up never keeps our caches from
 * being freed, and a removal that cannot wait for a
 * pin any longer closes the connection that holds it (engine_cache.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cache_table.h"
#include "core/engine.h"
#include "core/keys.h"
#include "wire/links.h"
#include "core/resolve.h"
#include "wire/transport.h"

enum { SERVE_IDLE_MS = BOUND_SERVE_IDLE_MS };

static mcache *pins_find(pin_list *p, int64_t id, size_t *index)
{
    for (size_t i = p->count; i-- > 0;) {
        if (p->items[i]->w.id == id) {
            *index = i;
            return p->items[i];
        }
    }
    return NULL;
}

/* Room for one more pin; -1 (the request fails and the connection closes) past
 * BOUND_PINS_PER_LINK, which no transfer of a well-behaved peer comes near. */
static int pins_reserve(pin_list *p)
{
    if (p->count >= BOUND_PINS_PER_LINK)
        return -1;
    if (p->count < p->cap)
        return 0;
    mcache **n = mock_grow(p->items, &p->cap, sizeof *n, 8);
    if (n == NULL)
        return -1;
    p->items = n;
    return 0;
}

static int send_status(int fd, uint16_t type, uint32_t status, uint64_t a, uint64_t b)
{
    msg_hdr h;
    msg_init(&h, type);
    h.status = status;
    h.a = a;
    h.b = b;
    return msg_send(fd, &h, NULL, 0, tp_deadline(SERVE_IDLE_MS)) == TP_OK ? 0 : -1;
}

/* Whether the peer of l may read c's bytes (and write them, if `write`). */
static int may_access(const engine *e, const mcache *c, int write)
{
    return c->w.remote_accessible || (!write && e->mode == MODE_SERVER_ASSISTED);
}

/* The tensor addresses a reply may carry: only to a peer the kernel identified, for
 * a cache it may read; zeros otherwise (the socket path names tensors by index). A
 * PIN_ADDR reply (`only` < num_tensors) carries the one tensor that holds the range the
 * peer named itself. */
static void fill_addrs(const engine *e, const mlink *l, const mcache *c, uint32_t only, uint64_t *out)
{
    int all = l->addr_ok && may_access(e, c, 0);
    for (uint32_t t = 0; t < c->w.num_tensors; t++)
        out[t] = all || t == only ? c->addrs[t] : 0;
}

/* Pins c for this connection into a new reply body: the head_len bytes at `head`, then
 * the addresses fill_addrs allows (`only`); *body_len is the body's size. Called with
 * e->mu held; NULL, with e->mu released, when memory or the pin bound runs out (the
 * request fails and the connection closes). */
static char *pin_body_locked(engine *e, const mlink *l, pin_list *pins, mcache *c, const void *head, size_t head_len,
                             uint32_t only, size_t *body_len)
{
    size_t addr_bytes = (size_t)c->w.num_tensors * sizeof(uint64_t);
    char *body = malloc(head_len + addr_bytes);
    if (body == NULL || pins_reserve(pins) != 0) {
        pthread_mutex_unlock(&e->mu);
        free(body);
        return NULL;
    }
    c->pins++;
    pins->items[pins->count++] = c;
    memcpy(body, head, head_len);
    fill_addrs(e, l, c, only, (uint64_t *)(void *)(body + head_len));
    *body_len = head_len + addr_bytes;
    return body;
}

/* Sends h with the reply body pin_body_locked made, then frees the body: 0, or -1 when
 * the send failed (the connection closes). */
static int send_body(int fd, msg_hdr *h, char *body, size_t body_len)
{
    h->payload_len = body_len;
    int rc = msg_send(fd, h, body, body_len, tp_deadline(SERVE_IDLE_MS)) == TP_OK ? 0 : -1;
    free(body);
    return rc;
}

/* Pins c for this connection and answers with its description and the addresses
 * fill_addrs allows (a reply of `type` carrying a and b). Called with e->mu held;
 * releases it. */
static int pin_reply_unlock(engine *e, const mlink *l, int fd, mcache *c, pin_list *pins, uint16_t type, uint64_t a,
                            uint64_t b, uint32_t only)
{
    size_t body_len;
    char *body = pin_body_locked(e, l, pins, c, &c->w, sizeof c->w, only, &body_len);
    if (body == NULL)
        return -1;
    pthread_mutex_unlock(&e->mu);
    msg_hdr r;
    msg_init(&r, type);
    r.a = a;
    r.b = b;
    return send_body(fd, &r, body, body_len);
}

void link_take_marks_locked(engine *e, mlink *l)
{
    if (l->served_id_mark == 0) {
        l->served_id_mark = e->next_id;
        l->served_bind_mark = e->next_bind;
    }
}

static int serve_pin(engine *e, mlink *l, int fd, const msg_hdr *h, pin_list *pins)
{
    int64_t id = (int64_t)h->a;
    pthread_mutex_lock(&e->mu);
    if (e->state != ENGINE_READY) {
        pthread_mutex_unlock(&e->mu);
        return -1;
    }
    /* the request's watermark (h->b) is the peer's claim; ours decides */
    link_take_marks_locked(e, l);
    int64_t watermark = l->served_id_mark;
    uint64_t bind_mark = l->served_bind_mark;
    mcache *c = (id > 0 && id < watermark) ? cache_find_locked(e, id) : NULL;
    if (c == NULL) {
        pthread_mutex_unlock(&e->mu);
        return send_status(fd, MSG_PIN_REPLY, LLM_KV_CACHE_NOT_EXIST, (uint64_t)watermark, bind_mark);
    }
    return pin_reply_unlock(e, l, fd, c, pins, MSG_PIN_REPLY, (uint64_t)watermark, bind_mark, UINT32_MAX);
}

static void serve_unpin(engine *e, const msg_hdr *h, pin_list *pins)
{
    size_t i;
    pthread_mutex_lock(&e->mu);
    mcache *c = pins_find(pins, (int64_t)h->a, &i);
    if (c != NULL) {
        cache_unpin_locked(e, c);
        pins->items[i] = pins->items[--pins->count];
    }
    pthread_mutex_unlock(&e->mu);
}

/* Receives the region list of a READ/WRITE and turns it into iovecs over the
 * pinned cache; -1 (and the connection is closed) if anything is off. */
static int regions_to_iov(engine *e, int fd, const msg_hdr *h, pin_list *pins, uint64_t data_len_extra,
                          struct iovec *iov, wire_region *wr, uint64_t *total)
{
    if (h->count == 0 || h->count > WIRE_MAX_REGIONS)
        return -1;
    uint64_t list_bytes = (uint64_t)h->count * sizeof *wr;
    if (h->payload_len < list_bytes || h->payload_len - list_bytes != data_len_extra)
        return -1;
    if (tp_recv_all(fd, wr, (size_t)list_bytes, tp_deadline(SERVE_IDLE_MS)) != TP_OK)
        return -1;
    size_t idx;
    mcache *c = pins_find(pins, (int64_t)h->a, &idx);
    if (c == NULL || !may_access(e, c, h->type == MSG_WRITE))
        return -1;
    uint64_t sum = 0;
    for (uint32_t i = 0; i < h->count; i++) {
        uint64_t end;
        if (wr[i].tensor >= c->w.num_tensors || __builtin_add_overflow(wr[i].offset, wr[i].len, &end) ||
            end > c->w.tensor_size || __builtin_add_overflow(sum, wr[i].len, &sum))
            return -1;
        iov[i].iov_base = (char *)(uintptr_t)c->addrs[wr[i].tensor] + wr[i].offset;
        iov[i].iov_len = (size_t)wr[i].len;
    }
    *total = sum;
    return 0;
}

static int serve_read(engine *e, int fd, const msg_hdr *h, pin_list *pins, struct iovec *iov, wire_region *wr)
{
    uint64_t total;
    if (regions_to_iov(e, fd, h, pins, 0, iov, wr, &total) != 0) {
        send_status(fd, MSG_READ_REPLY, LLM_PARAM_INVALID, 0, 0);
        return -1;
    }
    msg_hdr r;
    msg_init(&r, MSG_READ_REPLY);
    r.payload_len = total;
    /* iov has room for one more entry in front (link_serve allocates it so) */
    iov[-1].iov_base = &r;
    iov[-1].iov_len = sizeof r;
    return tp_sendv(fd, iov - 1, (size_t)h->count + 1, tp_deadline(SERVE_IDLE_MS), SERVE_IDLE_MS) == TP_OK ? 0 : -1;
}

static int serve_write(engine *e, int fd, const msg_hdr *h, pin_list *pins, struct iovec *iov, wire_region *wr)
{
    uint64_t total = 0;
    /* the data length is what remains of the payload after the list */
    uint64_t list_bytes = (uint64_t)h->count * sizeof *wr;
    uint64_t data = h->payload_len >= list_bytes ? h->payload_len - list_bytes : 0;
    if (regions_to_iov(e, fd, h, pins, data, iov, wr, &total) != 0 || total != data) {
        send_status(fd, MSG_WRITE_REPLY, LLM_PARAM_INVALID, 0, 0);
        return -1;
    }
    if (tp_recvv(fd, iov, h->count, tp_deadline(SERVE_IDLE_MS), SERVE_IDLE_MS) != TP_OK)
        return -1;
    return send_status(fd, MSG_WRITE_REPLY, LLM_SUCCESS, 0, 0);
}

/* MSG_RESOLVE: a source of an extension pull, resolved against our live tables or
 * the requester's table copy, and pinned for this connection (engine_ext_xfer.c). */
static int serve_resolve(engine *e, mlink *l, int fd, const msg_hdr *h, pin_list *pins)
{
    resolve_req q;
    if (h->payload_len != sizeof q || tp_recv_all(fd, &q, sizeof q, tp_deadline(SERVE_IDLE_MS)) != TP_OK)
        return -1;
    char why[sizeof(reply_text)];
    resolve_reply r;
    mcache *c = NULL;
    pthread_mutex_lock(&e->mu);
    if (e->state != ENGINE_READY) {
        pthread_mutex_unlock(&e->mu);
        return -1;
    }
    /* the request's table marks are the peer's claim; ours decide */
    link_take_marks_locked(e, l);
    q.id_mark = l->served_id_mark;
    q.bind_mark = l->served_bind_mark;
    q.direct = q.push ? 1u : (uint32_t)(e->mode == MODE_DIRECT);
    q.v1 = (uint32_t)(e->gen == GEN_V1);
    q.requester = l->peer_cluster;
    lldd_status st = holder_resolve_locked(e, l, &q, &c, &r, why, sizeof why);
    char *body = NULL;
    size_t body_len = 0;
    if (st == LLM_SUCCESS) {
        body = pin_body_locked(e, l, pins, c, &r, sizeof r, UINT32_MAX, &body_len);
        if (body == NULL)
            return -1;
    }
    pthread_mutex_unlock(&e->mu);
    msg_hdr m;
    msg_init(&m, MSG_RESOLVE_REPLY);
    m.status = st;
    m.a = (uint64_t)r.id_mark;
    m.b = r.bind_mark;
    int rc;
    if (st == LLM_SUCCESS) {
        rc = send_body(fd, &m, body, body_len);
    } else {
        reply_text text;
        memset(&text, 0, sizeof text);
        snprintf(text.text, sizeof text.text, "%s", why);
        m.payload_len = sizeof text;
        rc = msg_send(fd, &m, &text, sizeof text, tp_deadline(SERVE_IDLE_MS)) == TP_OK ? 0 : -1;
    }
    return rc;
}

/* MSG_RELEASE: unpins the source of a finished pull and applies the key release of
 * docs/reference/semantics.md §9.5. */
static int serve_release(engine *e, int fd, const msg_hdr *h, pin_list *pins)
{
    release_req q;
    if (h->payload_len < sizeof q || tp_recv_all(fd, &q, sizeof q, tp_deadline(SERVE_IDLE_MS)) != TP_OK)
        return -1;
    /* the tensor list names tensors of the cache this connection pinned: never more
     * than it has, so the peer cannot make us allocate more than that */
    size_t i, times = 0;
    mcache *held = pins_find(pins, q.cache_id, &i);
    uint64_t most = held != NULL ? held->w.num_tensors : 0;
    if (q.count > most || h->payload_len - sizeof q != q.count * sizeof(uint64_t))
        return -1;
    /* A pull releases the one pin its lookup took. A release that may free the cache
     * while this thread holds it pinned once more would wait for this thread itself. */
    for (size_t k = 0; k < pins->count; k++)
        times += pins->items[k] == held;
    if (times > 1)
        return -1;
    uint64_t *tensors = q.count > 0 ? malloc((size_t)q.count * sizeof *tensors) : NULL;
    if (q.count > 0 && (tensors == NULL || tp_recv_all(fd, tensors, (size_t)q.count * sizeof *tensors,
                                                       tp_deadline(SERVE_IDLE_MS)) != TP_OK)) {
        free(tensors);
        return -1;
    }
    mcache *gone = NULL;
    pthread_mutex_lock(&e->mu);
    mcache *c = pins_find(pins, q.cache_id, &i);
    if (c != NULL) {
        cache_unpin_locked(e, c);
        pins->items[i] = pins->items[--pins->count];
        if (e->state == ENGINE_READY)
            gone = key_release_request_locked(e, &q, tensors);
    }
    pthread_mutex_unlock(&e->mu);
    cache_destroy(gone);
    free(tensors);
    return send_status(fd, MSG_RELEASE_REPLY, LLM_SUCCESS, 0, 0);
}

/* MSG_PIN_ADDR: the live remote-accessible cache tensor that holds a raw range
 * (TransferConfig destinations, PR-40), pinned for this connection. */
static int serve_pin_addr(engine *e, mlink *l, int fd, const msg_hdr *h, pin_list *pins)
{
    if (h->payload_len != 0)
        return -1;
    uint32_t tensor = 0;
    pthread_mutex_lock(&e->mu);
    if (e->state != ENGINE_READY) {
        pthread_mutex_unlock(&e->mu);
        return -1;
    }
    mcache *c = holder_find_addr_locked(e, h->a, h->b, &tensor);
    if (c == NULL) {
        pthread_mutex_unlock(&e->mu);
        return send_status(fd, MSG_PIN_ADDR_REPLY, LLM_PARAM_INVALID, 0, 0);
    }
    return pin_reply_unlock(e, l, fd, c, pins, MSG_PIN_ADDR_REPLY, tensor, 0, tensor);
}

void link_serve(mlink *l)
{
    engine *e = l->e;
    int fd = l->srv_fd;
    /* the pins live in the link, where a removal that cannot wait for them finds
     * whose connection to cut (links_cut_pinning_locked) */
    pin_list *pins = &l->pins;
    struct iovec *iov_mem = malloc((WIRE_MAX_REGIONS + 1) * sizeof *iov_mem);
    struct iovec *iov = iov_mem != NULL ? iov_mem + 1 : NULL;
    wire_region *wr = malloc(WIRE_MAX_REGIONS * sizeof *wr);
    while (iov != NULL && wr != NULL) {
        msg_hdr h;
        if (msg_recv_hdr(fd, &h, TP_NO_DEADLINE) != TP_OK)
            break;
        uint32_t delay = atomic_load(&e->serve_delay_ms);
        if (delay > 0 && h.type != MSG_UNPIN) {
            tp_sleep_ms(delay, &l->stopping);
            if (atomic_load(&l->stopping))
                break;
        }
        int rc;
        switch (h.type) {
        case MSG_PIN:
            rc = h.payload_len == 0 ? serve_pin(e, l, fd, &h, pins) : -1;
            break;
        case MSG_UNPIN:
            serve_unpin(e, &h, pins);
            rc = 0;
            break;
        case MSG_READ:
            rc = serve_read(e, fd, &h, pins, iov, wr);
            break;
        case MSG_WRITE:
            rc = serve_write(e, fd, &h, pins, iov, wr);
            break;
        case MSG_RESOLVE:
            rc = serve_resolve(e, l, fd, &h, pins);
            break;
        case MSG_RELEASE:
            rc = serve_release(e, fd, &h, pins);
            break;
        case MSG_PIN_ADDR:
            rc = serve_pin_addr(e, l, fd, &h, pins);
            break;
        default:
            rc = -1;
            break;
        }
        if (rc != 0)
            break;
    }
    /* EOF or a broken request: the peer's side of the link is gone (PR-31). The
     * requests we make on req_fd would fail the same way; make sure they do. */
    atomic_store(&l->peer_gone, 1);
    tp_shutdown(fd);
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < pins->count; i++)
        cache_unpin_locked(e, pins->items[i]);
    free(pins->items);
    memset(pins, 0, sizeof *pins);
    pthread_mutex_unlock(&e->mu);
    free(iov_mem);
    free(wr);
    link_unref(l);
}

void *link_server_main(void *arg)
{
    link_serve(arg);
    return NULL;
}

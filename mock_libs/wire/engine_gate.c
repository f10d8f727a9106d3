/* The listener thread and its gate (docs/security.md §3.4). Every connection to the
 * listener's TCP socket or identity channel waits here, without a thread of its own,
 * until its first message is complete: the listener thread reads it with non-blocking
 * reads as bytes arrive. Only then is it screened (first_msg_screen): a message that names
 * no token of a handshake or link in progress and, with a shared secret, does not prove
 * it, is answered at once and closed; the rest get a connection thread
 * (conn_first_main). A thread that no token vouches for (a HELLO, a DISCONNECT) counts
 * against its source's share of the handshake threads; one beyond that share waits here,
 * complete, until a slot frees.
 *
 * A source is the client's IP address (TCP) or user id (identity channel, SO_PEERCRED).
 * The gate holds at most BOUND_GATE connections, BOUND_GATE_PER_SOURCE of one source; a
 * new connection beyond either evicts the oldest incomplete one of its own source, or of
 * the source holding the most. So silent connections cost a descriptor and a slot of
 * this table each, never a thread, and one source cannot crowd out another's.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/engine.h"
#include "wire/links.h"
#include "wire/peer_id.h"
#include "wire/transport.h"

enum {
    GATE_TICK_MS = 500,          /* the listener's wake-up: reaping, expiry */
    GATE_RETRY_MS = 20,          /* while a complete message waits for a thread slot */
    GATE_ACCEPT_BATCH = 16,      /* accepts per socket and wake-up, so that reads keep up */
    GATE_WAIT_MS = BOUND_FIRST_MSG_MS
};

enum { SOURCE_V4 = 1, SOURCE_V6 = 2, SOURCE_UID = 3 };

typedef struct gate_conn {
    int fd;
    int complete;                /* the first message is read and screened: waits for a thread */
    int verdict;                 /* FIRST_PROVEN or FIRST_UNPROVEN, once complete */
    uint64_t source;
    uint64_t seq;                /* accept order: the oldest goes first */
    int64_t since;
    size_t have;                 /* bytes of the first message read so far */
    short rev;                   /* poll's answer (new connections: POLLIN, to try a read) */
    first_msg m;
} gate_conn;

typedef struct gate {
    gate_conn *c[BOUND_GATE];
    size_t n;
    uint64_t seq;
} gate;

/* The source of a connection (never 0): its peer's IP address or user id. */
static uint64_t source_of(int fd, int is_unix, const peer_cred *cred)
{
    if (is_unix)
        return ((uint64_t)SOURCE_UID << 56) | (cred->known ? (uint64_t)cred->uid : 0xffffffffu);
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    memset(&ss, 0, sizeof ss);
    if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0)
        return (uint64_t)SOURCE_V4 << 56;
    if (ss.ss_family == AF_INET)
        return ((uint64_t)SOURCE_V4 << 56) | ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr);
    /* IPv6: the address folded (FNV-1a) into 56 bits */
    const uint8_t *b = ((struct sockaddr_in6 *)&ss)->sin6_addr.s6_addr;
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < 16; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return ((uint64_t)SOURCE_V6 << 56) | (h & 0xffffffffffffffull);
}

static void gate_drop(gate *g, size_t i)
{
    if (g->c[i]->fd >= 0)
        close(g->c[i]->fd);
    free(g->c[i]);
    g->c[i] = g->c[--g->n];
}

/* The entry to evict for a newcomer of `source`: the oldest incomplete one of that
 * source when it holds its share, else (gate full) of the source holding the most;
 * complete ones only when a source holds nothing else. -1: none needed. */
static long gate_victim(const gate *g, uint64_t source)
{
    size_t mine = 0;
    for (size_t i = 0; i < g->n; i++)
        mine += g->c[i]->source == source;
    uint64_t from = source;
    if (mine < BOUND_GATE_PER_SOURCE) {
        if (g->n < BOUND_GATE)
            return -1;
        size_t most = 0;
        for (size_t i = 0; i < g->n; i++) {
            size_t k = 0;
            for (size_t j = 0; j < g->n; j++)
                k += g->c[j]->source == g->c[i]->source;
            if (k > most) {
                most = k;
                from = g->c[i]->source;
            }
        }
    }
    long best = -1;
    for (size_t i = 0; i < g->n; i++) {
        const gate_conn *c = g->c[i];
        if (c->source != from)
            continue;
        if (best < 0 || c->complete < g->c[best]->complete ||
            (c->complete == g->c[best]->complete && c->seq < g->c[best]->seq))
            best = (long)i;
    }
    return best;
}

/* Takes up to a batch of new connections on listen_fd into the gate. */
static void gate_accept(engine *e, gate *g, int listen_fd, int is_unix)
{
    for (int k = 0; k < GATE_ACCEPT_BATCH && listen_fd >= 0; k++) {
        int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM))
            tp_sleep_ms(50, &e->stopping); /* out of descriptors: the connection waits in the backlog */
        if (fd < 0)
            return;
        gate_conn *c = calloc(1, sizeof *c);
        if (c == NULL || (is_unix && idch_peer_cred(fd, &c->m.cred) != 0)) {
            free(c);
            close(fd);
            continue;
        }
        if (!is_unix)
            tp_tune(fd);
        c->fd = fd;
        c->m.is_unix = is_unix;
        c->source = source_of(fd, is_unix, &c->m.cred);
        c->seq = ++g->seq;
        c->since = tp_now_ms();
        c->rev = POLLIN; /* a client sends its first message right after connecting */
        long victim = gate_victim(g, c->source);
        if (victim >= 0)
            gate_drop(g, (size_t)victim);
        if (g->n >= BOUND_GATE) {
            close(fd);
            free(c);
            continue;
        }
        g->c[g->n++] = c;
    }
}

/* Reads what has arrived of c's first message. 1: complete; 0: not yet; -1: close it
 * (EOF, an error, or a header no first message has). */
static int gate_read(gate_conn *c)
{
    for (;;) {
        size_t want = sizeof c->m.h;
        if (c->have >= sizeof c->m.h) {
            int64_t len = first_msg_body_len(&c->m.h, c->m.is_unix);
            if (len < 0)
                return -1;
            want += (size_t)len;
        }
        if (c->have == want)
            return 1;
        uint8_t *dst = c->have < sizeof c->m.h ? (uint8_t *)&c->m.h + c->have
                                               : (uint8_t *)&c->m.body + (c->have - sizeof c->m.h);
        size_t room = c->have < sizeof c->m.h ? sizeof c->m.h - c->have : want - c->have;
        ssize_t r = recv(c->fd, dst, room, MSG_DONTWAIT);
        if (r > 0) {
            c->have += (size_t)r;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
    }
}

/* Threads that hold a handshake slot no token vouches for: all, and those of source. */
static void gate_count_locked(engine *e, uint64_t source, size_t *all, size_t *mine, size_t *proven)
{
    *all = *mine = *proven = 0;
    for (eng_thread *t = e->conns; t != NULL; t = t->next) {
        if (atomic_load(&t->done))
            continue;
        if (t->source == 0)
            (*proven)++;
        else
            (*all)++;
        *mine += t->source != 0 && t->source == source;
    }
}

/* Starts c's thread if its share allows. 1: started (c's descriptor is the thread's);
 * 0: no slot yet; -1: failed (close it). */
static int gate_start(engine *e, gate_conn *c)
{
    conn_job *job = malloc(sizeof *job);
    eng_thread *t = calloc(1, sizeof *t);
    if (job == NULL || t == NULL) {
        free(job);
        free(t);
        return -1;
    }
    size_t all, mine, proven;
    pthread_mutex_lock(&e->mu);
    gate_count_locked(e, c->source, &all, &mine, &proven);
    int room = c->verdict == FIRST_PROVEN ? proven < BOUND_HANDSHAKES
                                          : all < BOUND_HANDSHAKES && mine < BOUND_HANDSHAKES_PER_SOURCE;
    int started = 0;
    if (room) {
        t->fd = c->fd;
        t->source = c->verdict == FIRST_PROVEN ? 0 : c->source;
        job->self = t;
        job->m = c->m;
        t->next = e->conns;
        e->conns = t;
        started = thread_start(e, t, conn_first_main, job) == 0 ? 1 : -1;
        if (started < 0)
            e->conns = t->next;
    }
    pthread_mutex_unlock(&e->mu);
    if (started != 1) {
        free(job);
        free(t);
    }
    if (started == 1)
        c->fd = -1;
    return started;
}

/* One pass over the gate: reads what arrived (the entries poll named), screens what is
 * complete, starts threads, expires what waited too long. Returns 1 when a complete
 * message still waits for a slot. */
static int gate_pass(engine *e, gate *g)
{
    int waiting = 0;
    int64_t now = tp_now_ms();
    for (size_t i = 0; i < g->n;) {
        gate_conn *c = g->c[i];
        int r = c->complete;
        if (!c->complete && c->rev != 0)
            r = gate_read(c);
        c->rev = 0;
        if (r == 1 && !c->complete) {
            c->complete = 1;
            c->verdict = first_msg_screen(e, c->fd, &c->m);
            if (c->verdict == FIRST_REFUSED)
                r = -1;
        }
        if (r == 1)
            r = gate_start(e, c) == 0 ? 2 : -1; /* started (fd handed over) or failed: both leave */
        if (r == 2 && now - c->since < GATE_WAIT_MS) {
            waiting = 1;
            i++;
        } else if (r == 0 && now - c->since < GATE_WAIT_MS) {
            i++;
        } else {
            gate_drop(g, i); /* the entry at i is now another one: not advanced */
        }
    }
    return waiting;
}

void listener_gate_run(engine *e)
{
    gate *g = calloc(1, sizeof *g);
    struct pollfd *p = calloc(3 + BOUND_GATE, sizeof *p);
    int waiting = 0;
    while (g != NULL && p != NULL) {
        p[0] = (struct pollfd){e->listen_fd, POLLIN, 0};
        p[1] = (struct pollfd){e->wake_pipe[0], POLLIN, 0};
        p[2] = (struct pollfd){e->id_fd, POLLIN, 0};
        for (size_t i = 0; i < g->n; i++)
            p[3 + i] = (struct pollfd){g->c[i]->complete ? -1 : g->c[i]->fd, POLLIN, 0};
        int r = poll(p, 3 + g->n, waiting ? GATE_RETRY_MS : GATE_TICK_MS);
        if (r < 0 && errno != EINTR)
            break;
        if (r > 0 && p[1].revents)
            break;
        engine_reap_conns(e, 0);
        for (size_t i = 0; i < g->n && r > 0; i++)
            g->c[i]->rev = p[3 + i].revents;
        gate_pass(e, g); /* before accepting evicts anything */
        if (r > 0 && (p[2].revents & POLLIN))
            gate_accept(e, g, e->id_fd, 1);
        if (r > 0 && (p[0].revents & POLLIN))
            gate_accept(e, g, e->listen_fd, 0);
        waiting = gate_pass(e, g);
        links_reap(e);
    }
    while (g != NULL && g->n > 0)
        gate_drop(g, g->n - 1);
    free(g);
    free(p);
}

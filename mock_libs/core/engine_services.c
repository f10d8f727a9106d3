/* The services every module of the mock's engine uses, below all of them (docs/design.md,
 * "The mock's modules"): the process-wide registry of engines, the engine's threads,
 * entering and leaving an API call (PR-37) and waiting on the engine's condition. The
 * life cycle that makes and tears down what these serve is engine.c, above every module.
 *
 * The registry lets two engines of one process find each other by serial, so that
 * a transfer between them is a memcpy under a pin instead of a trip through the
 * socket (engine_xfer.c). destroy waits until no peer holds the engine.
 *
 * fork: a child process starts with none of its parent's engines. Their threads do
 * not exist in the child and their sockets are shared with the parent, so the child
 * may neither finalize them (joining absent threads, shutting the parent's sockets
 * down) nor use them. A pthread_atfork handler, in the child, closes the child's copies
 * of their listening sockets (else the parent's port stays bound while the child
 * lives), marks each one inherited (serial 0, UNINIT: every call fails, finalize is a
 * no-op, destroy only frees the child's copy of its memory) and empties the registry.
 * The parent's fork() returns only once that handler has closed them: the child may
 * not be scheduled for a while, and until then its copies keep the parent's port
 * accepting connections after the parent has finalized (see registry_before_fork).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "core/engine.h"
#include "base/mock_internal.h"
#include "wire/pub.h"
#include "wire/transport.h"

/* ---------------------------------------------------------------------------------------------
 * registry
 * ------------------------------------------------------------------------------------------ */

static pthread_mutex_t g_reg_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_reg_cv = PTHREAD_COND_INITIALIZER;
static engine *g_engines;
static uint64_t g_next_serial = 1;
static uint64_t g_live_engines;

/* A listener's descriptors (listening socket, identity channel, wake pipe) are made,
 * recorded in its engine, closed and forgotten under this lock, and fork() holds it
 * from its prepare handler on: a child's handler therefore finds every listening
 * socket that exists at the fork in an engine marked `listening`, never one that a
 * thread has bound and not yet recorded (the child would keep that port bound for its
 * whole life) or one already closed (its number may be a descriptor the child needs).
 * Order: an engine's listen_mu, then g_fork_mu, then g_reg_mu. */
static pthread_mutex_t g_fork_mu = PTHREAD_MUTEX_INITIALIZER;

/* The pipe of the fork in progress (both ends -1 when no engine listens): only the
 * child's handler and the parent's hold its write end, so the parent's read sees EOF
 * once the child has closed its copies of the listening sockets. Written under
 * g_fork_mu, which a fork holds from prepare to the parent's and the child's handler. */
static int g_fork_gate[2] = {-1, -1};

/* In the parent, before fork(): the registry and the listeners stay as they are until
 * the fork is done. */
static void registry_before_fork(void)
{
    pthread_mutex_lock(&g_fork_mu);
    pthread_mutex_lock(&g_reg_mu);
    g_fork_gate[0] = g_fork_gate[1] = -1;
    for (engine *e = g_engines; e != NULL; e = e->reg_next) {
        if (e->listening) {
            /* without the pipe the parent does not wait: what it did before there was one */
            if (pipe2(g_fork_gate, O_CLOEXEC) != 0)
                g_fork_gate[0] = g_fork_gate[1] = -1;
            break;
        }
    }
}

/* In the parent, after fork() (also after a failed one: then no child holds the write
 * end and the read returns at once). Waits for the child's handler, so that a finalize
 * right after the fork really frees the port. Nothing but that handler runs in the
 * child before it closes its end; a child that dies first closes it too. */
static void registry_after_fork_parent(void)
{
    int gate[2] = {g_fork_gate[0], g_fork_gate[1]};
    g_fork_gate[0] = g_fork_gate[1] = -1;
    pthread_mutex_unlock(&g_reg_mu);
    pthread_mutex_unlock(&g_fork_mu);
    if (gate[0] < 0)
        return;
    close(gate[1]);
    char c;
    ssize_t r;
    do {
        r = read(gate[0], &c, 1);
    } while (r < 0 && errno == EINTR);
    close(gate[0]);
}

/* In the child of fork(), which runs single-threaded: locks a parent thread held at
 * the fork stay held forever in the child, so every lock an inherited engine or the
 * registry has is re-made instead of taken. */
static void registry_after_fork_child(void)
{
    g_fork_mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    g_reg_mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    g_reg_cv = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    for (engine *e = g_engines; e != NULL; e = e->reg_next) {
        if (e->listening) {
            close(e->listen_fd);                   /* close, never shutdown: the parent's socket */
            close(e->wake_pipe[0]);
            close(e->wake_pipe[1]);
            if (e->id_fd >= 0)
                close(e->id_fd);
        }
        e->listen_fd = -1;
        e->id_fd = -1;
        e->wake_pipe[0] = e->wake_pipe[1] = -1;
        e->listening = 0;
        e->serial = 0;
        e->state = ENGINE_UNINIT;
        e->active = 0;
        e->reg_refs = 0;
        e->conns = NULL;
        pub_destroy(e);                             /* the parent's table: never written here */
        pthread_mutex_init(&e->life_mu, NULL);
        pthread_mutex_init(&e->v1_link_mu, NULL);
        pthread_mutex_init(&e->listen_mu, NULL);
        pthread_mutex_init(&e->mu, NULL);
        pthread_cond_init(&e->cv, NULL);
    }
    g_engines = NULL;
    g_live_engines = 0;
    /* the last thing: the parent's fork() returns when this end is closed */
    if (g_fork_gate[0] >= 0) {
        close(g_fork_gate[1]);
        close(g_fork_gate[0]);
    }
    g_fork_gate[0] = g_fork_gate[1] = -1;
}

__attribute__((constructor)) static void registry_register_fork_handler(void)
{
    pthread_atfork(registry_before_fork, registry_after_fork_parent, registry_after_fork_child);
}

engine *registry_acquire(uint64_t serial)
{
    engine *found = NULL;
    pthread_mutex_lock(&g_reg_mu);
    for (engine *e = g_engines; e != NULL; e = e->reg_next) {
        if (e->serial == serial) {
            e->reg_refs++;
            found = e;
            break;
        }
    }
    pthread_mutex_unlock(&g_reg_mu);
    return found;
}

void registry_release(engine *e)
{
    pthread_mutex_lock(&g_reg_mu);
    if (--e->reg_refs == 0)
        pthread_cond_broadcast(&g_reg_cv);
    pthread_mutex_unlock(&g_reg_mu);
}

/* ---------------------------------------------------------------------------------------------
 * threads
 * ------------------------------------------------------------------------------------------ */

int thread_start(engine *e, eng_thread *t, void *(*fn)(void *), void *arg)
{
    t->e = e;
    return pthread_create(&t->tid, NULL, fn, arg);
}

void thread_join_free(eng_thread *t)
{
    if (t == NULL)
        return;
    pthread_join(t->tid, NULL);
    tp_close(&t->fd);
    free(t);
}

/* Joins the finished connection threads (all of them when `all`; the caller has
 * made them finish by shutting their sockets down). */
void engine_reap_conns(engine *e, int all)
{
    eng_thread *done = NULL;
    pthread_mutex_lock(&e->mu);
    eng_thread **pp = &e->conns;
    while (*pp != NULL) {
        eng_thread *t = *pp;
        if (all || atomic_load(&t->done)) {
            *pp = t->next;
            t->next = done;
            done = t;
        } else {
            pp = &t->next;
        }
    }
    pthread_mutex_unlock(&e->mu);
    while (done != NULL) {
        eng_thread *t = done;
        done = t->next;
        thread_join_free(t);
    }
}

/* ---------------------------------------------------------------------------------------------
 * calls (PR-37)
 * ------------------------------------------------------------------------------------------ */

lldd_status engine_enter(engine *e, const char *fn)
{
    if (e->serial == 0) {
        mock_set_error("%s: this engine was created by the parent process before a fork; a child process "
                       "creates its own engines", fn);
        return LLM_FAILED;
    }
    pthread_mutex_lock(&e->mu);
    if (e->state != ENGINE_READY) {
        int finalizing = e->state == ENGINE_FINALIZING;
        pthread_mutex_unlock(&e->mu);
        mock_set_error("%s: LlmDataDist is not initialized%s", fn,
                       finalizing ? " (Finalize is running)" : "");
        return LLM_FAILED;
    }
    e->active++;
    pthread_mutex_unlock(&e->mu);
    return LLM_SUCCESS;
}

lldd_status engine_args_check(const char *fn, const char *missing)
{
    uint32_t code;
    if (mock_fault_take(fn, &code))
        return code;
    return missing == NULL ? LLM_SUCCESS : mock_refuse("%s: %s must not be NULL", fn, missing);
}

lldd_status engine_args_enter(engine *e, const char *fn, const char *missing)
{
    lldd_status st = engine_args_check(fn, missing);
    return st != LLM_SUCCESS ? st : engine_enter(e, fn);
}

lldd_status engine_call_enter(engine *e, const char *fn)
{
    return engine_args_enter(e, fn, e == NULL ? "engine" : NULL);
}

void engine_leave(engine *e)
{
    pthread_mutex_lock(&e->mu);
    if (--e->active == 0)
        pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

/* ---------------------------------------------------------------------------------------------
 * waits
 * ------------------------------------------------------------------------------------------ */

int engine_cv_wait_ms(engine *e, int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return pthread_cond_timedwait(&e->cv, &e->mu, &ts);
}

void registry_add(engine *e)
{
    pthread_mutex_lock(&g_reg_mu);
    e->serial = g_next_serial++;
    e->reg_next = g_engines;
    g_engines = e;
    g_live_engines++;
    pthread_mutex_unlock(&g_reg_mu);
}

void registry_remove(engine *e)
{
    pthread_mutex_lock(&g_reg_mu);
    for (engine **pp = &g_engines; *pp != NULL; pp = &(*pp)->reg_next) {
        if (*pp == e) {
            *pp = e->reg_next;
            g_live_engines--;                      /* an engine inherited through fork is not listed */
            break;
        }
    }
    while (e->reg_refs > 0)
        pthread_cond_wait(&g_reg_cv, &g_reg_mu);
    pthread_mutex_unlock(&g_reg_mu);
}

void registry_fork_lock(void)
{
    pthread_mutex_lock(&g_fork_mu);
}

void registry_fork_unlock(void)
{
    pthread_mutex_unlock(&g_fork_mu);
}

uint64_t engine_live_engines(void)
{
    pthread_mutex_lock(&g_reg_mu);
    uint64_t n = g_live_engines;
    pthread_mutex_unlock(&g_reg_mu);
    return n;
}

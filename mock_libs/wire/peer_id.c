/* Peer identity over an abstract Unix socket, pidfds, secret proofs (peer_id.h). */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "wire/peer_id.h"
#include "wire/transport.h"

int rand_bytes(void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t got = getrandom(p, n, 0);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

void secret_proof(const uint8_t *secret, size_t secret_len, const char *label, const uint8_t a[NONCE_LEN],
                  const uint8_t b[NONCE_LEN], uint64_t token, uint8_t out[PROOF_LEN])
{
    uint8_t tok[8];
    for (int i = 0; i < 8; i++)
        tok[i] = (uint8_t)(token >> (8 * i));
    const void *parts[4] = {label, a, b, tok};
    const size_t lens[4] = {strlen(label), NONCE_LEN, NONCE_LEN, sizeof tok};
    hmac_sha256(secret, secret_len, parts, lens, 4, out);
}

void token_proof(uint64_t token, const char *label, const uint8_t nonce[NONCE_LEN], uint8_t out[PROOF_LEN])
{
    uint8_t key[8];
    for (int i = 0; i < 8; i++)
        key[i] = (uint8_t)(token >> (8 * i));
    const void *parts[2] = {label, nonce};
    const size_t lens[2] = {strlen(label), NONCE_LEN};
    hmac_sha256(key, sizeof key, parts, lens, 2, out);
}

/* ---- endpoints ---- */

static void endpoint_from(const struct sockaddr_storage *ss, tp_endpoint *ep)
{
    memset(ep, 0, sizeof *ep);
    ep->family = (uint16_t)ss->ss_family;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;
        ep->port = ntohs(s4->sin_port);
        memcpy(ep->addr, &s4->sin_addr, 4);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
        ep->port = ntohs(s6->sin6_port);
        memcpy(ep->addr, &s6->sin6_addr, 16);
    }
}

static int endpoints_of(int fd, tp_endpoint *local, tp_endpoint *remote)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    memset(&ss, 0, sizeof ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return -1;
    endpoint_from(&ss, local);
    len = sizeof ss;
    memset(&ss, 0, sizeof ss);
    if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0)
        return -1;
    endpoint_from(&ss, remote);
    return 0;
}

/* ---- the channel ---- */

static socklen_t abstract_addr(const char *name, struct sockaddr_un *sa)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    size_t n = strnlen(name, ID_NAME_LEN - 1);
    memcpy(sa->sun_path + 1, name, n); /* sun_path[0] = 0: the abstract namespace */
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* 1 if `name` is a channel name: not empty, and ended within ID_NAME_LEN bytes. */
static int name_valid(const char *name)
{
    return name != NULL && name[0] != '\0' && memchr(name, '\0', ID_NAME_LEN) != NULL;
}

/* A blocking Unix stream socket to dial the channel `name` at *sa (*len long); -1 for
 * a name that is not a channel name or when no socket could be made. */
static int dial_socket(const char *name, struct sockaddr_un *sa, socklen_t *len)
{
    if (!name_valid(name))
        return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0)
        *len = abstract_addr(name, sa);
    return fd;
}

int idch_listen(char name[ID_NAME_LEN], int *fd_out)
{
    *fd_out = -1;
    uint8_t r[16];
    if (rand_bytes(r, sizeof r) != 0)
        return EIO;
    int n = snprintf(name, ID_NAME_LEN, "lldd-id-");
    for (size_t i = 0; i < sizeof r && n + 2 < ID_NAME_LEN; i++)
        n += snprintf(name + n, (size_t)(ID_NAME_LEN - n), "%02x", r[i]);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return errno;
    struct sockaddr_un sa;
    socklen_t len = abstract_addr(name, &sa);
    return tp_bind_listen(fd, (struct sockaddr *)&sa, len, 64, fd_out);
}

int idch_is_unix(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    return getsockname(fd, (struct sockaddr *)&ss, &len) == 0 && ss.ss_family == AF_UNIX;
}

static int cred_of(int fd, peer_cred *out)
{
    struct ucred uc;
    socklen_t len = sizeof uc;
    memset(out, 0, sizeof *out);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) != 0 || len != sizeof uc || uc.pid <= 0)
        return -1;
    out->known = 1;
    out->pid = uc.pid;
    out->uid = uc.uid;
    return 0;
}

int idch_prove(const char *name, uint64_t token, int c1_fd, int64_t deadline, peer_cred *out)
{
    memset(out, 0, sizeof *out);
    id_request req;
    memset(&req, 0, sizeof req);
    req.token = token;
    if (endpoints_of(c1_fd, &req.c1_local, &req.c1_remote) != 0)
        return -1;
    struct sockaddr_un sa;
    socklen_t len = 0;
    int fd = dial_socket(name, &sa, &len);
    if (fd < 0)
        return -1;
    /* connecting to a Unix socket does not wait for the listener to accept */
    int ok = connect(fd, (struct sockaddr *)&sa, len) == 0 && fcntl(fd, F_SETFL, O_NONBLOCK) == 0;
    peer_cred cred;
    if (ok)
        ok = cred_of(fd, &cred) == 0;
    msg_hdr h;
    if (ok) {
        msg_init(&h, MSG_IDENTIFY);
        h.payload_len = sizeof req;
        ok = msg_send(fd, &h, &req, sizeof req, deadline) == TP_OK && msg_recv_hdr(fd, &h, deadline) == TP_OK &&
             h.type == MSG_IDENTIFY_REPLY && h.status == 0 && h.payload_len == 0;
    }
    close(fd);
    if (!ok)
        return -1;
    *out = cred;
    return 0;
}

int idch_peer_cred(int fd, peer_cred *out)
{
    return cred_of(fd, out);
}

int idch_map_challenge(int fd, int64_t deadline)
{
    /* on the heap, like any of our data: the client must be able to read that */
    uint8_t *nonce = malloc(MAP_NONCE_LEN);
    uint8_t proof[MAP_NONCE_LEN];
    if (nonce == NULL || rand_bytes(nonce, MAP_NONCE_LEN) != 0) {
        free(nonce);
        return 0;
    }
    msg_hdr h;
    msg_init(&h, MSG_MAP_CHALLENGE);
    h.a = (uint64_t)(uintptr_t)nonce;
    h.b = MAP_NONCE_LEN;
    int ok = msg_send(fd, &h, NULL, 0, deadline) == TP_OK && msg_recv_hdr(fd, &h, deadline) == TP_OK &&
             h.type == MSG_MAP_PROOF && h.payload_len == MAP_NONCE_LEN &&
             tp_recv_all(fd, proof, sizeof proof, deadline) == TP_OK && bytes_equal_ct(proof, nonce, MAP_NONCE_LEN);
    free(nonce);
    return ok;
}

/* Sends h (and body) with n descriptors attached. A reply of at most a few KiB into a
 * fresh Unix socket's buffer: one call sends it whole, or the client sees a short reply
 * and gives up. */
static void send_with_fds(int fd, msg_hdr *h, const void *body, size_t len, const int *fds, size_t n)
{
    struct iovec iov[2] = {{h, sizeof *h}, {(void *)(uintptr_t)body, len}};
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(MAP_BATCH * sizeof(int))];
    } ctl;
    struct msghdr m;
    memset(&m, 0, sizeof m);
    memset(&ctl, 0, sizeof ctl);
    m.msg_iov = iov;
    m.msg_iovlen = len > 0 ? 2 : 1;
    if (n > MAP_BATCH)
        n = 0;
    if (n > 0) {
        m.msg_control = ctl.buf;
        m.msg_controllen = CMSG_SPACE(n * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(n * sizeof(int));
        memcpy(CMSG_DATA(c), fds, n * sizeof(int));
    }
    ssize_t sent;
    do {
        sent = sendmsg(fd, &m, MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
}

void idch_answer_map(int fd, uint32_t status, const map_desc *descs, const int *fds, size_t n, uint64_t next)
{
    msg_hdr h;
    msg_init(&h, MSG_MAP_REPLY);
    h.status = status;
    h.a = status == 0 ? next : 0;
    if (status != 0 || n > MAP_BATCH)
        n = 0;
    h.count = (uint32_t)n;
    h.payload_len = n * sizeof *descs;
    send_with_fds(fd, &h, descs, n * sizeof *descs, fds, n);
}

void idch_answer_table(int fd, uint32_t status, int64_t id_mark, uint64_t bind_mark, const int fds[2])
{
    msg_hdr h;
    msg_init(&h, MSG_TABLE_REPLY);
    h.status = status;
    h.a = status == 0 ? (uint64_t)id_mark : 0;
    h.b = status == 0 ? bind_mark : 0;
    h.count = status == 0 ? 2 : 0;
    send_with_fds(fd, &h, NULL, 0, fds, h.count);
}

static void close_fds(int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        close(fds[i]);
}

/* Client: answers the listener's challenge with the nonce read out of its memory. */
static int map_prove(int fd, pid_t pid, int64_t deadline)
{
    msg_hdr h;
    uint8_t nonce[MAP_NONCE_LEN];
    if (msg_recv_hdr(fd, &h, deadline) != TP_OK || h.type != MSG_MAP_CHALLENGE || h.b != MAP_NONCE_LEN ||
        h.payload_len != 0)
        return -1;
    struct iovec local = {nonce, sizeof nonce}, remote = {(void *)(uintptr_t)h.a, sizeof nonce};
    if (process_vm_readv(pid, &local, 1, &remote, 1, 0) != (ssize_t)sizeof nonce)
        return -1;
    msg_init(&h, MSG_MAP_PROOF);
    h.payload_len = sizeof nonce;
    return msg_send(fd, &h, nonce, sizeof nonce, deadline) == TP_OK ? 0 : -1;
}

/* Client: connects to `name`, checks that process `pid` serves it, sends `type` with
 * req and answers the challenge. The connected fd, or -1. */
static int idch_ask(const char *name, pid_t pid, uint16_t type, const map_request *req, int64_t deadline)
{
    struct sockaddr_un sa;
    socklen_t len = 0;
    int fd = dial_socket(name, &sa, &len);
    if (fd < 0)
        return -1;
    msg_hdr h;
    msg_init(&h, type);
    h.payload_len = sizeof *req;
    peer_cred server;
    /* only the process the link holds may hand us memory to write into: after the
     * peer's exit its channel's name is free for anyone to bind */
    if (connect(fd, (struct sockaddr *)&sa, len) != 0 || fcntl(fd, F_SETFL, O_NONBLOCK) != 0 ||
        cred_of(fd, &server) != 0 || server.pid != pid || msg_send(fd, &h, req, sizeof *req, deadline) != TP_OK ||
        map_prove(fd, pid, deadline) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Client: receives a reply header with up to `max` descriptors attached. *nfds of them
 * were received (the caller's to close); 0 if the header arrived whole and untruncated. */
static int recv_with_fds(int fd, int64_t deadline, msg_hdr *h, int *fds, size_t max, size_t *nfds)
{
    *nfds = 0;
    struct pollfd p = {fd, POLLIN, 0};
    int64_t left = deadline - tp_now_ms();
    if (left <= 0 || poll(&p, 1, (int)(left > 60000 ? 60000 : left)) != 1)
        return -1;
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(MAP_BATCH * sizeof(int))];
    } ctl;
    struct iovec iov = {h, sizeof *h};
    struct msghdr m;
    memset(&m, 0, sizeof m);
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl.buf;
    m.msg_controllen = sizeof ctl.buf;
    ssize_t got;
    do {
        got = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
    } while (got < 0 && errno == EINTR);
    for (struct cmsghdr *c = got > 0 ? CMSG_FIRSTHDR(&m) : NULL; c != NULL; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int f;
            memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
            if (*nfds < max)
                fds[(*nfds)++] = f;
            else
                close(f);
        }
    }
    return got == (ssize_t)sizeof *h && !(m.msg_flags & MSG_CTRUNC) && h->magic == PROTO_MAGIC &&
                   h->version == PROTO_VERSION ? 0 : -1;
}

int idch_map(const char *name, pid_t pid, const map_request *req, int64_t deadline, map_desc *descs, int *fds,
             size_t *n, uint64_t *next)
{
    *n = 0;
    *next = req->from;
    int fd = idch_ask(name, pid, MSG_MAP, req, deadline);
    if (fd < 0)
        return -1;
    msg_hdr h;
    size_t nfds = 0;
    int ok = recv_with_fds(fd, deadline, &h, fds, MAP_BATCH, &nfds) == 0 && h.type == MSG_MAP_REPLY &&
             h.status == 0 && h.count <= MAP_BATCH && h.count == nfds &&
             h.payload_len == (uint64_t)h.count * sizeof *descs && h.a >= req->from;
    if (ok && h.count > 0)
        ok = tp_recv_all(fd, descs, h.count * sizeof *descs, deadline) == TP_OK;
    close(fd);
    if (!ok) {
        close_fds(fds, nfds);
        return -1;
    }
    *n = nfds;
    *next = h.a;
    return 0;
}

int idch_table(const char *name, pid_t pid, uint64_t token, int64_t deadline, int64_t *id_mark,
               uint64_t *bind_mark, int fds[2])
{
    map_request req = {token, 0};
    int fd = idch_ask(name, pid, MSG_TABLE, &req, deadline);
    if (fd < 0)
        return -1;
    msg_hdr h;
    size_t nfds = 0;
    int ok = recv_with_fds(fd, deadline, &h, fds, 2, &nfds) == 0 && h.type == MSG_TABLE_REPLY && h.status == 0 &&
             h.count == 2 && nfds == 2 && h.payload_len == 0 && h.a >= 1 && h.a <= INT64_MAX && h.b >= 1;
    close(fd);
    if (!ok) {
        close_fds(fds, nfds);
        return -1;
    }
    *id_mark = (int64_t)h.a;
    *bind_mark = h.b;
    return 0;
}

int idch_endpoints_match(int c1_fd, const id_request *req)
{
    tp_endpoint local, remote;
    if (endpoints_of(c1_fd, &local, &remote) != 0)
        return 0;
    /* our end is the client's remote end and the other way round */
    return memcmp(&local, &req->c1_remote, sizeof local) == 0 && memcmp(&remote, &req->c1_local, sizeof remote) == 0;
}

void idch_answer(int fd, uint32_t status)
{
    msg_hdr h;
    msg_init(&h, MSG_IDENTIFY_REPLY);
    h.status = status;
    msg_send(fd, &h, NULL, 0, tp_deadline(1000));
}

/* ---- pidfd ---- */

int pidfd_hold(pid_t pid)
{
#ifdef SYS_pidfd_open
    long fd = syscall(SYS_pidfd_open, pid, 0);
    if (fd >= 0) {
        fcntl((int)fd, F_SETFD, FD_CLOEXEC);
        return (int)fd;
    }
#else
    (void)pid;
#endif
    return -1;
}

int pidfd_alive(int pidfd)
{
    if (pidfd < 0)
        return 0;
    struct pollfd p = {pidfd, POLLIN, 0};
    int r;
    do {
        r = poll(&p, 1, 0);
    } while (r < 0 && errno == EINTR);
    /* a pidfd becomes readable when its process exits */
    return r == 0;
}

/* Loopback TCP helpers of the mock engine (see transport.h).
 *
 * All sockets are non-blocking and every wait goes through poll() with a
 * deadline, so that no call of the engine can hang on a silent peer: a shutdown()
 * of the socket from another thread wakes any waiter at once. */
#include "wire/transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef IOV_MAX
#define IOV_MAX 1024
#endif

int64_t tp_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t tp_deadline(int64_t timeout_ms)
{
    if (timeout_ms < 0)
        return TP_NO_DEADLINE;
    int64_t d;
    if (__builtin_add_overflow(tp_now_ms(), timeout_ms, &d))
        return TP_NO_DEADLINE;
    return d;
}

static int poll_timeout(int64_t deadline)
{
    if (deadline == TP_NO_DEADLINE)
        return -1;
    int64_t left = deadline - tp_now_ms();
    if (left <= 0)
        return 0;
    return left > INT_MAX ? INT_MAX : (int)left;
}

/* Waits until fd is ready for `events`. TP_OK, TP_TIMEOUT or TP_CLOSED. */
static int wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        struct pollfd p = {fd, events, 0};
        int t = poll_timeout(deadline);
        int r = poll(&p, 1, t);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return TP_CLOSED;
        }
        if (r == 0) {
            if (t == 0)
                return TP_TIMEOUT;
            continue;
        }
        if (p.revents & POLLNVAL)
            return TP_CLOSED;
        /* POLLERR/POLLHUP: let the following send/recv report the exact state */
        return TP_OK;
    }
}

int tp_is_ipv4(const char *ip)
{
    struct in_addr a;
    return ip != NULL && inet_pton(AF_INET, ip, &a) == 1;
}

int tp_parse_addr(const char *text, tp_addr *out, char *why, size_t why_len)
{
    memset(out, 0, sizeof *out);
    if (text == NULL || text[0] == '\0') {
        snprintf(why, why_len, "is empty; expected \"ip:port\" or \"[ipv6]:port\"");
        return -1;
    }
    const char *host = text, *host_end, *port;
    if (text[0] == '[') {
        host = text + 1;
        host_end = strchr(host, ']');
        if (host_end == NULL || host_end[1] != ':') {
            snprintf(why, why_len, "\"%s\" is not \"[ipv6]:port\"", text);
            return -1;
        }
        port = host_end + 2;
        out->family = AF_INET6;
    } else {
        host_end = strrchr(text, ':');
        if (host_end == NULL) {
            snprintf(why, why_len, "\"%s\" has no \":port\"", text);
            return -1;
        }
        port = host_end + 1;
        out->family = AF_INET;
    }
    size_t host_len = (size_t)(host_end - host);
    if (host_len == 0 || host_len >= sizeof out->ip) {
        snprintf(why, why_len, "\"%s\" has no valid IP address", text);
        return -1;
    }
    memcpy(out->ip, host, host_len);
    out->ip[host_len] = '\0';
    unsigned char buf[sizeof(struct in6_addr)];
    if (inet_pton(out->family, out->ip, buf) != 1) {
        snprintf(why, why_len, "\"%s\" is not a valid IP%s address", out->ip, out->family == AF_INET6 ? "v6" : "v4");
        return -1;
    }
    if (port[0] == '\0') {
        snprintf(why, why_len, "\"%s\" has an empty port", text);
        return -1;
    }
    uint64_t value = 0;
    for (const char *c = port; *c; c++) {
        if (*c < '0' || *c > '9') {
            snprintf(why, why_len, "port \"%s\" is not a decimal number", port);
            return -1;
        }
        value = value * 10 + (uint64_t)(*c - '0');
        if (value > 0xFFFFFFFFull) {
            snprintf(why, why_len, "port \"%s\" is out of range [0, 65535] (PR-27)", port);
            return -1;
        }
    }
    if (value > 65535) {
        snprintf(why, why_len, "port %llu is out of range [0, 65535] (PR-27)", (unsigned long long)value);
        return -1;
    }
    out->port = (uint16_t)value;
    return 0;
}

int tp_bind_listen(int fd, const struct sockaddr *sa, socklen_t len, int backlog, int *fd_out)
{
    if (bind(fd, sa, len) != 0 || listen(fd, backlog) != 0) {
        int err = errno;
        close(fd);
        return err;
    }
    *fd_out = fd;
    return 0;
}

int tp_listen(const tp_addr *addr, int *fd_out)
{
    *fd_out = -1;
    struct sockaddr_storage ss;
    socklen_t len;
    memset(&ss, 0, sizeof ss);
    if (addr->family == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(addr->port);
        if (inet_pton(AF_INET6, addr->ip, &s6->sin6_addr) != 1)
            return EINVAL;
        len = sizeof *s6;
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        s4->sin_port = htons(addr->port);
        if (inet_pton(AF_INET, addr->ip, &s4->sin_addr) != 1)
            return EINVAL;
        len = sizeof *s4;
    }
    int fd = socket(addr->family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return errno;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    /* exactly the address given: "[::]" is every IPv6 address, not IPv4's as well */
    if (addr->family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) != 0) {
        int err = errno;
        close(fd);
        return err;
    }
    return tp_bind_listen(fd, (struct sockaddr *)&ss, len, 128, fd_out);
}

void tp_tune(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int tp_connect(const char *ip, uint16_t port, int64_t deadline, int *fd_out, int *err_out)
{
    *fd_out = -1;
    *err_out = 0;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    if (ip == NULL || inet_pton(AF_INET, ip, &sa.sin_addr) != 1) {
        *err_out = EINVAL;
        return TP_ERROR;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        *err_out = errno;
        return TP_ERROR;
    }
    tp_tune(fd);
    int r = connect(fd, (struct sockaddr *)&sa, sizeof sa);
    if (r != 0 && errno != EINPROGRESS && errno != EINTR) {
        int err = errno;
        close(fd);
        *err_out = err;
        return err == ECONNREFUSED ? TP_REFUSED : TP_ERROR;
    }
    if (r != 0) {
        int w = wait_fd(fd, POLLOUT, deadline);
        if (w != TP_OK) {
            close(fd);
            *err_out = w == TP_TIMEOUT ? ETIMEDOUT : ECONNABORTED;
            return w == TP_TIMEOUT ? TP_TIMEOUT : TP_ERROR;
        }
        int err = 0;
        socklen_t el = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
            err = errno;
        if (err != 0) {
            close(fd);
            *err_out = err;
            if (err == ECONNREFUSED)
                return TP_REFUSED;
            return err == ETIMEDOUT ? TP_TIMEOUT : TP_ERROR;
        }
    }
    *fd_out = fd;
    return TP_OK;
}

int tp_recv_all(int fd, void *buf, size_t len, int64_t deadline)
{
    struct iovec iov = {buf, len};
    return tp_recvv(fd, &iov, 1, deadline, 0);
}

/* Drops n bytes from the front of the iovec array. */
static void consume(struct iovec **iov, size_t *count, size_t n)
{
    while (*count > 0 && n >= (*iov)->iov_len) {
        n -= (*iov)->iov_len;
        (*iov)++;
        (*count)--;
    }
    if (*count > 0 && n > 0) {
        (*iov)->iov_base = (char *)(*iov)->iov_base + n;
        (*iov)->iov_len -= n;
    }
}

static void skip_empty(struct iovec **iov, size_t *count)
{
    while (*count > 0 && (*iov)->iov_len == 0) {
        (*iov)++;
        (*count)--;
    }
}

/* The one loop of tp_sendv and tp_recvv: moves every byte of the iovecs, waiting on the
 * socket (POLLOUT when sending, POLLIN when receiving) until `deadline`, which every
 * progress pushes back by idle_ms when idle_ms > 0. TP_CLOSED for a peer that closed
 * (a receive of 0 bytes) or any other socket error. */
static int tp_movev(int fd, struct iovec *iov, size_t count, int64_t deadline, int64_t idle_ms, int sending)
{
    skip_empty(&iov, &count);
    while (count > 0) {
        struct msghdr m;
        memset(&m, 0, sizeof m);
        m.msg_iov = iov;
        m.msg_iovlen = count > IOV_MAX ? IOV_MAX : count;
        ssize_t n = sending ? sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT) : recvmsg(fd, &m, MSG_DONTWAIT);
        if (n > 0) {
            consume(&iov, &count, (size_t)n);
            skip_empty(&iov, &count);
            if (idle_ms > 0)
                deadline = tp_deadline(idle_ms);
            continue;
        }
        if (n == 0)
            return TP_CLOSED;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int w = wait_fd(fd, sending ? POLLOUT : POLLIN, deadline);
            if (w != TP_OK)
                return w;
            continue;
        }
        return TP_CLOSED;
    }
    return TP_OK;
}

int tp_sendv(int fd, struct iovec *iov, size_t count, int64_t deadline, int64_t idle_ms)
{
    return tp_movev(fd, iov, count, deadline, idle_ms, 1);
}

int tp_recvv(int fd, struct iovec *iov, size_t count, int64_t deadline, int64_t idle_ms)
{
    return tp_movev(fd, iov, count, deadline, idle_ms, 0);
}

int tp_peer_closed(int fd)
{
    if (fd < 0)
        return 1;
    struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
    int r;
    do {
        r = poll(&p, 1, 0);
    } while (r < 0 && errno == EINTR);
    if (r <= 0)
        return 0;
    if (p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL))
        return 1;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

void tp_shutdown(int fd)
{
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
}

void tp_close(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

void tp_sleep_ms(uint32_t ms, const atomic_int *stop)
{
    int64_t end = tp_now_ms() + ms;
    for (;;) {
        if (stop != NULL && atomic_load(stop))
            return;
        int64_t left = end - tp_now_ms();
        if (left <= 0)
            return;
        if (left > 5)
            left = 5;
        struct timespec ts = {0, (long)left * 1000000L};
        nanosleep(&ts, NULL);
    }
}

void msg_init(msg_hdr *h, uint16_t type)
{
    memset(h, 0, sizeof *h);
    h->magic = PROTO_MAGIC;
    h->version = (uint16_t)PROTO_VERSION;
    h->type = type;
}

int msg_send(int fd, const msg_hdr *h, const void *body, size_t body_len, int64_t deadline)
{
    struct iovec iov[2] = {{(void *)h, sizeof *h}, {(void *)body, body_len}};
    return tp_sendv(fd, iov, body_len > 0 ? 2 : 1, deadline, 0);
}

void tp_sanitize_text(char *text, size_t len)
{
    if (len == 0)
        return;
    text[len - 1] = '\0';
    for (size_t i = 0; i < len && text[i] != '\0'; i++)
        if ((unsigned char)text[i] < 0x20 || (unsigned char)text[i] > 0x7e)
            text[i] = '?';
}

int msg_recv_hdr(int fd, msg_hdr *h, int64_t deadline)
{
    int r = tp_recv_all(fd, h, sizeof *h, deadline);
    if (r != TP_OK)
        return r;
    if (h->magic != PROTO_MAGIC || h->version != PROTO_VERSION)
        return TP_CLOSED;
    return TP_OK;
}

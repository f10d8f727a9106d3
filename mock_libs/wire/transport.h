/* Loopback TCP transport of the mock engine: deadlines, sockets, framed messages. The
 * messages themselves (types, header, bodies of the handshake, limits) are the wire
 * protocol, wire/protocol.h.
 *
 * All sockets are non-blocking; every wait is a poll() with a deadline.
 */
#ifndef LLDD_MOCK_TRANSPORT_H
#define LLDD_MOCK_TRANSPORT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "wire/protocol.h"

/* Results of the I/O helpers. */
enum {
    TP_OK = 0,
    TP_TIMEOUT = 1,   /* the deadline passed */
    TP_CLOSED = 2,    /* EOF, reset, or any other broken-connection error */
    TP_REFUSED = 3,   /* connect: nobody listens */
    TP_ERROR = 4      /* local failure (socket creation, bad address) */
};

/* Milliseconds of CLOCK_MONOTONIC. A deadline of TP_NO_DEADLINE never passes. */
#define TP_NO_DEADLINE INT64_MAX
int64_t tp_now_ms(void);
int64_t tp_deadline(int64_t timeout_ms);

/* A listen address: "a.b.c.d:port" or "[v6]:port". */
typedef struct tp_addr {
    int family;           /* AF_INET or AF_INET6 */
    char ip[64];          /* the literal, without brackets */
    uint16_t port;
} tp_addr;

/* Parses a listen address with the project's port rule (0 .. 65535, PR-27; port 0: the
 * default backend binds an ephemeral port, a HIXL engine listens nowhere, E-5).
 * Returns 0, or -1 with the reason in why. */
int tp_parse_addr(const char *text, tp_addr *out, char *why, size_t why_len);
/* 1 if ip is a dotted IPv4 literal. */
int tp_is_ipv4(const char *ip);

/* A listening socket bound to addr (SO_REUSEADDR, close-on-exec). Returns 0, or an
 * errno value. */
int tp_listen(const tp_addr *addr, int *fd_out);
/* Connects to an IPv4 address before the deadline. Returns a TP_ result; *err_out
 * receives the errno of a failure. */
int tp_connect(const char *ip, uint16_t port, int64_t deadline, int *fd_out, int *err_out);

/* TCP_NODELAY: requests and answers are small and must not wait for delayed ACKs. */
void tp_tune(int fd);

/* Binds fd to sa and listens with `backlog`: 0 with *fd_out = fd, else the errno of
 * the step that failed, fd closed. */
int tp_bind_listen(int fd, const struct sockaddr *sa, socklen_t len, int backlog, int *fd_out);
/* All-or-error I/O before the deadline. The iovec variants consume the array.
 * With idle_ms > 0 the deadline is pushed to now + idle_ms after every bit of
 * progress (bulk data may take longer than one timeout; a stalled peer may not). */
int tp_recv_all(int fd, void *buf, size_t len, int64_t deadline);
int tp_sendv(int fd, struct iovec *iov, size_t count, int64_t deadline, int64_t idle_ms);
int tp_recvv(int fd, struct iovec *iov, size_t count, int64_t deadline, int64_t idle_ms);

/* 1 if the peer has closed or reset the connection (checked without blocking). */
int tp_peer_closed(int fd);
/* shutdown(SHUT_RDWR), which wakes every thread blocked on fd. */
void tp_shutdown(int fd);
void tp_close(int *fd);
/* Sleeps ms milliseconds, returning early once *stop becomes non-zero. */
void tp_sleep_ms(uint32_t ms, const atomic_int *stop);

/* ---- framing (the messages: wire/protocol.h) ---- */
/* A peer's text before it enters our messages: printable ASCII only, NUL-terminated
 * within len. */
void tp_sanitize_text(char *text, size_t len);

void msg_init(msg_hdr *h, uint16_t type);
/* Sends a header and an optional body in one go. */
int msg_send(int fd, const msg_hdr *h, const void *body, size_t body_len, int64_t deadline);
/* Receives a header and checks magic and version (TP_CLOSED if they are wrong). */
int msg_recv_hdr(int fd, msg_hdr *h, int64_t deadline);

#endif /* LLDD_MOCK_TRANSPORT_H */

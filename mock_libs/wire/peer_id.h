/* Who is on the other end of a link: kernel-vouched peer identity, the optional shared
 * secret, and the randomness of the handshake (docs/security.md §2).
 *
 * Identity. A TCP connection says nothing the kernel vouches for about the process
 * behind it. Each listening engine therefore also listens on an abstract Unix-domain
 * socket with a random name, which it tells a client in its handshake reply. A client
 * on the same host (and in the same network namespace) connects there and sends
 * IDENTIFY {link token, the two endpoints of its TCP connection c1}. The kernel gives
 * each side the other's process id and user (SO_PEERCRED); the server accepts the
 * claim only if a handshake with that token is pending and its c1 has exactly those
 * endpoints (so a relaying listener cannot lend a client to a third engine). Only a
 * link whose peer was identified this way may take the same-process or process_vm
 * path; every other link moves bytes over its sockets. The identified process is held
 * with a pidfd: a transfer checks it before and after moving bytes, so a dead peer
 * fails the transfer and a reused pid is never written to.
 *
 * Shared secret (off unless configured). Both sides prove knowledge of it with
 * HMAC-SHA-256 over fresh nonces and the link token: the client in HELLO and REVERSE,
 * the listener in its HELLO reply.
 */
#ifndef LLDD_MOCK_PEER_ID_H
#define LLDD_MOCK_PEER_ID_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "wire/sha256.h"

/* ---- peer_id.c ---- */
enum { NONCE_LEN = 16, PROOF_LEN = 32, ID_NAME_LEN = 40, SECRET_MAX = 256 };

/* Fills buf from the kernel's random source; 0, or -1 if none answered. */
int rand_bytes(void *buf, size_t n);

/* The proof of the shared secret for one step of one handshake. */
void secret_proof(const uint8_t *secret, size_t secret_len, const char *label, const uint8_t a[NONCE_LEN],
                  const uint8_t b[NONCE_LEN], uint64_t token, uint8_t out[PROOF_LEN]);

/* The proof that a DISCONNECT's (label "lldd-disconnect") or a REVERSE's ("lldd-replace")
 * sender holds a link's token, for a nonce of the listener: HMAC-SHA-256 keyed by the
 * token's 8 little-endian bytes over the label and the nonce. It proves the token
 * without showing it to the listener asked (which may not be that link's peer). */
void token_proof(uint64_t token, const char *label, const uint8_t nonce[NONCE_LEN], uint8_t out[PROOF_LEN]);

/* A TCP endpoint as both ends see it (getsockname on one side, getpeername on the other). */
typedef struct tp_endpoint {
    uint16_t family;
    uint16_t port;
    uint8_t addr[16];
} tp_endpoint;

/* The body of IDENTIFY on the identity channel. */
typedef struct id_request {
    uint64_t token;
    tp_endpoint c1_local;        /* the client's end of c1 */
    tp_endpoint c1_remote;       /* the listener's end of c1, as the client sees it */
} id_request;

/* What the kernel says about the process at the other end of a Unix socket. */
typedef struct peer_cred {
    int known;                   /* 0: not identified: sockets only */
    pid_t pid;
    uid_t uid;
} peer_cred;

/* Listens on a fresh abstract Unix socket; name receives its printable name (without
 * the leading NUL). 0, or an errno value. */
int idch_listen(char name[ID_NAME_LEN], int *fd_out);
/* 1 if fd is a Unix-domain socket (a connection of the identity channel). */
int idch_is_unix(int fd);
/* Client: proves the link `token` on c1_fd to the listener's identity channel `name`
 * and learns the listener's process. 0 and *out filled, or -1 (out->known = 0). */
int idch_prove(const char *name, uint64_t token, int c1_fd, int64_t deadline, peer_cred *out);
/* Server: 1 if c1_fd's endpoints are the ones the client named. */
int idch_endpoints_match(int c1_fd, const id_request *req);
/* Server: answers an IDENTIFY (status 0: accepted). */
void idch_answer(int fd, uint32_t status);

/* ---- shared library memory (docs/security.md §2.7) ----
 * A client that holds a link to an identified peer of the same user asks the peer's
 * identity channel with MAP {the link's token, from}. The peer challenges it to read a
 * fresh nonce out of the peer's memory with process_vm_readv (so a mapping goes only to
 * a process the kernel already lets read and write the peer's memory) and, given the
 * nonce back, answers with the descriptors of its arena chunks from, from + 1, ... (at
 * most MAP_BATCH) and their memfds, sealed against shrinking, attached as SCM_RIGHTS. */
enum { MAP_BATCH = 64, MAP_NONCE_LEN = 32 };

typedef struct map_request {
    uint64_t token;
    uint64_t from;
} map_request;

typedef struct map_desc {
    uint64_t base;               /* where the chunk lies in the peer */
    uint64_t size;
} map_desc;

/* Server: the first message of an identity-channel connection and the connecting
 * process's credentials. *type is MSG_IDENTIFY (ident filled), MSG_MAP or MSG_TABLE
 * (map filled). 0 or -1. */
int idch_read_msg(int fd, int64_t deadline, peer_cred *cred, uint16_t *type, id_request *ident, map_request *map);
/* Server: 1 if the client reads back, from this process's memory, a fresh nonce. */
int idch_map_challenge(int fd, int64_t deadline);
/* Server: answers MAP with n chunk descriptors and their fds and the chunk number to ask
 * from next (status 0), or a refusal. */
void idch_answer_map(int fd, uint32_t status, const map_desc *descs, const int *fds, size_t n, uint64_t next);
/* Client: asks the identity channel `name`, which must be served by process `pid`, for
 * chunks. On 0, *n descriptors and fds (the caller's to close) were received and *next
 * is the chunk number to ask from next time. -1 on a refusal or a broken exchange
 * (nothing to close). */
int idch_map(const char *name, pid_t pid, const map_request *req, int64_t deadline, map_desc *descs, int *fds,
             size_t *n, uint64_t *next);

/* ---- the published cache table (engine_pub.c) ----
 * TABLE {the link's token}: the same checks and challenge as MAP; the answer carries
 * the table copy's marks (semantics.md §9.7) and two memfds: the owner's table and a page of pin
 * counters for this link. */
/* Server: answers TABLE (status 0: with the marks and both fds). */
void idch_answer_table(int fd, uint32_t status, int64_t id_mark, uint64_t bind_mark, const int fds[2]);
/* Client: asks `name`, served by process `pid`, for the table of the link `token`. On 0,
 * the marks and two fds (the caller's to close); -1 on a refusal or a broken exchange. */
int idch_table(const char *name, pid_t pid, uint64_t token, int64_t deadline, int64_t *id_mark,
               uint64_t *bind_mark, int fds[2]);

/* A pidfd for pid, or -1 where the kernel has none (then no process_vm path). */
int pidfd_hold(pid_t pid);
/* 1 while the process of pidfd runs, 0 once it has exited (or pidfd is -1). */
int pidfd_alive(int pidfd);

#endif /* LLDD_MOCK_PEER_ID_H */

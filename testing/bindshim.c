/* An LD_PRELOAD shim giving an unmodified client process its own loopback source address (issue #31).
 *
 * The nemesis cuts links by (source, destination) address pairs, so every client needs an address of
 * its own; librocketmq (C++) and the Java 4.9.8 remoting client cannot bind one. This connect() binds
 * an unbound TCP socket to $RMQ_BIND_ADDR (port 0: the kernel picks one) before connecting, when the
 * destination is in 127.0.0.0/8 (an AF_INET address, or an AF_INET6 v4-mapped one as a JVM's dual-stack
 * sockets use). Everything else (other destinations, UDP, sockets already bound, no variable) passes
 * through to the real connect() unchanged. Built by rmq.testing.bindshim. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);

static int is_loopback4(const struct in_addr *a) { return (ntohl(a->s_addr) >> 24) == 127; }

/* Whether fd is a stream socket nobody bound yet (its local port is still 0). */
static int unbound_stream(int fd) {
    int type = 0;
    socklen_t tl = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_STREAM) return 0;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    memset(&ss, 0, sizeof ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) return 0;
    if (ss.ss_family == AF_INET) return ((struct sockaddr_in *)&ss)->sin_port == 0;
    if (ss.ss_family == AF_INET6) return ((struct sockaddr_in6 *)&ss)->sin6_port == 0;
    return 0;
}

static void bind_source(int fd, const struct sockaddr *dst, socklen_t len) {
    const char *want = getenv("RMQ_BIND_ADDR");
    struct in_addr src;
    if (want == NULL || inet_pton(AF_INET, want, &src) != 1 || dst == NULL) return;
    if (dst->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        if (!is_loopback4(&((const struct sockaddr_in *)dst)->sin_addr) || !unbound_stream(fd)) return;
        struct sockaddr_in me;
        memset(&me, 0, sizeof me);
        me.sin_family = AF_INET;
        me.sin_addr = src;
        (void)bind(fd, (struct sockaddr *)&me, sizeof me); /* on failure: connect from the default address */
    } else if (dst->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        const struct in6_addr *d6 = &((const struct sockaddr_in6 *)dst)->sin6_addr;
        struct in_addr d4;
        if (!IN6_IS_ADDR_V4MAPPED(d6)) return;
        memcpy(&d4, &d6->s6_addr[12], 4);
        if (!is_loopback4(&d4) || !unbound_stream(fd)) return;
        struct sockaddr_in6 me;
        memset(&me, 0, sizeof me);
        me.sin6_family = AF_INET6;
        me.sin6_addr.s6_addr[10] = 0xff;
        me.sin6_addr.s6_addr[11] = 0xff;
        memcpy(&me.sin6_addr.s6_addr[12], &src, 4);
        (void)bind(fd, (struct sockaddr *)&me, sizeof me);
    }
}

int connect(int fd, const struct sockaddr *addr, socklen_t len) {
    static connect_fn real = NULL;
    if (real == NULL) real = (connect_fn)dlsym(RTLD_NEXT, "connect");
    bind_source(fd, addr, len);
    return real(fd, addr, len);
}

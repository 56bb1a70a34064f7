/* dthrottle_socket.c: the wire to the daemon: a connection to its Unix
 * socket, a line sent (with a descriptor for the attach), a three-byte
 * reply received (with the files for the attach). See
 * dthrottle_internal.h and docs/protocol.md; the attach is in
 * docs/shared-table.md, "Getting the table".
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "dthrottle_internal.h"

#define DT_IO_TIMEOUT_MS 1000 /* each send and receive on the socket */

/* dt_connect opens a stream connection to the Unix socket at path ("@name"
 * for an abstract one), its sends and receives bounded by DT_IO_TIMEOUT_MS.
 * It returns the descriptor, or -1 and errno. */
int dt_connect(const char *path)
{
    struct sockaddr_un sa;
    struct timeval tv = {DT_IO_TIMEOUT_MS / 1000, (DT_IO_TIMEOUT_MS % 1000) * 1000};
    size_t n = strlen(path);
    socklen_t len;
    int fd, err;

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    if (n == 0 || n >= sizeof(sa.sun_path)) {
        errno = n == 0 ? EINVAL : ENAMETOOLONG;
        return -1;
    }
    memcpy(sa.sun_path, path, n);
    if (path[0] == '@') {
        sa.sun_path[0] = '\0';
        len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    } else {
        len = (socklen_t)sizeof(sa);
    }
    if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0) {
        return -1;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
        connect(fd, (struct sockaddr *)&sa, len) != 0) {
        err = errno == EINPROGRESS ? ETIMEDOUT : errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

/* io_errno is the errno of a failed send or receive: a timeout says so. */
static int io_errno(void)
{
    return errno == EAGAIN || errno == EWOULDBLOCK ? ETIMEDOUT : errno;
}

/* dt_send_all sends the iovcnt buffers of iov in full; 0, or -1 and errno.
 * It advances iov. */
int dt_send_all(int fd, struct iovec *iov, int iovcnt, int rights)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct msghdr m;

    memset(&m, 0, sizeof(m));
    m.msg_iov = iov;
    m.msg_iovlen = (size_t)iovcnt;
    if (rights >= 0) {
        struct cmsghdr *c;

        memset(&ctl, 0, sizeof(ctl));
        m.msg_control = ctl.buf;
        m.msg_controllen = sizeof(ctl.buf);
        c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &rights, sizeof(int));
    }
    while (m.msg_iovlen > 0) {
        ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);

        if (w < 0) {
            if (errno == EINTR) {
                continue;
            }
            errno = io_errno();
            return -1;
        }
        /* The descriptor went with the first bytes. */
        m.msg_control = NULL;
        m.msg_controllen = 0;
        while (w > 0 && m.msg_iovlen > 0) {
            if ((size_t)w >= m.msg_iov->iov_len) {
                w -= (ssize_t)m.msg_iov->iov_len;
                m.msg_iov++;
                m.msg_iovlen--;
            } else {
                m.msg_iov->iov_base = (char *)m.msg_iov->iov_base + w;
                m.msg_iov->iov_len -= (size_t)w;
                w = 0;
            }
        }
        while (m.msg_iovlen > 0 && m.msg_iov->iov_len == 0) {
            m.msg_iov++;
            m.msg_iovlen--;
        }
    }
    return 0;
}

/* dt_recv_reply reads the three bytes of a reply into reply. With fds, it
 * also takes the descriptors that come with them: at most two, in order,
 * into fds and *nfds; more, or a truncated set, is EPROTO. It returns 0,
 * or -1 and errno, having closed every descriptor it took. */
int dt_recv_reply(int fd, char reply[3], int *fds, int *nfds)
{
    size_t got = 0;
    int err = 0;

    if (nfds != NULL) {
        *nfds = 0;
    }
    while (got < 3) {
        union {
            struct cmsghdr h;
            char buf[CMSG_SPACE(sizeof(int) * 4)];
        } ctl;
        struct iovec iov = {reply + got, 3 - got};
        struct msghdr m;
        struct cmsghdr *c;
        ssize_t r;

        memset(&m, 0, sizeof(m));
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        m.msg_control = ctl.buf;
        m.msg_controllen = sizeof(ctl.buf);
        if ((r = recvmsg(fd, &m, MSG_CMSG_CLOEXEC)) < 0) {
            if (errno == EINTR) {
                continue;
            }
            err = io_errno();
            break;
        }
        for (c = CMSG_FIRSTHDR(&m); c != NULL; c = CMSG_NXTHDR(&m, c)) {
            size_t k;

            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
                continue;
            }
            for (k = 0; k < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); k++) {
                int got_fd;

                memcpy(&got_fd, CMSG_DATA(c) + k * sizeof(int), sizeof(int));
                if (nfds != NULL && *nfds < 2) {
                    fds[(*nfds)++] = got_fd;
                } else {
                    close(got_fd);
                    err = EPROTO;
                }
            }
        }
        if ((m.msg_flags & MSG_CTRUNC) != 0) {
            err = EPROTO;
        }
        if (r == 0) {
            err = err != 0 ? err : ECONNRESET;
            break;
        }
        got += (size_t)r;
    }
    if (err == 0 && !(reply[2] == '\n' && ((reply[0] == 'O' && reply[1] == 'K') ||
                                           (reply[0] == 'N' && reply[1] == 'O')))) {
        err = EPROTO;
    }
    if (err != 0) {
        while (nfds != NULL && *nfds > 0) {
            close(fds[--*nfds]);
        }
        errno = err;
        return -1;
    }
    return 0;
}

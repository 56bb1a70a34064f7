/* dthrottle_target.c: parsing and resolving dthrottled's address, when
 * the configuration is read. See dthrottle_client.h. */
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "apr_network_io.h"
#include "apr_strings.h"
#include "httpd.h"

#include "dthrottle_client.h"

const char *dt_target_make(apr_pool_t *p, const char *addr, dt_target **out)
{
    dt_target *t = apr_pcalloc(p, sizeof(*t));
    const char *path = addr;

    t->name = apr_pstrdup(p, addr);
    if (strncmp(path, "unix:", 5) == 0) {
        path += 5;
    }
    if (path[0] == '/' || path[0] == '@') {
        struct sockaddr_un *un = (struct sockaddr_un *)&t->addr;
        apr_size_t n = strlen(path);

        if (n < 2 || n >= sizeof(un->sun_path)) {
            return apr_psprintf(p, "socket path %s: length must be 2..%d bytes",
                                path, (int)sizeof(un->sun_path) - 1);
        }
        un->sun_family = AF_UNIX;
        memcpy(un->sun_path, path, n);
        if (path[0] == '@') {
            /* An abstract socket: a leading NUL, and no trailing one. */
            un->sun_path[0] = '\0';
            t->addrlen = offsetof(struct sockaddr_un, sun_path) + n;
        }
        else {
            t->addrlen = sizeof(*un);
        }
        t->family = AF_UNIX;
        t->path = apr_pstrdup(p, path);
    }
    else {
        char *host, *scope;
        apr_port_t port;
        apr_sockaddr_t *sa;
        apr_status_t rv = apr_parse_addr_port(&host, &scope, &port, addr, p);

        if (rv != APR_SUCCESS || host == NULL || port == 0 || scope != NULL) {
            return apr_psprintf(p, "%s is neither a socket path (/path, "
                                "unix:/path, @abstract) nor host:port", addr);
        }
        rv = apr_sockaddr_info_get(&sa, host, APR_UNSPEC, port, 0, p);
        if (rv != APR_SUCCESS) {
            char buf[120];
            return apr_psprintf(p, "resolving %s: %s", host,
                                apr_strerror(rv, buf, sizeof(buf)));
        }
        if ((apr_size_t)sa->salen > sizeof(t->addr)) {
            return apr_psprintf(p, "resolving %s: address too long", host);
        }
        memcpy(&t->addr, &sa->sa, sa->salen);
        t->addrlen = sa->salen;
        t->family = sa->family;
    }
    *out = t;
    return NULL;
}

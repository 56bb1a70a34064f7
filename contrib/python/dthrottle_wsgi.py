"""WSGI middleware that asks dthrottled whether to serve each request.

Standard library only. Copy this file next to your application.

    from dthrottle_wsgi import Client, Governor, Rule, forwarded_for

    application = Governor(
        application,
        Client("/run/dthrottle/dthrottle.sock"),
        rules=[
            Rule(r"^/login$", "login:", methods=["POST"]),
            Rule(r"^/api/", "api:"),
        ],
        key=forwarded_for("X-Forwarded-For"),  # behind a proxy; default: REMOTE_ADDR
        delay=0.005,
    )

Each request is matched against the rules in order; the first rule whose
path regex matches PATH_INFO (with re.search) and whose methods include the
request's method gives the tag prefix, and the tag sent to the daemon is
that prefix followed by the client's key. A [[policy]] in dthrottle.toml
with that prefix carries the limits. A request no rule matches is tagged
with default_prefix (the empty string: the daemon's default [limit]), or not
throttled at all when default_prefix is None.

A refused request gets "429 Too Many Requests" with a Retry-After header,
after an optional pause (delay seconds) that slows down greedy clients.

The client fails safe, as docs/protocol.md advises: every query has a
short timeout (10 ms by default); when the daemon does not answer, the
request is served (fail_open=True, the default) or refused, and the client
backs off (10 ms doubling up to 5 s) during which it answers at once
without asking.
"""

import os
import re
import socket
import threading
import time

__all__ = ["Client", "Governor", "Rule", "remote_addr", "forwarded_for", "default_address"]

MAX_TAG_BYTES = 64 << 10  # the daemon closes a connection on a longer line


def default_address():
    """The socket dthrottled listens on without a config file, as it picks it."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime) and os.path.isdir(runtime):
        return os.path.join(runtime, "dthrottle.sock")
    return os.path.join("/tmp", "dthrottle-%d.sock" % os.getuid())


class Client:
    """Asks one dthrottled about tags. Safe for use by many threads.

    address is a Unix socket path (str) or a (host, port) tuple for TCP;
    None means default_address(). Each thread keeps its own connection, and
    a query is one request and one reply on it. A timed-out connection is
    closed, never reused, so a late reply can never answer a later query.
    """

    def __init__(self, address=None, timeout=0.01, fail_open=True,
                 min_backoff=0.01, max_backoff=5.0, clock=time.monotonic):
        self.address = default_address() if address is None else address
        self.timeout = timeout
        self.fail_open = fail_open
        self.min_backoff = min_backoff
        self.max_backoff = max_backoff
        self._clock = clock
        self._local = threading.local()
        self._lock = threading.Lock()
        self._failures = 0  # consecutive failed queries
        self._retry_at = None  # when the backoff ends; None when healthy
        self._gen = 0  # +1 per counted failure: queries failing together count once
        self.stats = dict.fromkeys(
            ("ok", "no", "timeouts", "errors", "backed_off", "invalid",
             "fail_open", "fail_closed", "connects"), 0)

    def allow(self, tag):
        """True to serve a request with this tag, False to refuse it.

        When the daemon cannot answer, the fail mode answers. A tag with a
        newline, or longer than 64 KiB, is refused whatever the fail mode.
        """
        data = tag.encode("utf-8", "surrogateescape") if isinstance(tag, str) else bytes(tag)
        if not data:
            return True
        if b"\n" in data or len(data) > MAX_TAG_BYTES:
            self._count("invalid")
            return False
        with self._lock:
            gen = self._gen
            if self._retry_at is not None:
                now = self._clock()
                if now < self._retry_at:
                    self.stats["backed_off"] += 1
                    return self._failed_locked()
                # This query probes; the others wait for its outcome.
                self._retry_at = now + self.timeout
        try:
            reply = self._ask(data + b"\n")
        except socket.timeout:
            self._drop()
            return self._fail("timeouts", gen)
        except (OSError, ValueError):
            self._drop()
            return self._fail("errors", gen)
        with self._lock:
            if gen == self._gen:
                self._failures = 0
                self._retry_at = None
            self.stats["ok" if reply else "no"] += 1
        return reply

    def close(self):
        """Closes the calling thread's connection."""
        self._drop()

    def _ask(self, line):
        deadline = time.monotonic() + self.timeout
        sock = getattr(self._local, "sock", None)
        if sock is None:
            self._count("connects")
            family = socket.AF_UNIX if isinstance(self.address, str) else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            self._local.sock = sock
            sock.settimeout(self.timeout)
            sock.connect(self.address)
        sock.settimeout(_remaining(deadline))
        sock.sendall(line)
        reply = b""
        while len(reply) < 3:
            sock.settimeout(_remaining(deadline))
            chunk = sock.recv(3 - len(reply))
            if not chunk:
                raise ConnectionError("dthrottle: the daemon closed the connection")
            reply += chunk
        if reply == b"OK\n":
            return True
        if reply == b"NO\n":
            return False
        raise ValueError("dthrottle: bad reply %r" % reply)

    def _drop(self):
        sock = getattr(self._local, "sock", None)
        self._local.sock = None
        if sock is not None:
            sock.close()

    def _fail(self, what, gen):
        with self._lock:
            self.stats[what] += 1
            if gen == self._gen:
                self._gen += 1
                self._failures += 1
                pause = min(self.max_backoff, self.min_backoff * 2 ** min(self._failures - 1, 30))
                self._retry_at = self._clock() + pause
            return self._failed_locked()

    def _failed_locked(self):
        self.stats["fail_open" if self.fail_open else "fail_closed"] += 1
        return self.fail_open

    def _count(self, what):
        with self._lock:
            self.stats[what] += 1


def _remaining(deadline):
    left = deadline - time.monotonic()
    if left <= 0:
        raise socket.timeout("dthrottle: query timed out")
    return left


def remote_addr(environ):
    """The key of a client connecting directly: its address."""
    return environ.get("REMOTE_ADDR", "")


def forwarded_for(header="X-Forwarded-For"):
    """A key function for clients behind a proxy: the first address in
    header, or REMOTE_ADDR without it. Use it only when the proxy sets the
    header and clients cannot reach the application around the proxy.
    """
    name = "HTTP_" + header.upper().replace("-", "_")

    def key(environ):
        value = environ.get(name, "")
        first = value.split(",", 1)[0].strip()
        return first or environ.get("REMOTE_ADDR", "")

    return key


class Rule:
    """Requests whose PATH_INFO matches path (a regex, searched) and whose
    method is in methods (None: any) are tagged prefix + key. key, when
    given, replaces the Governor's key function for this rule.
    """

    def __init__(self, path, prefix, methods=None, key=None):
        self.path = re.compile(path)
        self.prefix = prefix
        self.methods = None if methods is None else frozenset(m.upper() for m in methods)
        self.key = key

    def matches(self, method, path):
        return (self.methods is None or method in self.methods) and self.path.search(path) is not None


class Governor:
    """WSGI middleware: serves a request with app, or answers 429.

    rules are tried in order (see Rule); default_prefix tags the requests
    no rule matches ("": the daemon's default limit; None: not throttled).
    key(environ) gives the client's key (remote_addr by default); a request
    with an empty key is not throttled. delay is a pause in seconds before
    each 429. retry_after is the Retry-After header's value.
    """

    def __init__(self, app, client, rules=(), default_prefix="", key=remote_addr,
                 delay=0.0, retry_after="1", sleep=time.sleep):
        self.app = app
        self.client = client
        self.rules = list(rules)
        self.default_prefix = default_prefix
        self.key = key
        self.delay = delay
        self.retry_after = retry_after
        self._sleep = sleep

    def tag(self, environ):
        """The tag for a request, or None when it is not throttled."""
        method = environ.get("REQUEST_METHOD", "GET").upper()
        path = environ.get("PATH_INFO", "")
        prefix, key = self.default_prefix, self.key
        for rule in self.rules:
            if rule.matches(method, path):
                prefix, key = rule.prefix, rule.key or self.key
                break
        if prefix is None:
            return None
        k = key(environ)
        return prefix + k if k else None

    def __call__(self, environ, start_response):
        tag = self.tag(environ)
        if tag is None or self.client.allow(tag):
            return self.app(environ, start_response)
        if self.delay > 0:
            self._sleep(self.delay)
        body = b"429 too many requests\n"
        start_response("429 Too Many Requests", [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Length", str(len(body))),
            ("Retry-After", self.retry_after),
        ])
        return [body]

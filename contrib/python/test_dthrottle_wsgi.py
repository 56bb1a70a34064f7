"""Unit tests for dthrottle_wsgi, against fake daemons on Unix sockets.

    python3 -m unittest -v test_dthrottle_wsgi
"""

import os
import queue
import socket
import tempfile
import threading
import unittest

from dthrottle_wsgi import Client, Governor, Rule, forwarded_for

WAIT = 10  # seconds a test waits for anything before failing


class FakeDaemon:
    """A stand-in for dthrottled: serve(conn) runs per connection."""

    def __init__(self, path, serve):
        self.path = path
        self.accepts = 0
        self.conns = []
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(16)
        self._serve = serve
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepts += 1
            self.conns.append(conn)
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn):
        with conn:
            try:
                self._serve(conn, conn.makefile("rb"))
            except OSError:
                pass

    def stop(self):
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
        except OSError:
            pass
        self.listener.close()
        for c in self.conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()
        self._thread.join(WAIT)


def answer(conn, reader):
    """Well behaved: tags starting with "no" get NO, others OK."""
    for line in reader:
        conn.sendall(b"NO\n" if line.startswith(b"no") else b"OK\n")


def hang(conn, reader):
    for _ in reader:
        pass


class Gated:
    """Answers like answer, each reply after a release; reports reads."""

    def __init__(self):
        self.got = queue.Queue()
        self.release = queue.Queue()
        self.wrote = queue.Queue()

    def __call__(self, conn, reader):
        for line in reader:
            self.got.put(line.rstrip(b"\n"))
            self.release.get(timeout=WAIT)
            try:
                conn.sendall(b"NO\n" if line.startswith(b"no") else b"OK\n")
                self.wrote.put(None)
            except OSError as e:
                self.wrote.put(e)
                return


class FakeClock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


class Base(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="dtp")
        self.path = os.path.join(self.dir.name, "s")
        self.daemons = []

    def tearDown(self):
        for d in self.daemons:
            d.stop()
        self.dir.cleanup()

    def daemon(self, serve):
        d = FakeDaemon(self.path, serve)
        self.daemons.append(d)
        return d

    def client(self, **kw):
        kw.setdefault("timeout", WAIT)
        c = Client(self.path, **kw)
        self.addCleanup(c.close)
        return c


class ClientTest(Base):
    def test_answers(self):
        self.daemon(answer)
        c = self.client()
        self.assertEqual([c.allow(t) for t in ("a", "no-b", "c", "")], [True, False, True, True])
        self.assertEqual((c.stats["ok"], c.stats["no"], c.stats["connects"]), (2, 1, 1))

    def test_invalid_tag_refused_even_failing_open(self):
        c = self.client()
        self.assertFalse(c.allow("a\nb"))
        self.assertFalse(c.allow("x" * ((64 << 10) + 1)))
        self.assertEqual(c.stats["invalid"], 2)
        self.assertEqual(c.stats["connects"], 0)

    def test_absent_daemon_backs_off(self):
        clock = FakeClock()
        c = self.client(clock=clock)
        self.assertTrue(c.allow("a"))  # fails open
        self.assertEqual((c.stats["errors"], c.stats["connects"]), (1, 1))
        for _ in range(50):
            self.assertTrue(c.allow("a"))
        self.assertEqual(c.stats["connects"], 1, "connected during the backoff")
        self.assertEqual(c.stats["backed_off"], 50)
        for i, pause in enumerate([0.01, 0.02, 0.04]):
            clock.t += pause * 0.99
            c.allow("a")
            self.assertEqual(c.stats["connects"], i + 1, "probe %d came early" % i)
            clock.t += pause * 0.02
            c.allow("a")
            self.assertEqual(c.stats["connects"], i + 2, "no probe %d" % i)
        self.daemon(answer)
        clock.t += 0.1
        self.assertFalse(c.allow("no"))
        self.assertFalse(c.allow("no"))  # healthy again: asked, not backed off
        self.assertEqual(c.stats["no"], 2)

    def test_absent_daemon_fail_closed(self):
        c = self.client(fail_open=False)
        self.assertFalse(c.allow("a"))
        self.assertFalse(c.allow("a"))
        self.assertEqual(c.stats["fail_closed"], 2)

    def test_hung_daemon_times_out(self):
        d = self.daemon(hang)
        clock = FakeClock()
        c = self.client(timeout=0.02, clock=clock)
        self.assertTrue(c.allow("a"))
        self.assertEqual(c.stats["timeouts"], 1)
        self.assertTrue(c.allow("a"))
        self.assertEqual(c.stats["backed_off"], 1)
        clock.t += 0.01
        self.assertTrue(c.allow("a"))
        self.assertEqual((c.stats["timeouts"], d.accepts), (2, 2), "the timed-out connection was reused")

    def test_closed_mid_reply(self):
        def half(conn, reader):
            reader.readline()
            conn.sendall(b"O")
        self.daemon(half)
        c = self.client(fail_open=False)
        self.assertFalse(c.allow("a"))
        self.assertEqual((c.stats["errors"], c.stats["timeouts"]), (1, 0))

    def test_bad_reply(self):
        def bad(conn, reader):
            reader.readline()
            conn.sendall(b"YES\n")
        self.daemon(bad)
        c = self.client()
        self.assertTrue(c.allow("a"))
        self.assertEqual(c.stats["errors"], 1)

    def test_late_reply_never_answers_the_next_query(self):
        g = Gated()
        self.daemon(g)
        clock = FakeClock()
        c = self.client(timeout=0.05, clock=clock)
        self.assertTrue(c.allow("no-late"))  # times out, fails open
        self.assertEqual(g.got.get(timeout=WAIT), b"no-late")
        g.release.put(None)
        self.assertIsNotNone(g.wrote.get(timeout=WAIT), "late reply written to a connection kept open")
        clock.t += 1
        c.timeout = WAIT
        result = queue.Queue()
        def ask():
            result.put(c.allow("next"))
            c.close()  # the thread's own connection
        threading.Thread(target=ask).start()
        self.assertEqual(g.got.get(timeout=WAIT), b"next")
        g.release.put(None)
        self.assertIs(result.get(timeout=WAIT), True)

    def test_reconnects_after_restart(self):
        d = self.daemon(answer)
        c = self.client()
        self.assertTrue(c.allow("a"))
        d.stop()
        self.daemons.remove(d)
        os.unlink(self.path)
        self.daemon(answer)
        self.assertTrue(c.allow("a"))  # the old connection fails: open
        self.assertEqual(c.stats["errors"], 1)
        c._retry_at = None  # skip the backoff
        self.assertFalse(c.allow("no"))
        self.assertEqual(c.stats["connects"], 2)


def environ(method="GET", path="/", addr="192.0.2.1", **headers):
    env = {"REQUEST_METHOD": method, "PATH_INFO": path, "REMOTE_ADDR": addr}
    env.update(headers)
    return env


class RecordingClient:
    """Answers from a set of refused tags, recording every tag asked."""

    def __init__(self, refused=()):
        self.refused = set(refused)
        self.asked = []

    def allow(self, tag):
        self.asked.append(tag)
        return tag not in self.refused


def hello(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello"]


def call(app, env):
    got = {}

    def start_response(status, headers):
        got["status"], got["headers"] = status, dict(headers)

    body = b"".join(app(env, start_response))
    return got["status"], got["headers"], body


class GovernorTest(unittest.TestCase):
    def governor(self, client, **kw):
        rules = [
            Rule(r"^/login$", "login:", methods=["post"]),
            Rule(r"^/api/", "api:", key=lambda env: env.get("HTTP_X_API_KEY", "")),
        ]
        return Governor(hello, client, rules=rules, **kw)

    def test_tags(self):
        g = self.governor(RecordingClient())
        cases = [
            (environ("POST", "/login"), "login:192.0.2.1"),
            (environ("GET", "/login"), "192.0.2.1"),  # the rule is for POST only
            (environ("GET", "/api/x", HTTP_X_API_KEY="k1"), "api:k1"),
            (environ("GET", "/api/x"), None),  # no key: not throttled
            (environ("GET", "/other"), "192.0.2.1"),
        ]
        for env, want in cases:
            self.assertEqual(g.tag(env), want, env)
        self.assertIsNone(self.governor(RecordingClient(), default_prefix=None).tag(environ("GET", "/other")))

    def test_forwarded_for(self):
        key = forwarded_for()
        self.assertEqual(key(environ(HTTP_X_FORWARDED_FOR=" 203.0.113.9 , 10.0.0.1")), "203.0.113.9")
        self.assertEqual(key(environ()), "192.0.2.1")
        self.assertEqual(forwarded_for("X-Real-IP")(environ(HTTP_X_REAL_IP="198.51.100.7")), "198.51.100.7")

    def test_refused_gets_429_after_delay(self):
        slept = []
        client = RecordingClient(refused={"login:192.0.2.1"})
        g = self.governor(client, delay=0.005, retry_after="7", sleep=slept.append)
        status, headers, body = call(g, environ("POST", "/login"))
        self.assertEqual(status, "429 Too Many Requests")
        self.assertEqual(headers["Retry-After"], "7")
        self.assertEqual(headers["Content-Length"], str(len(body)))
        self.assertEqual(slept, [0.005])
        status, _, body = call(g, environ("GET", "/"))
        self.assertEqual((status, body), ("200 OK", b"hello"))
        self.assertEqual(slept, [0.005], "slept before serving")
        self.assertEqual(client.asked, ["login:192.0.2.1", "192.0.2.1"])

    def test_untagged_not_asked(self):
        client = RecordingClient()
        g = self.governor(client, default_prefix=None)
        self.assertEqual(call(g, environ("GET", "/other"))[0], "200 OK")
        self.assertEqual(client.asked, [])


if __name__ == "__main__":
    unittest.main()

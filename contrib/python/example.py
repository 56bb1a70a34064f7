"""A WSGI application behind dthrottle's Governor, served by wsgiref.

    python3 example.py [-socket PATH] [-port 8000] [-timeout 0.01]

GET /           hello, throttled by client address (the daemon's [limit])
POST /login     throttled by client address under the "login:" [[policy]]
Prints "listening on http://127.0.0.1:PORT/" once it accepts requests.
"""

import argparse
import socketserver
import sys
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from dthrottle_wsgi import Client, Governor, Rule, default_address


def hello(environ, start_response):
    body = b"hello\n"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def build(socket_path, timeout=0.01):
    return Governor(
        hello,
        Client(socket_path, timeout=timeout),  # fails open
        rules=[Rule(r"^/login$", "login:", methods=["POST"])],
        delay=0.005,  # 5 ms pause before each 429
    )


class Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):
        pass


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-socket", default=default_address())
    parser.add_argument("-port", type=int, default=8000)
    parser.add_argument("-timeout", type=float, default=0.01, help="seconds to wait for dthrottled")
    args = parser.parse_args()
    with make_server("127.0.0.1", args.port, build(args.socket, args.timeout),
                     server_class=Server, handler_class=QuietHandler) as httpd:
        print("listening on http://127.0.0.1:%d/" % httpd.server_port, flush=True)
        httpd.serve_forever()


if __name__ == "__main__":
    sys.exit(main())

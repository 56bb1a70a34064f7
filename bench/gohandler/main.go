// Command gohandler serves bench/gohandler.sh: one net/http handler that
// answers "hello\n", on three loopback ports at once: alone, behind
// client.Middleware deciding in process from dthrottled's shared table,
// and behind client.Middleware asking every query over the socket
// (Config.NoShare). Each connection is its own tag (the peer's address
// and port), so wrk's 64 connections are 64 clients. On SIGTERM or
// SIGINT it prints the clients' Stats and exits.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/dthrottle/dthrottle/client"
)

func main() {
	sock := flag.String("sock", "", "dthrottled's Unix socket")
	off := flag.String("off", "127.0.0.1:18180", "address of the handler alone")
	shared := flag.String("shared", "127.0.0.1:18181", "address of the handler behind the middleware, deciding in process")
	socket := flag.String("socket", "127.0.0.1:18182", "address of the handler behind the middleware, asking over the socket")
	flag.Parse()
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("hello\n"))
	})
	tag := func(r *http.Request) string { return r.RemoteAddr }
	var clients []*client.Client
	serve := func(addr string, h http.Handler) {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			log.Fatal(err)
		}
		go func() { log.Fatal(http.Serve(l, h)) }()
	}
	serve(*off, hello)
	for _, c := range []struct {
		addr    string
		noShare bool
	}{{*shared, false}, {*socket, true}} {
		cl, err := client.New(client.Config{Address: *sock, NoShare: c.noShare})
		if err != nil {
			log.Fatal(err)
		}
		clients = append(clients, cl)
		serve(c.addr, cl.Middleware(tag)(hello))
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	for i, name := range []string{"shared", "socket"} {
		s := clients[i].Stats()
		fmt.Printf("%s: %d OK, %d NO, %d decided in process, %d attaches, %d failed open\n",
			name, s.OK, s.NO, s.InProcess, s.Attaches, s.FailOpen)
	}
}

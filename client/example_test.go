package client_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"time"

	"github.com/dthrottle/dthrottle/client"
)

// Throttle an HTTP server by client address: refused requests get 429 with
// Retry-After: 1; if dthrottled is down, requests are served.
func ExampleClient_Middleware() {
	c, err := client.New(client.Config{Address: "/run/dthrottle/dthrottle.sock"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })
	http.Handle("/", c.Middleware(client.RemoteIP)(app))
	// log.Fatal(http.ListenAndServe(":8080", nil))
}

// Ask about one tag. On error the answer is the fail mode's (true: fail
// open), so it is safe to use as it is.
func ExampleClient_Allow() {
	c, err := client.New(client.Config{Address: "/run/dthrottle/dthrottle.sock"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if ok, _ := c.Allow(context.Background(), "login:alice"); !ok {
		fmt.Println("too many logins for alice: try later")
	}
}

// Hold an API key to the quota its plan states, a thousand requests a day,
// asked of the daemon's HTTP decision endpoint.
func ExampleClient_AllowLimit() {
	c, err := client.New(client.Config{Address: "/run/dthrottle/dthrottle.sock", HTTP: "127.0.0.1:7072"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	d, _ := c.AllowLimit(context.Background(), "key:k-123", client.Limit{Requests: 1000, Per: 24 * time.Hour})
	if !d.OK {
		fmt.Printf("quota spent: %d left, try again in %v\n", d.Remaining, d.RetryAfter)
	}
}

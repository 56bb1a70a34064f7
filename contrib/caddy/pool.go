package caddydthrottle

import (
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/dthrottle/dthrottle/client"
)

// clients holds the clients of the handlers of the running configs, one
// per poolKey. Caddy provisions a new config before it cleans up the old
// one, so a reload finds the client its handlers used still in the pool,
// attached to the daemon's table, its health known.
var clients = caddy.NewUsagePool()

// poolKey is what makes two handlers' clients the same.
type poolKey struct {
	socket  string
	mode    client.FailMode
	timeout time.Duration
}

// pooled is a client as the pool holds it: closed when its last user
// is gone.
type pooled struct{ *client.Client }

// Destruct closes the client.
func (p pooled) Destruct() error { return p.Close() }

// takeClient returns the client for k, made on first use.
func takeClient(k poolKey) (*client.Client, error) {
	v, _, err := clients.LoadOrNew(k, func() (caddy.Destructor, error) {
		c, err := client.New(client.Config{Network: "unix", Address: k.socket, FailMode: k.mode, Timeout: k.timeout})
		if err != nil {
			return nil, err
		}
		return pooled{c}, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(pooled).Client, nil
}

// releaseClient gives back a client taken with takeClient.
func releaseClient(k poolKey) error {
	_, err := clients.Delete(k)
	return err
}

package main

import (
	"fmt"
	"net"

	"github.com/coreos/go-systemd/v22/activation"
)

// namedListener is a listening socket passed by systemd, with the
// FileDescriptorName its socket unit gave it.
type namedListener struct {
	net.Listener
	name string
}

// activationListeners returns the stream sockets systemd passed
// (LISTEN_FDS), if any: Unix and TCP alike serve the query protocol, told
// apart in the log by their FileDescriptorName and address. The daemon
// does not own them: closing one does not remove its socket file.
func activationListeners() ([]namedListener, error) {
	byName, err := activation.ListenersWithNames()
	if err != nil {
		return nil, fmt.Errorf("socket activation: %w", err)
	}
	var out []namedListener
	for name, ls := range byName {
		for _, l := range ls {
			if l == nil {
				continue
			}
			if ul, ok := l.(*net.UnixListener); ok {
				ul.SetUnlinkOnClose(false)
			}
			out = append(out, namedListener{l, name})
		}
	}
	return out, nil
}

package daemon

import (
	"fmt"
	"net"

	"github.com/coreos/go-systemd/v22/activation"
)

// SystemdListeners returns the stream sockets systemd passed (LISTEN_FDS),
// if any, named by their FileDescriptorName: Unix and TCP alike serve the
// query protocol. Closing one does not remove its socket file: systemd
// owns it.
func SystemdListeners() ([]NamedListener, error) {
	byName, err := activation.ListenersWithNames()
	if err != nil {
		return nil, fmt.Errorf("socket activation: %w", err)
	}
	var out []NamedListener
	for name, ls := range byName {
		for _, l := range ls {
			if l == nil {
				continue
			}
			if ul, ok := l.(*net.UnixListener); ok {
				ul.SetUnlinkOnClose(false)
			}
			out = append(out, NamedListener{l, name})
		}
	}
	return out, nil
}

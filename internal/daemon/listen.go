package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/dthrottle/dthrottle/config"
)

// listen opens the configured Unix and TCP listeners of the line
// protocol's way in w. On error, nothing is left open.
func (d *Daemon) listen(w *way, cfg config.Listen) error {
	if cfg.Unix != "" {
		c := config.Config{Listen: cfg}
		mode := c.UnixModeBits()
		l, unlock, err := listenUnix(cfg.Unix, mode, cfg.UnixGroup)
		if err != nil {
			return err
		}
		w.listeners, w.unlock = append(w.listeners, NamedListener{l, "unix"}), unlock
		d.log.Info("listening", "unix", cfg.Unix, "mode", fmt.Sprintf("%#o", mode), "group", cfg.UnixGroup)
	}
	if cfg.TCP != "" {
		l, err := net.Listen("tcp", cfg.TCP)
		if err != nil {
			for _, l := range w.listeners {
				l.Close()
			}
			w.unlock()
			return fmt.Errorf("listening on tcp %s: %w", cfg.TCP, err)
		}
		w.listeners = append(w.listeners, NamedListener{l, "tcp"})
		d.log.Info("listening", "tcp", l.Addr().String())
		if ta, ok := l.Addr().(*net.TCPAddr); !ok || !ta.IP.IsLoopback() {
			d.log.Warn("tcp listener is reachable from other hosts: anyone who can connect can spend tags", "tcp", l.Addr().String())
		}
	}
	return nil
}

// listenUnix listens on a Unix socket at path with the given mode and group
// ("" keeps the user's group). A lock file beside it (path + ".lock") keeps
// two daemons from racing for the path: the one that holds the lock owns
// the socket, so a socket file left by a crash is replaced, while a second
// instance never takes a live daemon's socket. unlock releases the lock;
// call it after closing the listener, which removes the socket file.
func listenUnix(path string, mode os.FileMode, group string) (l net.Listener, unlock func(), err error) {
	gid := -1
	if group != "" {
		g, err := user.LookupGroup(group)
		if err != nil {
			return nil, nil, fmt.Errorf("unix socket group: %w", err)
		}
		if gid, err = strconv.Atoi(g.Gid); err != nil {
			return nil, nil, fmt.Errorf("unix socket group %s: gid %q: %w", group, g.Gid, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, nil, fmt.Errorf("unix socket directory: %w", err)
	}
	unlock, err = lockFile(path + ".lock")
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			unlock()
		}
	}()
	if err := removeStale(path); err != nil {
		return nil, nil, err
	}
	// Create the socket with no access for anyone but the owner, then open
	// it up to the configured mode: never briefly wider than configured.
	old := syscall.Umask(0o177)
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	syscall.Umask(old)
	if err != nil {
		return nil, nil, fmt.Errorf("listening on unix %s: %w", path, err)
	}
	if gid >= 0 {
		if err := os.Chown(path, -1, gid); err != nil {
			ul.Close()
			return nil, nil, fmt.Errorf("unix socket group: %w", err)
		}
	}
	if err := os.Chmod(path, mode); err != nil {
		ul.Close()
		return nil, nil, fmt.Errorf("unix socket mode: %w", err)
	}
	return ul, unlock, nil
}

// lockFile takes an exclusive, non-blocking lock on path. The file stays;
// the lock goes with the process, so a crash never leaves it held.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("unix socket lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another dthrottled holds %s: is it already running?", path)
		}
		return nil, fmt.Errorf("unix socket lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// removeStale removes a socket file no one answers on. A socket someone
// answers on (say, one systemd holds for activation) or a file that is not
// a socket is an error.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("unix socket: %w", err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("unix socket %s: exists and is not a socket", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("unix socket %s: another process is listening on it", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("removing stale unix socket: %w", err)
	}
	return nil
}

// openEndpoint opens the listener of a way in with a socket of its own
// (http.listen, spoe.listen), named what in errors and logs: a Unix
// socket with listen.unix_mode and listen.unix_group, whose lock the way
// releases once it is closed, or TCP, warned about when other hosts can
// reach it. The caller adds the server.
func (d *Daemon) openEndpoint(what, network, addr string, cfg config.Config) (*way, error) {
	l, unlock := net.Listener(nil), func() {}
	var err error
	if network == "unix" {
		if l, unlock, err = listenUnix(addr, cfg.UnixModeBits(), cfg.Listen.UnixGroup); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	} else if l, err = net.Listen("tcp", addr); err != nil {
		return nil, fmt.Errorf("%s: listening on tcp %s: %w", what, addr, err)
	}
	if ta, ok := l.Addr().(*net.TCPAddr); ok && !ta.IP.IsLoopback() {
		d.log.Warn(what+" is reachable from other hosts: anyone who can connect can spend tags", "addr", l.Addr().String())
	}
	return &way{name: what, listeners: []NamedListener{{l, network}}, unlock: unlock}, nil
}

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

	"github.com/dthrottle/dthrottle/internal/config"
)

// listen opens the configured Unix and TCP listeners of the line
// protocol's way in w. On error, nothing is left open.
func (d *Daemon) listen(w *way, cfg config.Listen) error {
	// TCP first: a client that sees the Unix socket answer (a readiness
	// check, a test) finds the TCP port bound too.
	if cfg.TCP != "" {
		l, err := net.Listen("tcp", cfg.TCP)
		if err != nil {
			return fmt.Errorf("%s (listen.tcp): listening on tcp %s: %w", w.name, cfg.TCP, err)
		}
		w.listeners = append(w.listeners, NamedListener{l, "tcp"})
	}
	if cfg.Unix != "" {
		c := config.Config{Listen: cfg}
		mode := c.UnixModeBits()
		l, lock, err := listenUnix(cfg.Unix, mode, cfg.UnixGroup)
		if err != nil {
			w.abandon()
			return fmt.Errorf("%s (listen.unix): %w", w.name, err)
		}
		// The Unix socket first in the list, as the addresses are shown.
		w.listeners, w.lock = append([]NamedListener{{l, "unix"}}, w.listeners...), lock
		d.log.Info("listening", "unix", cfg.Unix, "mode", fmt.Sprintf("%#o", mode), "group", cfg.UnixGroup)
	}
	if cfg.TCP != "" {
		l := w.listeners[len(w.listeners)-1]
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
// instance never takes a live daemon's socket. Release the lock after
// closing the listener, which removes the socket file.
//
// The directory must exist. A path that is anything but a socket no one
// answers on (a file, a directory, a link, a live socket) is refused with
// an error naming it and why, and a refusal leaves nothing behind: no
// socket, and no lock file unless another process had made it.
func listenUnix(path string, mode os.FileMode, group string) (net.Listener, *fileLock, error) {
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
	if _, err := checkSocketPath(path); err != nil {
		return nil, nil, err
	}
	lock, err := lockFile(path + ".lock")
	if err != nil {
		return nil, nil, err
	}
	l, err := openSocket(path, mode, gid)
	if err != nil {
		lock.abandon()
		return nil, nil, err
	}
	return l, lock, nil
}

// openSocket removes a stale socket at path and listens there, with the
// mode and group (gid -1 keeps the user's).
func openSocket(path string, mode os.FileMode, gid int) (net.Listener, error) {
	if err := removeStale(path); err != nil {
		return nil, err
	}
	// Create the socket with no access for anyone but the owner, then open
	// it up to the configured mode: never briefly wider than configured.
	old := syscall.Umask(0o177)
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listening on unix %s: %w", path, err)
	}
	if gid >= 0 {
		if err := os.Chown(path, -1, gid); err != nil {
			ul.Close()
			return nil, fmt.Errorf("unix socket %s: group: %w", path, err)
		}
	}
	if err := os.Chmod(path, mode); err != nil {
		ul.Close()
		return nil, fmt.Errorf("unix socket %s: mode: %w", path, err)
	}
	return ul, nil
}

// checkSocketPath refuses, before anything is made, a socket path whose
// directory is missing or that names something other than a socket, and
// reports whether a socket is there.
func checkSocketPath(path string) (exists bool, err error) {
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, fmt.Errorf("unix socket %s: directory %s does not exist", path, dir)
		}
		return false, fmt.Errorf("unix socket %s: %w", path, err)
	} else if !fi.IsDir() {
		return false, fmt.Errorf("unix socket %s: %s is not a directory", path, dir)
	}
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("unix socket %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return false, fmt.Errorf("unix socket %s: exists and is not a socket (%s)", path, describeMode(fi.Mode()))
	}
	return true, nil
}

// describeMode names a file's type for an error.
func describeMode(m os.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&os.ModeSymlink != 0:
		return "a symbolic link"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return "mode " + m.Type().String()
}

// fileLock is a lock taken by lockFile.
type fileLock struct {
	f       *os.File
	path    string
	created bool // this process made the file
}

// release lets the lock go. The file stays: another daemon may have it
// open, about to lock it, and must find the same file. Nil is no lock.
func (l *fileLock) release() {
	if l != nil {
		l.f.Close()
	}
}

// abandon lets the lock go after a start that failed, removing the file
// if this process made it (still held, so no other daemon holds it): a
// refused start leaves nothing behind. Nil is no lock.
func (l *fileLock) abandon() {
	if l == nil {
		return
	}
	if l.created {
		os.Remove(l.path)
	}
	l.f.Close()
}

// lockFile takes an exclusive, non-blocking lock on path, made if missing.
// The lock goes with the process, so a crash never leaves it held. A path
// that is not a regular file (a link, a directory, a socket) is refused.
func lockFile(path string) (*fileLock, error) {
	created := true
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if errors.Is(err, os.ErrExist) {
		created = false
		f, err = os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	}
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("unix socket lock %s: exists and is a symbolic link", path)
		}
		return nil, fmt.Errorf("unix socket lock %s: %w", path, unwrapPath(err))
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("unix socket lock %s: %w", path, err)
		}
		return nil, fmt.Errorf("unix socket lock %s: exists and is not a regular file (%s)", path, describeMode(fi.Mode()))
	}
	l := &fileLock{f: f, path: path, created: created}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close() // the file stays: another may hold it, whoever made it
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another dthrottled holds %s: is it already running?", path)
		}
		return nil, fmt.Errorf("unix socket lock %s: %w", path, err)
	}
	return l, nil
}

// unwrapPath drops the *PathError's repetition of the path.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// removeStale removes a socket file no one answers on. A socket someone
// answers on (say, one systemd holds for activation) or a file that is not
// a socket is an error. Checked again under the lock: the path may have
// changed since the first look.
func removeStale(path string) error {
	exists, err := checkSocketPath(path)
	if err != nil || !exists {
		return err
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
// (http.listen, spoe.listen, rls.listen: its key), named what in errors
// and logs: a Unix
// socket with listen.unix_mode and listen.unix_group, whose lock the way
// releases once it is closed, or TCP, warned about when other hosts can
// reach it. The caller adds the server.
func (d *Daemon) openEndpoint(what, key, network, addr string, cfg config.Config) (*way, error) {
	var (
		l    net.Listener
		lock *fileLock
		err  error
	)
	if network == "unix" {
		if l, lock, err = listenUnix(addr, cfg.UnixModeBits(), cfg.Listen.UnixGroup); err != nil {
			return nil, fmt.Errorf("%s (%s): %w", what, key, err)
		}
	} else if l, err = net.Listen("tcp", addr); err != nil {
		return nil, fmt.Errorf("%s (%s): listening on tcp %s: %w", what, key, addr, err)
	}
	if ta, ok := l.Addr().(*net.TCPAddr); ok && !ta.IP.IsLoopback() {
		d.log.Warn(what+" is reachable from other hosts: anyone who can connect can spend tags", "addr", l.Addr().String())
	}
	return &way{name: what, listeners: []NamedListener{{l, network}}, lock: lock}, nil
}

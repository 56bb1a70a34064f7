package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// This file owns dthrottle top's terminal: the live loop that redraws
// every interval and takes keys, raw mode and its undoing, the size.

// live runs the view in the terminal until q, ^C or a signal, restoring
// the terminal whatever ends it.
func (v *topView) live(in, out *os.File, interval time.Duration, now func() time.Time) error {
	restore, err := rawMode(int(in.Fd()))
	if err != nil {
		return fmt.Errorf("top: terminal: %w", err)
	}
	defer restore()
	// Signals are caught before the screen changes, so that none can end
	// the process with the terminal left raw.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGWINCH)
	defer signal.Stop(sigs)
	io.WriteString(out, termEnter)
	defer io.WriteString(out, termLeave)

	keys := make(chan []byte)
	go readKeys(in, keys)
	results := make(chan topResult, 1)
	inFlight, again := false, false
	refresh := func() {
		if inFlight {
			again = true
			return
		}
		inFlight = true
		p := v.params()
		go func() { results <- v.fetch(p) }()
	}
	draw := func() {
		w, h := termSize(int(out.Fd()))
		var b strings.Builder
		b.WriteString(termHome)
		for i, line := range v.frame(now(), w, h, true) {
			if i > 0 {
				b.WriteString("\r\n")
			}
			b.WriteString(line)
			b.WriteString(termEOL)
		}
		b.WriteString(termEOS)
		io.WriteString(out, b.String())
	}
	refresh()
	draw()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case sig := <-sigs:
			if sig != syscall.SIGWINCH {
				return nil
			}
		case b, ok := <-keys:
			if !ok {
				return nil // end of input: the terminal is gone
			}
			for _, k := range v.keys(b) {
				before := v.params()
				if v.key(k) {
					return nil
				}
				if k == 'r' && !v.typing || v.params() != before {
					refresh()
				}
			}
		case r := <-results:
			inFlight = false
			if r.p == v.params() && r.err == nil {
				v.updated = now()
			}
			v.apply(r)
			if again || r.p != v.params() {
				again = false
				refresh()
			}
		case <-tick.C:
			refresh()
		}
		draw()
	}
}

// readKeys sends what each read of the terminal gives, and closes keys at
// the end of input.
func readKeys(in *os.File, keys chan<- []byte) {
	buf := make([]byte, 64)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			keys <- append([]byte(nil), buf[:n]...)
		}
		if err != nil {
			close(keys)
			return
		}
	}
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// rawMode puts the terminal on fd in raw mode, as cfmakeraw(3) does, and
// returns the function that restores it.
func rawMode(fd int) (restore func(), err error) {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, err
	}
	return func() { unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}

// termSize is the terminal's width and height, 80x24 if it cannot say.
func termSize(fd int) (width, height int) {
	ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
	if err != nil || ws.Col == 0 || ws.Row == 0 {
		return 80, 24
	}
	return int(ws.Col), int(ws.Row)
}

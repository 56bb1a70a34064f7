package netns

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// NS is a further network namespace, made by New inside the one Run
// created: a host of a simulated network, say. An open file descriptor on
// it keeps it alive, with no process inside, until Close; processes started
// in it (through Do) keep it alive after that.
//
// Its zero value is not usable. Do and Path are safe for concurrent use;
// Close is not, with them.
type NS struct {
	f *os.File
}

// threadNS is the network namespace of the calling thread. Go may run a
// goroutine on any thread, so it means something only between
// runtime.LockOSThread and runtime.UnlockOSThread.
func threadNS() string { return fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()) }

// New creates an empty network namespace: only lo, down. It needs
// CAP_SYS_ADMIN over the current user namespace, which the test Run started
// has.
//
// New does not itself refuse to run outside Run's namespace, since a new
// namespace is isolated from everything anyway; but whatever then connects
// it to the network it was made from (a veth pair, say) must only be
// made where Inside is true.
func New() (*NS, error) {
	type result struct {
		ns  *NS
		err error
	}
	done := make(chan result, 1)
	// A goroutine of its own, locked to its thread: if the thread cannot
	// return to the namespace it came from, it is never unlocked, and Go
	// ends the thread with the goroutine instead of reusing it.
	go func() {
		runtime.LockOSThread()
		ns, back, err := unshare()
		if back {
			runtime.UnlockOSThread()
		}
		done <- result{ns, err}
	}()
	r := <-done
	return r.ns, r.err
}

// unshare moves the calling thread into a new network namespace, opens
// it, and moves the thread back. back reports whether the thread is in
// its original namespace.
func unshare() (ns *NS, back bool, err error) {
	orig, err := os.Open(threadNS())
	if err != nil {
		return nil, true, fmt.Errorf("netns: opening this thread's namespace: %w", err)
	}
	defer orig.Close()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return nil, true, fmt.Errorf("netns: unshare(CLONE_NEWNET): %w", err)
	}
	f, err := os.Open(threadNS())
	if serr := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); serr != nil {
		if f != nil {
			f.Close()
		}
		return nil, false, fmt.Errorf("netns: returning to the original namespace: %w", serr)
	}
	if err != nil {
		return nil, true, fmt.Errorf("netns: opening the new namespace: %w", err)
	}
	return &NS{f: f}, true, nil
}

// Do calls f on the calling goroutine, locked to its thread, with the
// thread in ns; then it returns the thread to the namespace it was in.
// What f does directly happens in ns: sockets it opens belong to ns, and
// processes it starts (exec.Cmd.Start) run in ns. Goroutines it starts do
// not, nor do sockets that other goroutines open for it (an http.Client's
// dials): give those a Dial that calls Do.
//
// f may call t.FailNow: the thread is returned to its namespace on the way
// out. Do returns f's error, or the error entering ns.
func (ns *NS) Do(f func() error) error {
	runtime.LockOSThread()
	orig, err := os.Open(threadNS())
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: opening this thread's namespace: %w", err)
	}
	defer orig.Close()
	if err := unix.Setns(int(ns.f.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: entering %s: %w", ns.Path(), err)
	}
	defer func() {
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			// Unlocking would let other goroutines run in ns unawares.
			panic(fmt.Sprintf("netns: cannot return to the original network namespace: %v", err))
		}
		runtime.UnlockOSThread()
	}()
	return f()
}

// Path names ns for other programs while it is open, as a path under
// /proc: for example "ip link set veth1 netns PATH" moves an interface
// into it, and "nsenter --net=PATH" enters it.
func (ns *NS) Path() string { return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), ns.f.Fd()) }

// Close releases this process's hold on ns. The namespace lives on while
// processes run in it. Calling Close again returns an error.
func (ns *NS) Close() error { return ns.f.Close() }

// Tool returns the path of a system tool the test needs, as Command finds
// it. If there is none, it fails t under CI=true (where .ci/run installs
// every tool) and skips t otherwise.
func Tool(t testing.TB, name string) string {
	t.Helper()
	p := Command(name)
	if p == "" {
		need(t, "netns: %s is not installed (looked in PATH and the sbin directories)", name)
	}
	return p
}

// Command returns the path of a system tool such as ip or nft, looked for
// in PATH and then in the sbin directories that a non-root user's PATH
// often leaves out; "" if there is none.
func Command(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p := dir + "/" + name
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The files a configuration names: the Unix sockets of the ways in, the
// lock file beside each (the socket's path and ".lock"), and state.file.
// Two keys must never name one file, or a stop writes the state over a
// socket, or a start takes its own lock and calls itself already running.
// Validate compares the paths as written, after cleaning them (so
// "/d/./q.sock" is "/d/q.sock"); CheckPaths compares them as the kernel
// sees them, with relative paths made absolute and symbolic links of the
// directories that exist resolved.

// NamedPath is a file path and what names it: a key ("listen.unix") or a
// description ("the config file").
type NamedPath struct {
	Name string
	Path string
}

// namedFile is a file of the config's: the key that names it, its value as
// written, and what the file is.
type namedFile struct {
	NamedPath
	ref   keyRef // the key; its label is "" for a file no key names
	value string // the key's value as written, for the message
	raw   string // the path as written, before cleaning
	kind  string // "socket", "lock file" or "file"
}

// files returns the files c names, with each file's key and value, in
// the order Validate checks their keys: each Unix socket (abstract ones,
// "@name", are no files) and state.file. The lock files beside the
// sockets are not listed.
func (c *Config) files() []namedFile {
	var fs []namedFile
	add := func(k keyRef, value, path, kind string) {
		if path != "" && !strings.HasPrefix(path, "@") {
			fs = append(fs, namedFile{NamedPath{k.label, path}, k, value, path, kind})
		}
	}
	unixOf := func(k keyRef, listen string) {
		if path, ok := strings.CutPrefix(listen, HTTPUnixPrefix); ok {
			add(k, listen, path, "socket")
		}
	}
	add(key("listen", "unix"), c.Listen.Unix, c.Listen.Unix, "socket")
	unixOf(key("http", "listen"), c.HTTP.Listen)
	unixOf(key("spoe", "listen"), c.SPOE.Listen)
	add(key("listen", "charge_unix"), c.Listen.ChargeUnix, c.Listen.ChargeUnix, "socket")
	unixOf(key("rls", "listen"), c.RLS.Listen)
	add(key("state", "file"), c.State.File, c.State.File, "file")
	return fs
}

// withLocks lists every file of fs and, after each socket, the lock file
// beside it, every path passed through clean.
func withLocks(fs []namedFile, clean func(string) string) []namedFile {
	var out []namedFile
	for _, f := range fs {
		f.raw = f.Path
		f.Path = clean(f.raw)
		out = append(out, f)
		if f.kind == "socket" {
			lock := f
			lock.Name, lock.raw, lock.kind = f.Name+"'s lock file", f.raw+".lock", "lock file"
			lock.Path = clean(lock.raw)
			out = append(out, lock)
		}
	}
	return out
}

// validatePaths reports the first key whose file, after cleaning, is one
// an earlier key names too (or that earlier key's socket's lock file).
func (c *Config) validatePaths() *Error {
	return samePaths(withLocks(c.files(), filepath.Clean))
}

// samePaths reports the first file of fs that an earlier one names too;
// files are compared by Path, which the caller has cleaned or resolved. A
// file no key names (the config file) is reported against the key that
// names it too.
func samePaths(fs []namedFile) *Error {
	seen := map[string]namedFile{}
	for _, f := range fs {
		prev, dup := seen[f.Path]
		if !dup {
			seen[f.Path] = f
			continue
		}
		at, other := f, prev
		if at.ref.label == "" {
			at, other = prev, f
		}
		if at.ref.label == "" {
			return &Error{Msg: fmt.Sprintf("%s and %s are one file: %s", other.Name, at.Name, f.Path), elem: -1}
		}
		what := "file"
		if at.kind == "socket" && other.kind == "socket" {
			what = "socket"
		}
		rule := fmt.Sprintf("must be another %s than %s", what, other.Name)
		if f.Path != at.raw || f.Path != other.raw {
			rule += " (both are " + f.Path + ")"
		}
		return bad(at.ref, quote(at.value), rule)
	}
	return nil
}

// CheckPaths compares the files c names, and the extra ones given (the
// config file, say), as the kernel sees them: relative paths made
// absolute, then the symbolic links of every directory on the way that
// exists resolved, and the final component too where it is a link. Two of
// them naming one file is an error that names both. It also refuses a
// state.file that exists and is not a regular file (a socket, a
// directory). Unlike Validate it does I/O: call it on the machine that
// runs the daemon, before anything is opened.
func (c *Config) CheckPaths(extra ...NamedPath) error {
	fs := c.files()
	for _, f := range fs {
		if f.kind != "file" {
			continue
		}
		if fi, err := os.Stat(f.Path); err == nil && !fi.Mode().IsRegular() {
			return bad(f.ref, quote(f.value), "exists and is not a regular file ("+fi.Mode().Type().String()+")")
		}
	}
	for _, p := range extra {
		fs = append(fs, namedFile{NamedPath: p, kind: "file"})
	}
	if e := samePaths(withLocks(fs, resolvePath)); e != nil {
		return e
	}
	return nil
}

// resolvePath returns path as the kernel reaches it: absolute, with the
// symbolic links of its longest existing prefix resolved. What does not
// exist yet is kept as written, cleaned.
func resolvePath(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return filepath.Clean(path)
	}
	rest := ""
	for dir := abs; ; dir = filepath.Dir(dir) {
		if r, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(r, rest)
		} else if !errors.Is(err, fs.ErrNotExist) || dir == filepath.Dir(dir) {
			return abs
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}

package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// Error is a problem with a configuration: bad TOML, an unknown key, a value
// of the wrong type or out of range. Parse, Load and Validate return their
// errors as *Error. Its text is
//
//	config: FILE:LINE: MSG   (from Load, when the line is known)
//	config: line LINE: MSG   (from Parse)
//	config: MSG              (from Validate, or when no line is known)
type Error struct {
	File string // file name, set by Load; "" otherwise
	Line int    // 1-based line of the key in the source; 0 if unknown
	Key  string // the key at fault, e.g. "limit.rate" or "policy[2].burst"; "" if none
	Msg  string // what is wrong, e.g. `unknown key "limit.brust"`
	Err  error  // the TOML decoder's error, if it found the problem; else nil

	path []string // the key, split, for finding its line
	elem int      // index of its [[policy]] element, or -1
}

// Error implements the error interface.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("config: ")
	switch {
	case e.File != "" && e.Line > 0:
		b.WriteString(e.File + ":" + strconv.Itoa(e.Line) + ": ")
	case e.File != "":
		b.WriteString(e.File + ": ")
	case e.Line > 0:
		b.WriteString("line " + strconv.Itoa(e.Line) + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the decoder's error, if any.
func (e *Error) Unwrap() error { return e.Err }

// Load reads the TOML file at path and returns it decoded over [Default] and
// validated, as [Parse] does. Errors about the file's content are *Error
// values naming path; a file that cannot be read gives the error of
// os.ReadFile, wrapped.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(data)
	if e, ok := errors.AsType[*Error](err); ok {
		e.File = path
	}
	return c, err
}

// Parse decodes a TOML document over [Default] and validates the result.
// Keys the document leaves out keep their default. Unknown keys, values of
// the wrong TOML type, and values [Config.Validate] rejects are errors
// (*Error), with the line of the key when it can be found. In the returned
// Config every Policy has its Name and Action filled in.
func Parse(data []byte) (Config, error) {
	src := string(data)
	// First pass: syntax, unknown keys and value types, checked in a fixed
	// order on the raw document.
	var raw map[string]any
	md, err := toml.Decode(src, &raw)
	if err != nil {
		return Config{}, decodeError(err)
	}
	lines := scanKeys(src)
	if e := checkUnknown(md, lines); e != nil {
		return Config{}, e
	}
	if e := checkTypes(raw, reflect.TypeFor[Config](), nil, -1, lines); e != nil {
		return Config{}, e
	}

	// Second pass: decode over the defaults. After the checks above this
	// should not fail, but the decoder has the last word.
	c := Default()
	md, err = toml.Decode(src, &c)
	if err != nil {
		return Config{}, decodeError(err)
	}
	if u := md.Undecoded(); len(u) > 0 {
		return Config{}, &Error{Key: u[0].String(), Msg: fmt.Sprintf("unknown key %q", u[0].String())}
	}
	c.statedPer(md)
	c.fillPolicies()
	if err := c.Validate(); err != nil {
		if e, ok := err.(*Error); ok && e.path != nil {
			e.Line = lineOf(lines, e.path, e.elem)
		}
		return Config{}, err
	}
	return c, nil
}

// decodeError turns an error of the TOML decoder into an *Error, keeping its
// line.
func decodeError(err error) *Error {
	if pe, ok := errors.AsType[toml.ParseError](err); ok {
		msg := "invalid toml: " + pe.Message
		if pe.LastKey != "" {
			msg = fmt.Sprintf("invalid toml (last key %q): %s", pe.LastKey, pe.Message)
		}
		return &Error{Line: pe.Position.Line, Msg: msg, Err: err}
	}
	return &Error{Msg: err.Error(), Err: err}
}

// fillPolicies gives every policy its default Name (the Prefix), Action
// (limit) and Quotas (any).
func (c *Config) fillPolicies() {
	for i := range c.Policy {
		p := &c.Policy[i]
		if p.Name == "" {
			p.Name = p.Prefix
		}
		if p.Action == "" {
			p.Action = ActionLimit
		}
		if p.Quotas == "" {
			p.Quotas = QuotasAny
		}
	}
}

package config

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// The schema is read from Config's own toml tags, so it cannot drift from
// the struct. It lets Parse reject unknown keys exactly (the decoder matches
// keys case-insensitively) and check every value's TOML type in a fixed
// order before decoding, so the same bad file always gives the same error.

// kind is what a key must hold.
type kind int

const (
	kindTable    kind = iota // [section]
	kindTables               // [[section]], one table per element
	kindString               // "text"
	kindInt                  // 42
	kindFloat                // 4.2 or 42
	kindDuration             // "250ms"
	kindStrings              // ["a", "b"]
	kindBool                 // true or false
)

// what says, for an error message, what a key of this kind must be.
var what = [...]string{
	kindTable:    "a table",
	kindTables:   "an array of tables",
	kindString:   "a string",
	kindInt:      "an integer",
	kindFloat:    "a number",
	kindDuration: `a duration string such as "1s" or "250ms"`,
	kindStrings:  "an array of strings",
	kindBool:     "true or false",
}

// schemaKey is one key Config accepts.
type schemaKey struct {
	path    []string // e.g. ["limit", "rate"]
	name    string   // the same, dotted: "limit.rate"
	kind    kind
	index   []int  // the field from Config, or from an element of inArray's array (reflect's FieldByIndex)
	inArray bool   // the key is in an array of tables: "policy.rate"
	reload  string // the field's reload tag: "" changes on reload, else a key of restartRules
}

var (
	schema = buildSchema(reflect.TypeFor[Config](), nil, nil, false) // in struct order
	known  = func() map[string]bool {
		m := make(map[string]bool, len(schema))
		for _, k := range schema {
			m[k.name] = true
		}
		return m
	}()
)

// buildSchema lists the keys of struct type t, a table at parent whose
// field index is index. It panics on a reload tag it cannot honour: on a
// table, on a key in an array of tables, or naming no rule.
func buildSchema(t reflect.Type, parent []string, index []int, inArray bool) []schemaKey {
	var out []schemaKey
	for f := range t.Fields() {
		path := append(parent[:len(parent):len(parent)], f.Tag.Get("toml"))
		k := schemaKey{path: path, name: strings.Join(path, "."), kind: kindOf(f.Type),
			index: append(index[:len(index):len(index)], f.Index...), inArray: inArray, reload: f.Tag.Get("reload")}
		if _, ok := restartRules[k.reload]; k.reload != "" && (!ok || inArray || k.kind == kindTable || k.kind == kindTables) {
			panic(fmt.Sprintf("config: %s: reload tag %q: want one of restartRules, on a key outside arrays of tables", k.name, k.reload))
		}
		out = append(out, k)
		switch k.kind {
		case kindTable:
			out = append(out, buildSchema(f.Type, path, k.index, inArray)...)
		case kindTables:
			out = append(out, buildSchema(f.Type.Elem(), path, nil, true)...)
		}
	}
	return out
}

func kindOf(t reflect.Type) kind {
	switch {
	case t == reflect.TypeFor[Duration]():
		return kindDuration
	case t.Kind() == reflect.Struct:
		return kindTable
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		return kindTables
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		return kindStrings
	case t.Kind() == reflect.String:
		return kindString
	case t.Kind() == reflect.Int:
		return kindInt
	case t.Kind() == reflect.Float64:
		return kindFloat
	case t.Kind() == reflect.Bool:
		return kindBool
	}
	panic("config: no schema kind for " + t.String())
}

// checkUnknown returns an error for the first key of md, in document order,
// that Config does not have.
func checkUnknown(md toml.MetaData, lines []keyLine) *Error {
	seen := map[string]int{}
	for _, k := range md.Keys() {
		name := k.String()
		n := seen[name]
		seen[name]++
		if known[name] {
			continue
		}
		msg := fmt.Sprintf("unknown key %q", name)
		if s := suggest(k); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		return &Error{Line: nthLine(lines, k, n), Key: name, Msg: msg}
	}
	return nil
}

// suggest returns the known key an unknown one most likely meant, or "":
// the same name in another table when the table has no such key (the key
// was put in the wrong table), else a close spelling in the same table.
func suggest(k toml.Key) string {
	parent, last := strings.Join(k[:len(k)-1], "."), strings.ToLower(k[len(k)-1])
	for _, s := range schema {
		if s.path[len(s.path)-1] == last {
			return s.name
		}
	}
	best, bestDist := "", 3
	for _, s := range schema {
		p := s.path[len(s.path)-1]
		if strings.Join(s.path[:len(s.path)-1], ".") != parent {
			continue
		}
		if d := editDistance(last, p); d < bestDist && d < len(p) {
			best, bestDist = s.name, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// checkTypes walks the raw decoded table m against struct type t, in field
// order, and returns an error for the first value of the wrong TOML type.
func checkTypes(m map[string]any, t reflect.Type, path []string, elem int, lines []keyLine) *Error {
	for f := range t.Fields() {
		name := f.Tag.Get("toml")
		v, ok := m[name]
		if !ok {
			continue
		}
		p := append(path[:len(path):len(path)], name)
		label := keyLabel(p, elem)
		bad := func(format string, args ...any) *Error {
			return &Error{Line: lineOf(lines, p, elem), Key: label, Msg: label + fmt.Sprintf(format, args...)}
		}
		k := kindOf(f.Type)
		switch k {
		case kindTable:
			sub, ok := v.(map[string]any)
			if !ok {
				return bad(": must be %s, not %s", what[k], tomlType(v))
			}
			if e := checkTypes(sub, f.Type, p, elem, lines); e != nil {
				return e
			}
		case kindTables:
			elems, ok := tables(v)
			if !ok {
				return bad(": must be %s, not %s", what[k], tomlType(v))
			}
			for i, sub := range elems {
				if e := checkTypes(sub, f.Type.Elem(), p, i, lines); e != nil {
					return e
				}
			}
		case kindStrings:
			arr, ok := v.([]any)
			if !ok {
				return bad(": must be %s, not %s", what[k], tomlType(v))
			}
			for i, s := range arr {
				if _, ok := s.(string); !ok {
					return bad("[%d]: must be a string, not %s", i+1, tomlType(s))
				}
			}
		case kindBool:
			if _, ok := v.(bool); !ok {
				return bad(": must be %s, not %s", what[k], tomlType(v))
			}
		case kindString:
			if _, ok := v.(string); !ok {
				return bad(": must be %s, not %s", what[k], tomlType(v))
			}
		case kindDuration:
			s, ok := v.(string)
			if !ok {
				return bad(": must be %s, not %s", what[k], tomlType(v))
			}
			if _, err := time.ParseDuration(s); err != nil {
				return bad(" = %q: must be %s", s, what[k])
			}
		case kindInt:
			n, ok := v.(int64)
			if !ok {
				return bad(": must be %s, not %s", what[k], tomlType(v))
			}
			if int64(int(n)) != n {
				return bad(" = %d: too large", n)
			}
		case kindFloat:
			switch n := v.(type) {
			case float64:
			case int64:
				if n > 1<<53 || n < -1<<53 {
					return bad(" = %d: too large", n)
				}
			default:
				return bad(": must be %s, not %s", what[k], tomlType(v))
			}
		}
	}
	return nil
}

// tables returns v as a list of tables: [[x]] headers decode to
// []map[string]any, an inline array of tables to []any.
func tables(v any) ([]map[string]any, bool) {
	switch v := v.(type) {
	case []map[string]any:
		return v, true
	case []any:
		out := make([]map[string]any, len(v))
		for i, e := range v {
			m, ok := e.(map[string]any)
			if !ok {
				return nil, false
			}
			out[i] = m
		}
		return out, true
	}
	return nil, false
}

// tomlType names the TOML type of a decoded value, with its article.
func tomlType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case map[string]any:
		return "a table"
	case []map[string]any, []any:
		return "an array"
	}
	return "a date or time"
}

// keyLabel names a key for messages: "limit.rate", or "policy[2].burst"
// inside the second element (elem 1) of an array of tables.
func keyLabel(path []string, elem int) string {
	if elem < 0 || len(path) < 2 {
		return strings.Join(path, ".")
	}
	return fmt.Sprintf("%s[%d].%s", path[0], elem+1, strings.Join(path[1:], "."))
}

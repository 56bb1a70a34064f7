package config

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/shortdur"
)

// This file generates the configuration reference of docs/configuration.md
// from the package itself: every key in the order of Config, its default
// (Default), what it may hold (rules.go), whether a reload changes it (its
// reload tag) and what it is (its field's comment). Regenerate it with
//
//	go test ./internal/config -run TestReferenceIsCurrent -update

var update = flag.Bool("update", false, "rewrite the reference in docs/configuration.md from the package")

// The reference is the part of referencePage between these two lines.
const (
	referencePage  = "../../docs/configuration.md"
	referenceBegin = "<!-- reference: generated from package config by `go test ./internal/config -run TestReferenceIsCurrent -update`; edit the package, not this part -->"
	referenceEnd   = "<!-- end of the generated reference -->"
)

// TestReferenceIsCurrent fails when docs/configuration.md's reference
// differs from what the package says; with -update it rewrites it.
func TestReferenceIsCurrent(t *testing.T) {
	page, err := os.ReadFile(referencePage)
	if err != nil {
		t.Fatal(err)
	}
	text := string(page)
	i, j := strings.Index(text, referenceBegin), strings.Index(text, referenceEnd)
	if i < 0 || j < i {
		t.Fatalf("%s: no %q line followed by a %q line", referencePage, referenceBegin, referenceEnd)
	}
	fresh := text[:i+len(referenceBegin)] + "\n\n" + reference(t) + text[j:]
	if fresh == text {
		return
	}
	if *update {
		if err := os.WriteFile(referencePage, []byte(fresh), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the reference in %s", referencePage)
		return
	}
	got, want := strings.Split(text, "\n"), strings.Split(fresh, "\n")
	n := 0
	for n < len(got) && n < len(want) && got[n] == want[n] {
		n++
	}
	line := func(l []string) string {
		if n < len(l) {
			return l[n]
		}
		return "(end of page)"
	}
	t.Errorf("%s is stale from line %d:\n have %s\n want %s\nregenerate it: go test ./internal/config -run TestReferenceIsCurrent -update",
		referencePage, n+1, line(got), line(want))
}

// reference is the generated part of the page: a table per section.
func reference(t *testing.T) string {
	t.Helper()
	docs := fieldDocs(t)
	byName := map[string]schemaKey{}
	for _, k := range schema {
		byName[k.name] = k
	}
	def := reflect.ValueOf(Default())
	var b strings.Builder
	for sf := range reflect.TypeFor[Config]().Fields() {
		section := sf.Tag.Get("toml")
		header, et := "["+section+"]", sf.Type
		if kindOf(sf.Type) == kindTables {
			header, et = "[["+section+"]]", sf.Type.Elem()
		}
		intro := docs["Config."+sf.Name]
		if r, ok := rules[section]; ok {
			intro += "; " + r.text
		}
		if intro == "" {
			t.Errorf("Config.%s has no comment to describe [%s]", sf.Name, section)
		}
		fmt.Fprintf(&b, "### `%s`\n\n%s.\n\n", header, cell(strings.ToUpper(intro[:1])+intro[1:]))
		b.WriteString("| key | default | allowed | on reload | what |\n|---|---|---|---|---|\n")
		for f := range et.Fields() {
			k := byName[section+"."+f.Tag.Get("toml")]
			r := rules[k.name]
			dflt := r.dflt
			switch {
			case dflt != "":
			case k.inArray:
				dflt = tomlValue(reflect.Zero(f.Type))
			default:
				dflt = tomlValue(def.FieldByIndex(k.index))
			}
			reload := "live"
			if k.reload != "" {
				reload = restartRules[k.reload].doc
			}
			what := docs[et.Name()+"."+f.Name]
			if what == "" {
				t.Errorf("%s.%s (%s) has no comment to describe it", et.Name(), f.Name, k.name)
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", k.name, cell(dflt), cell(allowed(k.kind, r)), cell(reload), cell(what))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// allowed says what a key of kind k may hold under rule r.
func allowed(k kind, r rule) string {
	var parts []string
	if r.span != nil {
		parts = append(parts, r.span.words(k, "", " to "))
	}
	if r.choice != nil {
		parts = append(parts, r.choice.words())
	}
	if r.text != "" {
		parts = append(parts, r.text)
	}
	if k == kindBool && len(parts) == 0 {
		parts = append(parts, "true or false")
	}
	return strings.Join(parts, "; ")
}

// tomlValue writes v as it would be written in dthrottle.toml.
func tomlValue(v reflect.Value) string {
	switch {
	case v.Type() == reflect.TypeFor[Duration]():
		return strconv.Quote(shortdur.Format(v.Interface().(Duration).Duration))
	case v.Kind() == reflect.String:
		return strconv.Quote(v.String())
	case v.Kind() == reflect.Int:
		return strconv.FormatInt(v.Int(), 10)
	case v.Kind() == reflect.Float64:
		s := strconv.FormatFloat(v.Float(), 'f', -1, 64)
		if !strings.ContainsAny(s, ".eE") {
			s += ".0"
		}
		return s
	case v.Kind() == reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case v.Kind() == reflect.Slice:
		vs := make([]string, v.Len())
		for i := range vs {
			vs[i] = tomlValue(v.Index(i))
		}
		return "[" + strings.Join(vs, ", ") + "]"
	}
	panic("config: no TOML form for " + v.Type().String())
}

// codeLike finds what a cell shows as code: a quoted value, a bare TOML
// literal standing alone, and a dotted key name.
var codeLike = regexp.MustCompile(`"[^"]*"|\[[^\]]*\]|\b[a-z_]+\.[a-z_]+\b|^[0-9.]+$|^(true|false)$`)

// cell makes s fit a Markdown table cell, with values and keys as code.
func cell(s string) string {
	s = codeLike.ReplaceAllStringFunc(s, func(m string) string {
		if strings.Contains(m, ".") && !strings.ContainsAny(m, `"[0123456789`) && !known[m] {
			return m // "e.g" and the like
		}
		return "`" + m + "`"
	})
	return strings.ReplaceAll(s, "|", `\|`)
}

// fieldDocs returns the comment of every struct field in the package's
// source, by "Type.Field": the comment above the field, or else the one
// after it on its line, on one line.
func fieldDocs(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	docs := map[string]string{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			if st, ok := ts.Type.(*ast.StructType); ok {
				for _, fld := range st.Fields.List {
					text := fld.Comment.Text()
					if fld.Doc != nil {
						text = fld.Doc.Text()
					}
					for _, id := range fld.Names {
						docs[ts.Name.Name+"."+id.Name] = strings.Join(strings.Fields(text), " ")
					}
				}
			}
			return false
		})
	}
	return docs
}

// TestRulesCoverEveryKey: every key has the rule the reference prints, of
// a form that fits its kind, and every rule names a key.
func TestRulesCoverEveryKey(t *testing.T) {
	for _, k := range schema {
		r, ok := rules[k.name]
		switch {
		case k.kind == kindTable:
			if ok {
				t.Errorf("rules has a rule for the table %s", k.name)
			}
		case !ok && k.kind != kindBool && k.kind != kindTables:
			t.Errorf("%s has no rule in rules.go", k.name)
		case r.span != nil && k.kind != kindInt && k.kind != kindFloat && k.kind != kindDuration:
			t.Errorf("%s: a span on a key that holds %s", k.name, what[k.kind])
		case r.choice != nil && k.kind != kindString && !(k.kind == kindInt && r.choice.ints):
			t.Errorf("%s: a choice on a key that holds %s", k.name, what[k.kind])
		}
	}
	for name := range rules {
		if !known[name] {
			t.Errorf("rules has a rule for %s, which Config does not have", name)
		}
	}
}

// TestRulesAreChecked: Validate accepts each span's bounds and each
// choice's values, and rejects, naming the key, a value just outside the
// span or outside the choice. So the reference cannot print a range that
// Validate does not check.
func TestRulesAreChecked(t *testing.T) {
	for _, k := range schema {
		r := rules[k.name]
		check := func(label string, set func(reflect.Value), valid bool) {
			t.Helper()
			c := Default()
			c.Gossip.Group = "239.1.2.3:7777" // relay modes "use" and "serve" need one
			v := reflect.ValueOf(&c).Elem()
			perForm := k.path[len(k.path)-1] == "limit" || k.path[len(k.path)-1] == "per"
			if k.inArray {
				c.Policy = []Policy{{Prefix: "p:", Rate: 1, Burst: 1}}
				if perForm { // the rate as limit per period: one a second
					c.Policy[0] = Policy{Prefix: "p:", Limit: 1, Per: Duration{time.Second}}
				}
				v = v.FieldByIndex([]int{fieldIndex(t, "Policy")}).Index(0)
			} else if perForm {
				c.Limit.Rate, c.Limit.Burst, c.Limit.Limit, c.Limit.Per = 0, 0, 1, Duration{time.Second}
			}
			set(v.FieldByIndex(k.index))
			err := c.Validate()
			e, _ := err.(*Error)
			switch {
			case valid && err != nil:
				t.Errorf("%s = %s: Validate() = %v, want nil", k.name, label, err)
			case !valid && (e == nil || strings.Join(e.path, ".") != k.name):
				t.Errorf("%s = %s: Validate() = %v, want an error naming %s", k.name, label, err, k.name)
			}
		}
		if s := r.span; s != nil {
			for _, tc := range []struct {
				x     float64
				valid bool
			}{{s.lo, true}, {s.hi, true}, {below(k.kind, s.lo), false}, {above(k.kind, s.hi), false}} {
				check(strconv.FormatFloat(tc.x, 'g', -1, 64), func(v reflect.Value) { setNumber(v, k.kind, tc.x) }, tc.valid)
			}
		}
		if c := r.choice; c != nil {
			for _, x := range append(c.values, "0") {
				valid := x != "0"
				check(x, func(v reflect.Value) {
					if v.Kind() == reflect.Int {
						n, _ := strconv.Atoi(x)
						v.SetInt(int64(n))
						return
					}
					v.SetString(x)
				}, valid)
			}
		}
	}
}

func fieldIndex(t *testing.T, name string) int {
	f, ok := reflect.TypeFor[Config]().FieldByName(name)
	if !ok {
		t.Fatalf("Config has no field %s", name)
	}
	return f.Index[0]
}

// below and above return the value of kind k next to x outside a span.
func below(k kind, x float64) float64 {
	if k == kindFloat {
		return math.Nextafter(x, math.Inf(-1))
	}
	return x - 1
}

func above(k kind, x float64) float64 {
	if k == kindFloat {
		return math.Nextafter(x, math.Inf(1))
	}
	return math.Max(x+1, math.Nextafter(x, math.Inf(1))) // past 2^53 (a year in nanoseconds) x+1 is x
}

func setNumber(v reflect.Value, k kind, x float64) {
	switch k {
	case kindInt:
		v.SetInt(int64(x))
	case kindFloat:
		v.SetFloat(x)
	case kindDuration:
		v.Set(reflect.ValueOf(Duration{time.Duration(x)}))
	}
}

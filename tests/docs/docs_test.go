package docs

import (
	"bytes"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// This file checks the manual itself, README.md and docs/: links and
// anchors resolve, every test or benchmark a page names beside an example
// exists, and the wire format's byte dumps are the golden files the tests
// of internal/gossip/wire encode and decode.

// docPage is one Markdown page of the manual, its path relative to the
// repository's root.
type docPage struct {
	path string
	text string
}

// docPages returns README.md and every page under docs/.
func docPages(t *testing.T) []docPage {
	t.Helper()
	paths := []string{"README.md"}
	err := filepath.WalkDir("../../docs", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			paths = append(paths, strings.TrimPrefix(p, "../../"))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var pages []docPage
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join("..", "..", p))
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, docPage{p, string(b)})
	}
	return pages
}

// prose returns the page's lines outside fenced code blocks, each with its
// 1-based number.
func (p docPage) prose() map[int]string {
	lines := map[int]string{}
	fenced := false
	for i, l := range strings.Split(p.text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			lines[i+1] = l
		}
	}
	return lines
}

var (
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdHeading  = regexp.MustCompile(`^#{1,6} +(.*)$`)
	htmlAnchor = regexp.MustCompile(`<a (?:id|name)="([^"]+)"`)
	notInSlug  = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// anchors returns the anchors of a page's headings, as GitHub makes them:
// lower case, punctuation dropped, spaces made hyphens, "-1" and so on
// after a repeated one; and those a page sets itself, <a id="x"></a>.
func anchors(p docPage) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, l := range strings.Split(p.text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
		}
		if fenced {
			continue
		}
		for _, a := range htmlAnchor.FindAllStringSubmatch(l, -1) {
			out[a[1]] = true
		}
		m := mdHeading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		slug := strings.ReplaceAll(notInSlug.ReplaceAllString(strings.ToLower(strings.TrimSpace(m[1])), ""), " ", "-")
		if n := seen[slug]; n > 0 {
			seen[slug]++
			slug += "-" + strconv.Itoa(n)
		} else {
			seen[slug] = 1
		}
		out[slug] = true
	}
	return out
}

// TestDocsLinks: every relative link of the manual names a file or
// directory of the repository, and every anchor a heading of its page.
func TestDocsLinks(t *testing.T) {
	pages := docPages(t)
	byPath := map[string]docPage{}
	for _, p := range pages {
		byPath[p.path] = p
	}
	for _, p := range pages {
		for n, l := range p.prose() {
			for _, m := range mdLink.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				path := p.path
				if file != "" {
					path = filepath.Clean(filepath.Join(filepath.Dir(p.path), file))
				}
				if strings.HasPrefix(path, "..") {
					t.Errorf("%s:%d: %s leaves the repository", p.path, n, target)
					continue
				}
				if _, err := os.Stat(filepath.Join("..", "..", path)); err != nil {
					t.Errorf("%s:%d: %s: no such file", p.path, n, target)
					continue
				}
				if anchor == "" {
					continue
				}
				dst, ok := byPath[path]
				if !ok {
					t.Errorf("%s:%d: %s: an anchor into a page that is not part of the manual", p.path, n, target)
				} else if !anchors(dst)[anchor] {
					t.Errorf("%s:%d: %s: %s has no heading with that anchor", p.path, n, target, path)
				}
			}
		}
	}
}

// TestDocsNamedTestsExist: every test, benchmark or fuzz target a page
// names (as TestX, or the start of a name given to -run or -bench, such as
// BenchmarkDecision) is the start of a function in a _test.go file of the
// repository, so an example never names a test that is gone.
func TestDocsNamedTestsExist(t *testing.T) {
	funcs := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)\w*)\(`)
	err := filepath.WalkDir("../..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllSubmatch(b, -1) {
			funcs[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`\b(?:Test|Benchmark|Fuzz)[A-Z0-9]\w*`)
	for _, p := range docPages(t) {
		for n, l := range strings.Split(p.text, "\n") {
			for _, name := range named.FindAllString(l, -1) {
				found := false
				for f := range funcs {
					if strings.HasPrefix(f, name) {
						found = true
						break
					}
				}
				if !found {
					t.Errorf("%s:%d: names %s, which no test, benchmark or fuzz target is", p.path, n+1, name)
				}
			}
		}
	}
}

// TestDocsWireVectors: each byte dump in docs/wire-format.md is the golden
// file the paragraph before it names, and every golden file is shown.
func TestDocsWireVectors(t *testing.T) {
	const page = "../../docs/wire-format.md"
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	golden := regexp.MustCompile("`internal/gossip/wire/testdata/(golden[a-z_]*\\.hex)`")
	gap := regexp.MustCompile(`\s{2,}`)
	shown := map[string]bool{}
	for _, m := range golden.FindAllStringSubmatchIndex(text, -1) {
		name := text[m[2]:m[3]]
		rest := text[m[1]:]
		start := strings.Index(rest, "```\n")
		if start < 0 {
			t.Errorf("%s: no byte dump after %s", page, name)
			continue
		}
		block := rest[start+4:]
		block = block[:strings.Index(block, "```")]
		var dump []byte
		for _, l := range strings.Split(strings.TrimSpace(block), "\n") {
			data := gap.Split(l, 2)[0] // the bytes, then two or more spaces and the comment
			for _, h := range strings.Fields(data) {
				v, err := hex.DecodeString(h)
				if err != nil || len(v) != 1 {
					t.Fatalf("%s: dump of %s: %q in line %q is not a byte", page, name, h, l)
				}
				dump = append(dump, v...)
			}
		}
		want, err := os.ReadFile(filepath.Join("../../internal/gossip/wire/testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		wantBytes, err := hex.DecodeString(strings.Join(strings.Fields(string(want)), ""))
		if err != nil {
			t.Fatalf("internal/gossip/wire/testdata/%s: %v", name, err)
		}
		if !bytes.Equal(dump, wantBytes) {
			t.Errorf("%s: the dump after %s differs from that file:\n%x\nwant\n%x", page, name, dump, wantBytes)
		}
		shown[name] = true
	}
	files, err := filepath.Glob("../../internal/gossip/wire/testdata/golden*.hex")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !shown[filepath.Base(f)] {
			t.Errorf("%s shows no dump of internal/gossip/wire/testdata/%s", page, filepath.Base(f))
		}
	}
}

package docs

import (
	"errors"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// codeMapHeading opens the section of docs/design.md that maps the tree.
const codeMapHeading = "## Where the code lives"

// TestCodeMap: the table of docs/design.md's "Where the code lives" names
// every folder of the tree, and names nothing that is not there. A folder
// is one that holds a file git tracks, but testdata and what is below it;
// the table names it by its path in backticks in the first column (one
// cell may name several, comma separated), or names a file directly in it
// (`.ci/run`). A file the table names must exist.
func TestCodeMap(t *testing.T) {
	page, err := os.ReadFile("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	named, err := codeMapPaths(string(page))
	if err != nil {
		t.Fatal(err)
	}
	files := trackedFiles(t, "../..")
	exists := func(p string) bool {
		_, err := os.Stat(filepath.Join("../..", filepath.FromSlash(p)))
		return err == nil
	}
	for _, p := range checkCodeMap(named, folders(files), exists) {
		t.Errorf("docs/design.md, %s: %s", codeMapHeading[3:], p)
	}
}

// TestCodeMapCheck holds checkCodeMap to what TestCodeMap promises, on a
// tree and tables made up for it.
func TestCodeMapCheck(t *testing.T) {
	tree := []string{"go.mod", "dthrottle.toml", ".ci/run", "cmd/dthrottled/main.go",
		"internal/gossip/wire/wire.go", "internal/gossip/wire/testdata/a.hex",
		"internal/gossip/wire/testdata/more/b.hex", "contrib/nginx/x.conf", "contrib/haproxy/y.cfg"}
	exists := func(p string) bool {
		for _, f := range tree {
			if f == p || strings.HasPrefix(f, p+"/") {
				return true
			}
		}
		return false
	}
	whole := "intro\n\n" + codeMapHeading + "\n\n| path | owns |\n|---|---|\n" +
		"| `cmd`, `internal/gossip/wire/testdata/more` | commands |\n| `cmd/dthrottled` | the daemon |\n" +
		"| `internal`, `internal/gossip` | parts |\n" +
		"| `internal/gossip/wire` | the datagrams, `not/a/path` in the second column |\n" +
		"| `contrib`, `contrib/nginx`, `contrib/haproxy` | servers |\n" +
		"| `.ci/run` | CI |\n| `dthrottle.toml` | the example |\n\n## Next\n\n| `elsewhere` | x |\n"
	for _, c := range []struct {
		name, table string
		want        []string
	}{
		{"whole", whole, nil},
		{"a folder removed", strings.Replace(whole, "`contrib/nginx`, ", "", 1), []string{"contrib/nginx: a folder the table does not name"}},
		{"a row removed", strings.Replace(whole, "| `cmd/dthrottled` | the daemon |\n", "", 1), []string{"cmd/dthrottled: a folder the table does not name"}},
		{"a bogus path", strings.Replace(whole, "`internal/gossip/wire`", "`internal/gossip/wire`, `internal/gossip/wires`", 1), []string{"internal/gossip/wires: named, but no such file or folder"}},
		{"a file gone", strings.Replace(whole, "`dthrottle.toml`", "`dthrottled.toml`", 1), []string{"dthrottled.toml: named, but no such file or folder"}},
	} {
		named, err := codeMapPaths(c.table)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := checkCodeMap(named, folders(tree), exists)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
	if _, err := codeMapPaths("# design\n\nno map\n"); err == nil {
		t.Error("a page without the section: no error")
	}
}

// codeMapPaths returns the paths the first column of the table under
// codeMapHeading names, in backticks.
func codeMapPaths(page string) ([]string, error) {
	_, section, ok := strings.Cut(page, "\n"+codeMapHeading+"\n")
	if !ok {
		return nil, errors.New("no section " + codeMapHeading)
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	tick := regexp.MustCompile("`([^`]+)`")
	var paths []string
	rows := 0
	for _, line := range strings.Split(section, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		rows++
		if rows <= 2 { // the header and the line under it
			continue
		}
		for _, m := range tick.FindAllStringSubmatch(cells[0], -1) {
			paths = append(paths, path.Clean(strings.TrimSuffix(m[1], "/")))
		}
	}
	if len(paths) == 0 {
		return nil, errors.New("no paths in the table under " + codeMapHeading)
	}
	return paths, nil
}

// checkCodeMap returns what is wrong with a table naming named, for a
// tree of folders where exists tells whether a path is there: the folders
// it does not name, then the paths it names that are not there.
func checkCodeMap(named, folders []string, exists func(string) bool) []string {
	covered := map[string]bool{}
	for _, p := range named {
		covered[p] = true
		if exists(p) && !slices.Contains(folders, p) {
			covered[path.Dir(p)] = true // a file names its folder
		}
	}
	var problems []string
	for _, f := range folders {
		if !covered[f] {
			problems = append(problems, f+": a folder the table does not name")
		}
	}
	for _, p := range named {
		if !exists(p) {
			problems = append(problems, p+": named, but no such file or folder")
		}
	}
	return problems
}

// folders returns, sorted, the folders holding files (slash-separated
// paths from the root), and every folder above them, but the root and
// anything in or below a folder named testdata.
func folders(files []string) []string {
	seen := map[string]bool{}
	for _, f := range files {
		if slices.Contains(strings.Split(f, "/"), "testdata") {
			// Only testdata and below are left out: the folders above it
			// still count, through their own files or this one.
			f = f[:strings.Index("/"+f+"/", "/testdata/")]
			if f == "" {
				continue
			}
			f += "/x"
		}
		for d := path.Dir(f); d != "."; d = path.Dir(d) {
			seen[d] = true
		}
	}
	out := make([]string, 0, len(seen))
	for d := range seen {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// trackedFiles returns the files git tracks under root, slash-separated;
// outside a git checkout, every file below root but .git.
func trackedFiles(t *testing.T, root string) []string {
	t.Helper()
	if git, err := exec.LookPath("git"); err == nil {
		cmd := exec.Command(git, "ls-files", "-z")
		cmd.Dir = root
		if out, err := cmd.Output(); err == nil {
			return strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
		}
	}
	var files []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Name() == ".git" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

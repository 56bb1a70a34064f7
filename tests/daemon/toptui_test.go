package daemon

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/tests/harness"
)

// fakeTopAdmin is an admin endpoint serving /v1/top (its by and scope as
// asked) and /v1/stats (100 more queries each time, 1 s later), on
// loopback. It records the /v1/top queries.
type fakeTopAdmin struct {
	*httptest.Server
	mu      sync.Mutex
	queries []string
	stats   int
}

func startFakeTopAdmin(t *testing.T) *fakeTopAdmin {
	t.Helper()
	a := &fakeTopAdmin{}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		a.mu.Lock()
		defer a.mu.Unlock()
		switch r.URL.Path {
		case "/v1/top":
			a.queries = append(a.queries, r.URL.RawQuery)
			q := r.URL.Query()
			by, scope := q.Get("by"), q.Get("scope")
			fmt.Fprintf(w, `{"by":%q,"scope":%q,"window_seconds":60,"nodes":3,"policies":[
 {"policy":"default","total":1000,"bound":4,"tags":[{"tag":"%s-10.0.0.1","count":500,"error":0},{"tag":"\u001b[2J\u001b]0;owned\u0007","count":90,"error":4}]},
 {"policy":"login","total":200,"bound":0,"tags":[{"tag":"login:<script>","count":150,"error":1}]}]}`, by, scope, by)
		case "/v1/stats":
			a.stats++
			n := a.stats
			fmt.Fprintf(w, `{"version":"v1","uptime_seconds":%d,"tags":1234,"queries":{"total":%d,"ok":%d,"no":%d},
 "policies":[{"name":"default","action":"limit","ok":1,"no":1},{"name":"login","action":"limit","ok":1,"no":1}],
 "gossip":{"enabled":true,"node":"0102030405060708","peers":2}}`, n, 100*n, 80*n, 20*n)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *fakeTopAdmin) lastQuery() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.queries) == 0 {
		return ""
	}
	return a.queries[len(a.queries)-1]
}

// awaitQuery waits, at most 5 s, for top's last query to be want: the
// view may draw what a key changed before it asks again.
func (a *fakeTopAdmin) awaitQuery(t *testing.T, after, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for a.lastQuery() != want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if q := a.lastQuery(); q != want {
		t.Errorf("after %s: asked %q, want %q", after, q, want)
	}
}

// tmuxPane is a shell in a detached tmux session on a server of the
// test's own.
type tmuxPane struct {
	t    *testing.T
	tmux string
	sock string
}

// prompt is the pane's shell prompt.
const prompt = "toptest$ "

func startPane(t *testing.T, width, height int) *tmuxPane {
	t.Helper()
	p := &tmuxPane{t: t, tmux: harness.RequireTool(t, "tmux"), sock: filepath.Join(t.TempDir(), "tmux.sock")}
	p.run("-f", "/dev/null", "new-session", "-d", "-s", "top", "-x", strconv.Itoa(width), "-y", strconv.Itoa(height),
		"env", "PS1="+prompt, "ENV=", "sh")
	t.Cleanup(func() { exec.Command(p.tmux, "-S", p.sock, "kill-server").Run() })
	p.await("the shell's prompt", atPrompt)
	return p
}

func (p *tmuxPane) run(args ...string) string {
	p.t.Helper()
	out, err := exec.Command(p.tmux, append([]string{"-S", p.sock}, args...)...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// send types text literally, then Enter if enter is set.
func (p *tmuxPane) send(text string, enter bool) {
	p.t.Helper()
	p.run("send-keys", "-t", "top", "-l", text)
	if enter {
		p.run("send-keys", "-t", "top", "Enter")
	}
}

func (p *tmuxPane) screen() string {
	p.t.Helper()
	return p.run("capture-pane", "-p", "-t", "top")
}

// await polls the screen until cond holds, for up to 10 s, and returns it.
func (p *tmuxPane) await(what string, cond func(screen string) bool) string {
	p.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := p.screen()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("waited 10s for %s; the screen:\n%s", what, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// atPrompt says whether the shell waits for a command: the screen's last
// line is its prompt (capture-pane drops the trailing space).
func atPrompt(screen string) bool {
	return strings.HasSuffix(strings.TrimRight(screen, "\n "), strings.TrimSpace(prompt))
}

func contains(subs ...string) func(string) bool {
	return func(s string) bool {
		for _, sub := range subs {
			if !strings.Contains(s, sub) {
				return false
			}
		}
		return true
	}
}

// TestTopInTerminal drives `dthrottle top` in a real terminal (tmux): the
// header and the table, s and c changing what is asked, q quitting with
// the terminal as it was; then SIGTERM, with the same; then a narrow
// terminal.
func TestTopInTerminal(t *testing.T) {
	a := startFakeTopAdmin(t)
	cli := harness.CLIBinary(t)
	dir := t.TempDir()
	p := startPane(t, 120, 40)
	before := filepath.Join(dir, "before")
	p.send("stty -g > "+before, true)
	p.await("stty", func(string) bool { return harness.FileExists(before) })

	after := filepath.Join(dir, "after")
	p.send(fmt.Sprintf("%s top -admin %s -interval 200ms; echo EXIT=$?; stty -g > %s", cli, a.URL, after), true)
	s := p.await("the header and the table", contains(
		"dthrottle top: most refused tags, cluster (3 nodes), last 1m0s, all policies",
		"decisions 100/s, refusals 20/s (20.0%), 2 peers, 1234 tags tracked",
		"REFUSED  ±ERROR   SHARE  POLICY   TAG",
		`    500       0   50.0%  default  "refused-10.0.0.1"`,
		`     90       4    9.0%  default  "\x1b[2J\x1b]0;owned\a"`,
		"q quit  s refused/served"))
	if strings.Contains(s, "EXIT=") || !strings.Contains(s, `"login:<script>"`) {
		t.Fatalf("screen:\n%s", s)
	}

	p.send("s", false)
	p.await("the served tags", contains("most served tags", "\nSERVED  ±ERROR", `"served-10.0.0.1"`))
	a.awaitQuery(t, "s", "by=served&n=20&scope=cluster")
	p.send("c", false)
	p.await("this node's tags", contains("most served tags, node, last"))
	a.awaitQuery(t, "c", "by=served&n=20&scope=node")
	p.send("p", false)
	p.await("one policy", contains(`policy "default"`))
	p.send("/login\r", false)
	p.await("the policy typed", contains(`policy "login"`))
	a.awaitQuery(t, "/login", "by=served&n=20&policy=login&scope=node")

	p.send("q", false)
	s = p.await("top to exit", contains("EXIT=0"))
	if strings.Contains(s, "dthrottle top:") || strings.Contains(s, "q quit") {
		t.Errorf("the view stayed on the screen after q:\n%s", s)
	}
	p.await("the prompt", atPrompt)
	sameTerminal(t, before, after)

	// SIGTERM restores the terminal too.
	pidFile, afterTerm := filepath.Join(dir, "pid"), filepath.Join(dir, "after-term")
	p.send(fmt.Sprintf(`sh -c 'echo $$ > %s; exec %s top -admin %s -interval 200ms'; echo EXIT2=$?; stty -g > %s`,
		pidFile, cli, a.URL, afterTerm), true)
	p.await("the header", contains("dthrottle top: most refused tags"))
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	s = p.await("top to exit on SIGTERM", contains("EXIT2=0"))
	if strings.Contains(s, "q quit") {
		t.Errorf("the view stayed on the screen after SIGTERM:\n%s", s)
	}
	p.await("stty", func(string) bool { return harness.FileExists(afterTerm) })
	sameTerminal(t, before, afterTerm)

	// A narrow terminal: every line cut to its width, redrawn when it
	// changes size.
	p.send(fmt.Sprintf("%s top -admin %s -interval 200ms", cli, a.URL), true)
	p.await("the header", contains("dthrottle top: most refused tags"))
	p.run("resize-window", "-t", "top", "-x", "40", "-y", "12")
	s = p.await("the view cut to 40 columns", contains(
		"dthrottle top: most refused tags, clust…",
		"REFUSED  POLICY   TAG",
		`    500  default  "refused-10.0.0.1"`,
		`     90  default  "\x1b[2J\x1b]0;owned\…`,
		"q quit  s refused/served  c cluster/nod…"))
	for _, line := range strings.Split(s, "\n") {
		if n := len([]rune(line)); n > 40 {
			t.Errorf("line of %d columns in a 40-column terminal: %q", n, line)
		}
	}
	p.send("q", false)
	p.await("the prompt", atPrompt)
}

// sameTerminal fails unless the `stty -g` settings saved in the files a
// and b are the same.
func sameTerminal(t *testing.T, a, b string) {
	t.Helper()
	var got [2][]byte
	for i, f := range []string{a, b} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			data, err := os.ReadFile(f)
			if err == nil && bytes.HasSuffix(data, []byte("\n")) {
				got[i] = data
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no terminal settings in %s: %v", f, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if !bytes.Equal(got[0], got[1]) {
		t.Errorf("terminal settings not restored:\nbefore %s after  %s", got[0], got[1])
	}
}

// TestCLITopOnce runs `dthrottle top -once` as a script would.
func TestCLITopOnce(t *testing.T) {
	a := startFakeTopAdmin(t)
	code, out, errs := harness.RunCLI(t, "", "top", "-once", "-admin", strings.TrimPrefix(a.URL, "http://"), "-by", "served", "-n", "5")
	want := `dthrottle top: most served tags, cluster (3 nodes), last 1m0s, all policies
decisions 100 since start, refusals 20 (20.0%), 2 peers, 1234 tags tracked

SERVED  ±ERROR   SHARE  POLICY   TAG
   500       0   50.0%  default  "served-10.0.0.1"
   150       1   75.0%  login    "login:<script>"
    90       4    9.0%  default  "\x1b[2J\x1b]0;owned\a"
`
	if code != 0 || out != want {
		t.Errorf("dthrottle top -once: exit %d, stderr %q, output:\n%s\nwant:\n%s", code, errs, out, want)
	}
	if q := a.lastQuery(); q != "by=served&n=5&scope=cluster" {
		t.Errorf("asked %q", q)
	}
	if strings.ContainsRune(out, 0x1b) {
		t.Error("an escape character reached the output")
	}
}

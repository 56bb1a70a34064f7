package daemon

import (
	"bufio"
	"bytes"
	"context"
	"image/png"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/tests/harness"
	"golang.org/x/net/html"
)

// scriptTag is a tag that would run in a page that did not escape it.
const scriptTag = "<script>alert(1)</script>"

// TestStatusPageInBrowser loads the admin endpoint's status page in a
// real headless Chromium while the daemon refuses queries, one of them
// for a tag that is an HTML script: the page draws its charts and fills
// its tables, and shows that tag as text, never as a script.
func TestStatusPageInBrowser(t *testing.T) {
	chromium := harness.RequireTool(t, "chromium")
	d := harness.StartDaemon(t, `
[listen]
unix = "%SOCK%"
[limit]
rate = 0.001
burst = 2
[[policy]]
name = "login"
prefix = "login:"
rate = 0.001
burst = 1
[admin]
http = "127.0.0.1:0"
`)
	addr := d.AdminAddr(t)
	page := "http://" + addr + "/"

	// Refused queries until the charts have a point with them: the
	// history samples every 5 s, so this takes two samples.
	conn, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	answers := bufio.NewReader(conn)
	ask := func(tags ...string) {
		for _, tag := range tags {
			if _, err := conn.Write([]byte(tag + "\n")); err != nil {
				t.Fatal(err)
			}
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := answers.ReadString('\n'); err != nil {
				t.Fatal(err)
			}
		}
	}
	testkit.WaitFor(t, 40*time.Second, "the status page to chart refusals", func() bool {
		ask(scriptTag, scriptTag, scriptTag, "login:x", "login:x", "a")
		code, body := harness.HTTPDo(t, http.MethodGet, page)
		return code == http.StatusOK && strings.Contains(body, `<polyline class="s0"`)
	})
	// The heaviest tags come through Sources.Top, from the daemon's counts.
	testkit.WaitFor(t, 20*time.Second, "the status page to list the most refused tags", func() bool {
		_, body := harness.HTTPDo(t, http.MethodGet, page)
		return strings.Contains(body, `<table id="top">`) && strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;")
	})

	dir := t.TempDir()
	run := func(args ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		profile, err := os.MkdirTemp(dir, "profile")
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(ctx, chromium, append([]string{
			"--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=" + profile,
			"--no-first-run", "--no-default-browser-check", "--disable-extensions",
			"--disable-background-networking", "--disable-component-update", "--disable-sync",
			"--disable-default-apps", "--metrics-recording-only", "--hide-scrollbars",
			// Loopback only: anything else goes to a proxy that is not
			// there, and no name resolves.
			"--proxy-server=http://127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
			"--window-size=1200,1600",
		}, args...)...)
		cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_CACHE_HOME="+dir)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("chromium %v: %v\n%s", args, err, errb.String())
		}
		return out.Bytes()
	}

	shot := filepath.Join(dir, "status.png")
	run("--screenshot="+shot, page)
	checkScreenshot(t, shot)

	dom := string(run("--dump-dom", page))
	doc, err := html.Parse(strings.NewReader(dom))
	if err != nil {
		t.Fatalf("parsing the dumped DOM: %v", err)
	}
	els := map[string][]*html.Node{}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			els[n.Data] = append(els[n.Data], n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	if n := len(els["script"]); n != 0 || strings.Contains(strings.ToLower(dom), "<script") {
		t.Errorf("the DOM holds %d <script> elements:\n%s", n, dom)
	}
	if n := len(els["svg"]); n != 2 {
		t.Errorf("%d <svg> charts in the DOM, want 2", n)
	}
	if n := len(els["polyline"]); n < 2 {
		t.Errorf("%d lines drawn, want at least one per chart", n)
	}
	tables := map[string]string{}
	for _, n := range els["table"] {
		tables[attr(n, "id")] = nodeText(n)
	}
	for _, want := range []string{"default", "login", "limit"} {
		if !strings.Contains(tables["policies"], want) {
			t.Errorf("policies table lacks %q: %q", want, tables["policies"])
		}
	}
	if !strings.Contains(tables["top"], scriptTag) || !strings.Contains(tables["top"], "login:x") {
		t.Errorf("most refused tags table lacks %q and login:x: %q", scriptTag, tables["top"])
	}
	shown := false
	for _, td := range els["td"] {
		shown = shown || attr(td, "class") == "tag" && nodeText(td) == scriptTag
	}
	if !shown || !strings.Contains(dom, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("the tag %q is not shown as text in a table cell", scriptTag)
	}
}

// checkScreenshot checks that path is a 1200x1600 PNG with something
// drawn on it: many colours, and a good part of it not background.
func checkScreenshot(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	b := img.Bounds()
	if b.Dx() != 1200 || b.Dy() != 1600 {
		t.Errorf("screenshot is %dx%d, want 1200x1600", b.Dx(), b.Dy())
	}
	colours := map[[3]uint32]bool{}
	inked := 0
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colours[[3]uint32{r >> 8, g >> 8, bl >> 8}] = true
			if r>>8 < 200 || g>>8 < 200 || bl>>8 < 200 {
				inked++
			}
		}
	}
	if len(colours) < 16 || inked < 2000 {
		t.Errorf("screenshot %s looks blank: %d colours, %d dark pixels sampled", path, len(colours), inked)
	}
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func nodeText(n *html.Node) string {
	var b strings.Builder
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

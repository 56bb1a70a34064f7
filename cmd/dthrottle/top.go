package main

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dthrottle/dthrottle/api"
)

// top shows the heaviest tags, as top(1) shows processes: live in the
// terminal, or once on stdout with -once.
func top(args []string, e env) int {
	fs := newFlags("top", e)
	addr := fs.String("admin", defaultAdmin, "the daemon's admin endpoint, `host:port` or a URL")
	by := fs.String("by", "refused", "rank tags by the queries `refused` or served")
	scope := fs.String("scope", "cluster", "count over the whole `cluster` or this node only")
	policy := fs.String("policy", "", "show only this `policy` (all when empty)")
	n := fs.Int("n", 20, "tags per policy, 1 to 100")
	interval := fs.Duration("interval", 2*time.Second, "time between refreshes")
	once := fs.Bool("once", false, "print one table on stdout and exit, for scripts")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return fail(e, fmt.Errorf("top: unexpected argument %q", fs.Arg(0)))
	}
	switch {
	case *by != "refused" && *by != "served":
		return fail(e, fmt.Errorf("top: -by %q: must be refused or served", *by))
	case *scope != "cluster" && *scope != "node":
		return fail(e, fmt.Errorf("top: -scope %q: must be cluster or node", *scope))
	case *n < 1 || *n > 100:
		return fail(e, fmt.Errorf("top: -n %d: must be from 1 to 100", *n))
	case *interval < 100*time.Millisecond:
		return fail(e, fmt.Errorf("top: -interval %s: must be at least 100ms", *interval))
	}
	base := strings.TrimSuffix(*addr, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	v := &topView{base: base, addr: *addr, by: *by, scope: *scope, policy: *policy, n: *n}
	if *once {
		r := v.fetch(v.params())
		if r.err != nil {
			return fail(e, r.err)
		}
		v.apply(r)
		for _, line := range v.frame(e.now(), 0, 0, false) {
			fmt.Fprintln(e.stdout, line)
		}
		return exitOK
	}
	in, inOK := e.stdin.(*os.File)
	out, outOK := e.stdout.(*os.File)
	if !inOK || !outOK || !isTerminal(in) || !isTerminal(out) {
		return fail(e, errors.New("top: not a terminal: use -once to print the table"))
	}
	if err := v.live(in, out, *interval, e.now); err != nil {
		return fail(e, err)
	}
	return exitOK
}

// topView is what the live view shows and how: the query it asks, the
// last answers, and the line being typed after "/". It is used by one
// goroutine.
type topView struct {
	base, addr        string // the admin URL, and the address as given
	by, scope, policy string
	n                 int

	top        *api.Top
	stats      *api.Stats
	prev       *api.Stats // the answer before stats, for rates
	err        error
	updated    time.Time
	typing     bool   // after "/": the keys spell a policy
	typed      []byte // what was typed
	keyPending []byte // the start of an escape sequence split across reads
}

// topParams is the query of one fetch.
type topParams struct{ by, scope, policy string }

func (v *topView) params() topParams { return topParams{v.by, v.scope, v.policy} }

// topResult is the answer to one fetch.
type topResult struct {
	p     topParams
	top   api.Top
	stats api.Stats
	err   error
}

// fetch reads /v1/top and /v1/stats.
func (v *topView) fetch(p topParams) topResult {
	q := url.Values{"by": {p.by}, "scope": {p.scope}, "n": {strconv.Itoa(v.n)}}
	if p.policy != "" {
		q.Set("policy", p.policy)
	}
	r := topResult{p: p}
	if r.err = fetch("GET", v.base+"/v1/top?"+q.Encode(), &r.top); r.err == nil {
		r.err = fetch("GET", v.base+"/v1/stats", &r.stats)
	}
	return r
}

// apply takes a fetch's answer, unless the query changed since it left.
func (v *topView) apply(r topResult) {
	if r.p != v.params() {
		return
	}
	if r.err != nil {
		v.err = r.err
		return
	}
	v.err = nil
	if v.stats != nil && r.stats.UptimeSeconds > v.stats.UptimeSeconds {
		v.prev = v.stats
	} else {
		v.prev = nil // the first answer, or the daemon restarted
	}
	v.top, v.stats = &r.top, &r.stats
}

// key acts on one key of the live view and reports whether to quit.
func (v *topView) key(k byte) (quit bool) {
	if k == 3 { // ^C: quit whatever the mode
		return true
	}
	if v.typing {
		switch {
		case k == '\r' || k == '\n':
			v.typing = false
			v.setPolicy(string(v.typed))
		case k == 27: // Esc
			v.typing = false
		case k == 127 || k == 8: // Backspace
			if len(v.typed) > 0 {
				_, size := utf8.DecodeLastRune(v.typed)
				v.typed = v.typed[:len(v.typed)-size]
			}
		case k == 21: // ^U
			v.typed = v.typed[:0]
		case k >= ' ' && len(v.typed) < 200:
			v.typed = append(v.typed, k)
		}
		return false
	}
	switch k {
	case 'q':
		return true
	case 's':
		v.by, v.top = other(v.by, "refused", "served"), nil
	case 'c':
		v.scope, v.top = other(v.scope, "cluster", "node"), nil
	case 'p':
		names := v.policyNames()
		i := slices.Index(names, v.policy) // -1 for all (or one gone)
		if i+1 < len(names) {
			v.setPolicy(names[i+1])
		} else {
			v.setPolicy("")
		}
	case '/':
		v.typing, v.typed = true, v.typed[:0]
	}
	return false
}

// other is b when s is a, else a.
func other(s, a, b string) string {
	if s == a {
		return b
	}
	return a
}

func (v *topView) setPolicy(p string) {
	if p != v.policy {
		v.policy, v.top = p, nil
	}
}

// policyNames are the daemon's policies, in its order, from the last
// /v1/stats.
func (v *topView) policyNames() []string {
	if v.stats == nil {
		return nil
	}
	names := make([]string, len(v.stats.Policies))
	for i, p := range v.stats.Policies {
		names[i] = p.Name
	}
	return names
}

// keys splits what one read of the terminal gave into keys, dropping
// escape sequences (arrows, function keys) but keeping a lone Esc.
func (v *topView) keys(b []byte) []byte {
	b = append(v.keyPending, b...)
	v.keyPending = nil
	var out []byte
	for i := 0; i < len(b); i++ {
		if b[i] != 27 || i+1 == len(b) {
			out = append(out, b[i])
			continue
		}
		if b[i+1] != '[' && b[i+1] != 'O' {
			out = append(out, 27)
			continue
		}
		// ESC [ parameters... final byte in 0x40-0x7e; ESC O x.
		j := i + 2
		if b[i+1] == '[' {
			for j < len(b) && (b[j] < 0x40 || b[j] > 0x7e) {
				j++
			}
		}
		if j >= len(b) {
			v.keyPending = append(v.keyPending, b[i:]...)
			break
		}
		i = j
	}
	return out
}

// The screen's fixed lines.
const (
	topHelp    = "q quit  s refused/served  c cluster/node  p next policy  / type a policy  r refresh"
	topTagCell = 8  // the least room a tag's column gets
	topTagWide = 16 // the room below which the ±error and share columns go
)

// frame is the view at now as lines, each at most width columns wide and
// at most height of them (0: no limit). live adds the status and key
// lines.
func (v *topView) frame(now time.Time, width, height int, live bool) []string {
	var lines []string
	what := "most " + v.by + " tags"
	scope := v.scope
	if v.top != nil && v.scope == "cluster" {
		scope += fmt.Sprintf(" (%d %s)", v.top.Nodes, map[bool]string{true: "node", false: "nodes"}[v.top.Nodes == 1])
	}
	window := "-"
	if v.top != nil {
		window = seconds(v.top.WindowSeconds)
	}
	policy := "all policies"
	if v.policy != "" {
		policy = "policy " + quoted(v.policy)
	}
	lines = append(lines, fmt.Sprintf("dthrottle top: %s, %s, last %s, %s", what, scope, window, policy))
	lines = append(lines, v.rates())
	if live {
		switch {
		case v.typing:
			lines = append(lines, "policy (Enter: show it, empty: all, Esc: cancel): "+quoted(string(v.typed))+"_")
		case v.err != nil:
			lines = append(lines, "error: "+oneLine(v.err.Error()))
		case !v.updated.IsZero():
			lines = append(lines, fmt.Sprintf("updated %s from %s", v.updated.Format("15:04:05"), v.addr))
		default:
			lines = append(lines, "reading "+v.addr+" ...")
		}
	}
	lines = append(lines, "")
	lines = append(lines, v.table(width)...)
	if live {
		if height > 0 {
			lines = lines[:min(len(lines), max(height-1, 0))]
		}
		lines = append(lines, topHelp)
	}
	if height > 0 {
		lines = lines[:min(len(lines), height)]
	}
	if width > 0 {
		for i, l := range lines {
			lines[i] = clip(l, width)
		}
	}
	return lines
}

// rates is the header's second line: decisions and refusals per second
// between the last two /v1/stats (or totals since start after one), peers
// and tags.
func (v *topView) rates() string {
	s := v.stats
	if s == nil {
		return "decisions -/s, refusals -/s"
	}
	var b strings.Builder
	ok, no := s.Queries.OK, s.Queries.NO
	if p := v.prev; p != nil && ok >= p.Queries.OK && no >= p.Queries.NO {
		dt := s.UptimeSeconds - p.UptimeSeconds
		dOK, dNO := float64(ok-p.Queries.OK)/dt, float64(no-p.Queries.NO)/dt
		fmt.Fprintf(&b, "decisions %s/s, refusals %s/s (%s)", num(dOK+dNO), num(dNO), percent(no-p.Queries.NO, ok+no-p.Queries.OK-p.Queries.NO))
	} else {
		fmt.Fprintf(&b, "decisions %d since start, refusals %d (%s)", ok+no, no, percent(no, ok+no))
	}
	if s.Gossip.Enabled {
		fmt.Fprintf(&b, ", %d peers", s.Gossip.Peers)
	} else {
		b.WriteString(", gossip off")
	}
	fmt.Fprintf(&b, ", %d tags tracked", s.Tags)
	return b.String()
}

// topRow is one tag of the table.
type topRow struct {
	policy string
	tag    api.TopTag
	total  uint64
}

// table is the tags of every policy shown, heaviest first, in columns
// that fit width (0: no limit): the tag, last, is cut to fit.
func (v *topView) table(width int) []string {
	if v.top == nil {
		return nil
	}
	var rows []topRow
	for _, p := range v.top.Policies {
		for _, t := range p.Tags {
			rows = append(rows, topRow{p.Policy, t, p.Total})
		}
	}
	if len(rows) == 0 {
		return []string{fmt.Sprintf("no tags %s in the last %s", v.by, seconds(v.top.WindowSeconds))}
	}
	slices.SortStableFunc(rows, func(a, b topRow) int {
		return cmp.Or(cmp.Compare(b.tag.Count, a.tag.Count), strings.Compare(a.policy, b.policy))
	})
	const errHead = "±ERROR"
	countW, errW, polW := len(v.by), utf8.RuneCountInString(errHead), len("POLICY")
	for _, r := range rows {
		countW = max(countW, len(strconv.FormatUint(r.tag.Count, 10)))
		errW = max(errW, len(strconv.FormatUint(r.tag.Error, 10)))
		polW = max(polW, min(24, utf8.RuneCountInString(quotedName(r.policy))))
	}
	// Columns: count, ±error, share, policy, tag. On a narrow terminal the
	// error and share go first, then the policy narrows, so that the tag
	// keeps room.
	const shareW = 6
	stats := errW + 2 + shareW + 2
	lead := countW + 2 + stats + polW + 2
	if width > 0 && width-lead < topTagWide {
		stats, lead = 0, lead-stats
	}
	if width > 0 && width-lead < topTagCell {
		polW = max(6, polW-(topTagCell-(width-lead)))
		lead = countW + 2 + stats + polW + 2
	}
	cell := func(s string, w int) string { return pad(clip(s, w), w) }
	head := fmt.Sprintf("%*s  ", countW, strings.ToUpper(v.by))
	if stats > 0 {
		head += fmt.Sprintf("%*s  %*s  ", errW, errHead, shareW, "SHARE")
	}
	lines := []string{head + cell("POLICY", polW) + "  TAG"}
	for _, r := range rows {
		tag := quotedTag(r.tag)
		if width > 0 {
			tag = clip(tag, max(width-lead, 1))
		}
		line := fmt.Sprintf("%*d  ", countW, r.tag.Count)
		if stats > 0 {
			line += fmt.Sprintf("%*d  %*s  ", errW, r.tag.Error, shareW, percent(r.tag.Count, r.total))
		}
		lines = append(lines, line+cell(quotedName(r.policy), polW)+"  "+tag)
	}
	return lines
}

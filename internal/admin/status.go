package admin

import (
	"bytes"
	"cmp"
	_ "embed"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dthrottle/dthrottle/internal/shortdur"
)

// The status page at "/": a server-drawn HTML page with no script, which
// reloads itself every 10 seconds.

//go:embed status/page.html
var pageHTML string

var pageTemplate = template.Must(template.New("status").Parse(pageHTML))

// statusTop is how many tags per policy the status page lists.
const statusTop = 10

// pageCSP forbids the page any script, frame, form or fetch: it needs
// nothing but its own inline style. A tag's bytes are escaped as text
// anyway; this is the second lock.
const pageCSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Chart geometry, in SVG user units.
const (
	chartW, chartH       = 540, 200
	chartLeft, chartTop  = 52, 10
	chartRight, chartBot = 10, 22
)

// statusPage is the data of the page's template.
type statusPage struct {
	Version, Node, Uptime, Now, Window, Step string
	Tags                                     int
	DecisionsRate, RefusalsRate              string
	Charts                                   []svgChart
	Legend                                   []legendItem
	Policies                                 []policyRow
	GossipOn                                 bool
	PeersLive, PeersSilent, PeersMissing     int
	Share                                    string // this node's share of the rate, "" when whole
	Peers                                    []peerRow
	Top                                      *topSection // nil when Sources.Top is
}

type svgChart struct {
	ID, Title     string
	Width, Height int
	Grid          []gridLine
	Ticks         []tick
	Lines         []chartLine
}

type gridLine struct {
	X1, X2, Y, LabelX, LabelY float64
	Label                     string
}

type tick struct {
	X, Y          float64
	Anchor, Label string
}

type chartLine struct {
	Index              int // the colour: s0 to s8
	Name, Points, Last string
	LastX, LastY       float64
}

type legendItem struct {
	Index int
	Name  string
	Other bool
}

type policyRow struct {
	Name, Action, Percent string
	OK, NO, DryRunRefused uint64
	DryRun                bool
}

type peerRow struct {
	Node, Addr, LastHeard, Found, Relay, Behind string
	Packets, Hits, Lost, Duplicates             uint64
	Silent, Missing, Left, FingerprintMatch     bool
}

type topSection struct {
	Window   string
	Nodes    int
	Policies []topPolicyRows
}

type topPolicyRows struct {
	Policy       string
	Total, Bound uint64
	Tags         []topTagRow
}

type topTagRow struct {
	Tag, Share   string
	Count, Error uint64
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	now := s.now()
	page := s.statusPage(now)
	var b bytes.Buffer
	if err := pageTemplate.Execute(&b, page); err != nil {
		writeError(w, http.StatusInternalServerError, "rendering the status page: "+err.Error())
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(http.StatusOK)
	w.Write(b.Bytes())
}

// statusPage gathers what the page shows at now.
func (s *Server) statusPage(now time.Time) statusPage {
	snap := s.src.Snapshot()
	p := statusPage{
		Version: snap.Version,
		Node:    "standalone",
		Uptime:  "-",
		Now:     now.UTC().Format("2006-01-02 15:04:05 UTC"),
		Window:  shortdur.Format(historyStep * historyLen),
		Step:    shortdur.Format(historyStep),
		Tags:    snap.Table.Tags,
	}
	if !snap.Started.IsZero() {
		p.Uptime = shortdur.Format(now.Sub(snap.Started).Round(time.Second))
	}

	ivs := s.hist.intervals()
	p.DecisionsRate, p.RefusalsRate = "-", "-"
	if len(ivs) > 0 {
		last := ivs[len(ivs)-1]
		var ok, no uint64
		for _, c := range append(last.Named[:], last.Other) {
			ok, no = ok+c.OK, no+c.NO
		}
		p.DecisionsRate = rate(float64(ok+no) / last.Seconds)
		p.RefusalsRate = rate(float64(no) / last.Seconds)
		ser := chartSeries(ivs)
		p.Charts = []svgChart{
			drawChart("decisions", "Decisions per second (served and refused), per policy", now, ser, ser.Decisions),
			drawChart("refusals", "Refusals per second, per policy", now, ser, ser.Refusals),
		}
		for j, name := range ser.Names {
			p.Legend = append(p.Legend, legendItem{Index: j, Name: name})
		}
		if ser.Other {
			p.Legend = append(p.Legend, legendItem{Index: historyNamed, Name: "all other policies", Other: true})
		}
	}

	for _, pol := range snap.Policies {
		p.Policies = append(p.Policies, policyRow{Name: pol.Name, Action: pol.Action.String(),
			OK: pol.OK, NO: pol.NO, Percent: percentOf(pol.NO, pol.OK+pol.NO),
			DryRun: pol.DryRun, DryRunRefused: pol.DryRunRefused})
	}

	if g := snap.Gossip; g != nil {
		p.GossipOn = true
		p.Node = nodeHex(g.Node)
		if g.Members.Share > 0 && g.Members.Share < 1 {
			p.Share = fmt.Sprintf("%.2f", g.Members.Share)
		}
	}
	if s.src.Peers != nil {
		for _, peer := range s.src.Peers() {
			row := peerRow{Node: nodeHex(peer.Node), Addr: peer.Addr, LastHeard: since(now, peer.LastHeard),
				Packets: peer.Packets, Hits: peer.Hits, Lost: peer.Lost, Duplicates: peer.Duplicates,
				Silent: peer.Silent, FingerprintMatch: peer.FingerprintMatch,
				Found: cmp.Or(peer.Found, "-"), Relay: cmp.Or(peer.Relay, "-"),
				Missing: peer.Missing, Left: peer.Left, Behind: "-"}
			if peer.Behind > 0 {
				row.Behind = fmt.Sprintf("%.2f s", peer.Behind.Seconds())
			}
			if row.Missing {
				p.PeersMissing++
			}
			if row.Silent {
				p.PeersSilent++
			} else {
				p.PeersLive++
			}
			p.Peers = append(p.Peers, row)
		}
	}

	if s.src.Top != nil {
		top := s.topDoc(topQuery{by: "refused", scope: "cluster", n: statusTop})
		sec := &topSection{Window: shortdur.Format(roundSeconds(top.WindowSeconds)), Nodes: top.Nodes}
		for _, tp := range top.Policies {
			if len(tp.Tags) == 0 {
				continue
			}
			rows := topPolicyRows{Policy: tp.Policy, Total: tp.Total, Bound: tp.Bound}
			for _, t := range tp.Tags {
				rows.Tags = append(rows.Tags, topTagRow{Tag: visibleTop(t), Count: t.Count, Error: t.Error,
					Share: percentOf(t.Count, tp.Total)})
			}
			sec.Policies = append(sec.Policies, rows)
		}
		p.Top = sec
	}
	return p
}

// drawChart draws one value per line and interval (values[j][i]) over the
// history's window ending at now.
func drawChart(id, title string, now time.Time, ser series, values [][]float64) svgChart {
	c := svgChart{ID: id, Title: title, Width: chartW, Height: chartH}
	plotW := float64(chartW - chartLeft - chartRight)
	plotH := float64(chartH - chartTop - chartBot)
	window := historyStep * historyLen
	top := 0.0
	for _, line := range values {
		for _, v := range line {
			top = max(top, v)
		}
	}
	top = niceCeil(top)
	x := func(t time.Time) float64 {
		ago := min(max(now.Sub(t), 0), window)
		return chartLeft + plotW*(1-float64(ago)/float64(window))
	}
	y := func(v float64) float64 { return chartTop + plotH*(1-v/top) }
	for _, f := range []float64{0, 0.5, 1} {
		yy := y(top * f)
		c.Grid = append(c.Grid, gridLine{X1: chartLeft, X2: chartW - chartRight, Y: yy,
			LabelX: chartLeft - 4, LabelY: yy + 4, Label: rate(top * f)})
	}
	for m := window; m >= 0; m -= window / 3 {
		anchor, label := "middle", "-"+shortdur.Format(m)
		switch {
		case m == window:
			anchor = "start"
		case m == 0:
			anchor, label = "end", "now"
		}
		c.Ticks = append(c.Ticks, tick{X: x(now.Add(-m)), Y: chartH - 6, Anchor: anchor, Label: label})
	}
	for j, line := range values {
		var pts strings.Builder
		for i, v := range line {
			if i > 0 {
				pts.WriteByte(' ')
			}
			fmt.Fprintf(&pts, "%.1f,%.1f", x(ser.At[i]), y(v))
		}
		name := "all other policies"
		if j < len(ser.Names) {
			name = ser.Names[j]
		}
		index := j
		if j >= len(ser.Names) {
			index = historyNamed
		}
		last := len(line) - 1
		c.Lines = append(c.Lines, chartLine{Index: index, Name: name, Points: pts.String(),
			Last: rate(line[last]), LastX: round1(x(ser.At[last])), LastY: round1(y(line[last]))})
	}
	for i := range c.Grid {
		g := &c.Grid[i]
		g.Y, g.LabelY = round1(g.Y), round1(g.LabelY)
	}
	for i := range c.Ticks {
		c.Ticks[i].X = round1(c.Ticks[i].X)
	}
	return c
}

// niceCeil returns the smallest of 1, 2, 2.5, 5 times a power of ten that
// is at least v, and 1 for v <= 0.
func niceCeil(v float64) float64 {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// roundSeconds is s seconds to the second, or to the tenth below 10 s.
func roundSeconds(s float64) time.Duration {
	d := time.Duration(s * float64(time.Second))
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

func round1(f float64) float64 { return math.Round(f*10) / 10 }

// rate formats a rate per second briefly: 0, 0.25, 12.5, 50, 1234, 12.3k.
func rate(r float64) string {
	switch {
	case r >= 100000:
		return strconv.FormatFloat(r/1000, 'f', 0, 64) + "k"
	case r >= 10000:
		return strconv.FormatFloat(r/1000, 'f', 1, 64) + "k"
	case r >= 100:
		return strconv.FormatFloat(r, 'f', 0, 64)
	case r >= 10:
		return strconv.FormatFloat(math.Round(r*10)/10, 'f', -1, 64)
	}
	return strconv.FormatFloat(math.Round(r*100)/100, 'f', -1, 64)
}

// percentOf formats part of total as a percentage, "-" when total is 0.
func percentOf(part, total uint64) string {
	if total == 0 {
		return "-"
	}
	return strconv.FormatFloat(100*float64(part)/float64(total), 'f', 1, 64) + "%"
}

// since says how long before now t was, or "never" for the zero time.
func since(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return shortdur.Format(max(now.Sub(t), 0).Round(100*time.Millisecond)) + " ago"
}

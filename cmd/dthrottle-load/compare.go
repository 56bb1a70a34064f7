package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/dthrottle/dthrottle/internal/procstat"
)

// system is one server under test.
type system struct {
	name          string
	network, addr string
	proto         Proto
	pid           int // for resident memory; 0 if unknown
}

// scenario is one load shape.
type scenario struct {
	name         string
	conns, depth int
	tags         int
	ns           byte    // tag namespace, so scenarios do not share tags
	target       float64 // least dthrottled/echo ratio wanted; 0 for none
}

type compareFlags struct {
	runs           int
	warmup, dur    time.Duration
	big            int
	scaling        bool
	sensitivity    bool
	rate           float64
	burst          int
	dthrottle      string
	dpid           int
	redis          string
	rpid           int
	stdout, stderr io.Writer
	echo, mp, dt   *system
	rs             *system // nil without -redis
}

func cmdCompare(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf := compareFlags{stdout: stdout, stderr: stderr}
	fs.StringVar(&cf.dthrottle, "dthrottle", "", "dthrottled's address, unix:/path or tcp:host:port (required)")
	fs.IntVar(&cf.dpid, "dthrottle-pid", 0, "dthrottled's process id, to read its resident memory")
	fs.StringVar(&cf.redis, "redis", "", "redis-server's address; \"\" leaves Redis out")
	fs.IntVar(&cf.rpid, "redis-pid", 0, "redis-server's process id")
	fs.IntVar(&cf.runs, "runs", 3, "interleaved runs per scenario; the medians are shown")
	fs.DurationVar(&cf.warmup, "warmup", 300*time.Millisecond, "load before each measurement")
	fs.DurationVar(&cf.dur, "duration", 2*time.Second, "measured time of each run")
	fs.IntVar(&cf.big, "big", 1000000, "distinct tags of the last scenario, prefilled")
	fs.BoolVar(&cf.scaling, "scaling", false, "also measure dthrottled against echo at 1k, 100k and -big tags")
	fs.BoolVar(&cf.sensitivity, "sensitivity", false, "also measure echo servers that spend 10 to 100 ns of CPU per query against plain echo")
	fs.Float64Var(&cf.rate, "rate", 0.01, "the rate dthrottled is configured with, for the Redis script")
	fs.IntVar(&cf.burst, "burst", 1000000, "the burst dthrottled is configured with, for the Redis script")
	if err := fs.Parse(args); err != nil {
		return err
	}
	network, addr, err := splitAddr(cf.dthrottle)
	if err != nil {
		return fmt.Errorf("-dthrottle: %w", err)
	}
	cf.dt = &system{name: "dthrottled", network: network, addr: addr, proto: lineProto{}, pid: cf.dpid}
	if cf.redis != "" {
		network, addr, err := splitAddr(cf.redis)
		if err != nil {
			return fmt.Errorf("-redis: %w", err)
		}
		if _, err := redisCommand(network, addr, "SCRIPT", "LOAD", luaBucket); err != nil {
			return err
		}
		cf.rs = &system{name: "redis+lua", network: network, addr: addr, proto: newRedisProto(cf.rate, cf.burst), pid: cf.rpid}
	}
	echo, stop, err := startEcho("echo")
	if err != nil {
		return err
	}
	defer stop()
	cf.echo = echo
	mp, stop, err := startEcho("map+mutex", "-map", "-rate", fmt.Sprint(cf.rate), "-burst", fmt.Sprint(cf.burst))
	if err != nil {
		return err
	}
	defer stop()
	cf.mp = mp
	return cf.compare()
}

// startEcho starts this program's echo server, with args, as a child
// process on a temporary Unix socket, so that it runs, like the others, in
// a process of its own; stop ends it.
func startEcho(name string, args ...string) (_ *system, stop func(), err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "dthrottle-echo")
	if err != nil {
		return nil, nil, err
	}
	sock := filepath.Join(dir, "echo.sock")
	cmd := exec.Command(exe, append([]string{"echo", "-listen", "unix:" + sock}, args...)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	stop = func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		os.RemoveAll(dir)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			stop()
			return nil, nil, fmt.Errorf("%s server did not start: %w", name, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return &system{name: name, network: "unix", addr: sock, proto: lineProto{}, pid: cmd.Process.Pid}, stop, nil
}

// compare runs every scenario cf.runs times, the systems interleaved
// (their order rotating from run to run), and prints the medians.
func (cf *compareFlags) compare() error {
	systems := []*system{cf.echo, cf.mp, cf.dt}
	if cf.rs != nil {
		systems = append(systems, cf.rs)
	}
	small := []scenario{
		{name: "32 conns x 1 in flight, 10k tags", conns: 32, depth: 1, tags: 10000, ns: 'a', target: 0.95},
		{name: "4 conns x 64 pipelined, 10k tags", conns: 4, depth: 64, tags: 10000, ns: 'a', target: 0.9},
	}
	big := []scenario{{name: fmt.Sprintf("4 conns x 64 pipelined, %s tags", count(cf.big)), conns: 4, depth: 64, tags: cf.big, ns: 'b', target: 0.7}}
	results := map[string]map[string][]Result{}
	if err := cf.rounds(small, systems, results); err != nil {
		return err
	}
	mem, err := cf.prefill(systems, big[0])
	if err != nil {
		return err
	}
	if err := cf.rounds(big, systems, results); err != nil {
		return err
	}
	cf.table(append(small, big...), systems, results)
	fmt.Fprint(cf.stdout, mem)
	if cf.scaling {
		if err := cf.scalingTable(); err != nil {
			return err
		}
	}
	if cf.sensitivity {
		return cf.sensitivityTable(small[1])
	}
	return nil
}

// sensitivityTable measures, under load sc, echo servers that spend a
// fixed CPU time on every query and do nothing else: what a decision of
// that cost does to the ratio against echo, whatever the table.
func (cf *compareFlags) sensitivityTable(sc scenario) error {
	systems := []*system{cf.echo}
	for _, d := range []time.Duration{10, 30, 100} {
		sys, stop, err := startEcho(fmt.Sprintf("echo, %v per query", d), "-burn", d.String())
		if err != nil {
			return err
		}
		defer stop()
		systems = append(systems, sys)
	}
	res := map[string]map[string][]Result{}
	if err := cf.rounds([]scenario{sc}, systems, res); err != nil {
		return err
	}
	w := cf.stdout
	fmt.Fprintf(w, "\nEcho servers spending CPU on every query, %s, median of %d interleaved runs:\n\n| server | decisions/s | / echo | CPU per decision (server / load tool) |\n|---|---|---|---|\n", sc.name, cf.runs)
	echo := median(res[sc.name][cf.echo.name])
	for _, sys := range systems {
		m := median(res[sc.name][sys.name])
		fmt.Fprintf(w, "| %s | %s/s | %.2fx | %v / %v |\n", sys.name, rate(m.Rate()), m.Rate()/echo.Rate(),
			m.ServerCPU.Round(time.Nanosecond), m.LoadCPU.Round(time.Nanosecond))
	}
	return nil
}

func (cf *compareFlags) rounds(scens []scenario, systems []*system, results map[string]map[string][]Result) error {
	for run := 0; run < cf.runs; run++ {
		for _, sc := range scens {
			for k := range systems {
				sys := systems[(k+run)%len(systems)]
				res, err := cf.measure(sys, sc)
				if err != nil {
					return fmt.Errorf("%s, %s: %w", sys.name, sc.name, err)
				}
				fmt.Fprintf(cf.stderr, "run %d/%d  %-40s %-11s %10.0f/s  p50 %-9v p99 %v\n",
					run+1, cf.runs, sc.name, sys.name, res.Rate(), res.P50, res.P99)
				if results[sc.name] == nil {
					results[sc.name] = map[string][]Result{}
				}
				results[sc.name][sys.name] = append(results[sc.name][sys.name], res)
			}
		}
	}
	return nil
}

// measure runs one load against sys and also notes the CPU time the
// server and this program spent per decision, warm-up included.
func (cf *compareFlags) measure(sys *system, sc scenario) (Result, error) {
	srv0, srvErr := procstat.CPU(sys.pid)
	self0, selfErr := procstat.CPU(os.Getpid())
	start := time.Now()
	res, err := Load{Network: sys.network, Addr: sys.addr, Proto: sys.proto, Conns: sc.conns, Depth: sc.depth,
		Tags: sc.tags, NS: sc.ns, Warmup: cf.warmup, Duration: cf.dur}.Run()
	if err != nil {
		return res, err
	}
	decisions := res.Rate() * time.Since(start).Seconds()
	srv1, srvErr1 := procstat.CPU(sys.pid)
	self1, selfErr1 := procstat.CPU(os.Getpid())
	if sys.pid != 0 && srvErr == nil && srvErr1 == nil && decisions > 0 {
		res.ServerCPU = time.Duration(float64(srv1-srv0) / decisions)
	}
	if selfErr == nil && selfErr1 == nil && decisions > 0 {
		res.LoadCPU = time.Duration(float64(self1-self0) / decisions)
	}
	return res, nil
}

// prefill asks every system about every tag of sc once, and returns a
// note of the resident memory that took.
func (cf *compareFlags) prefill(systems []*system, sc scenario) (string, error) {
	var note strings.Builder
	fmt.Fprintf(&note, "\nResident memory for %s distinct %d-byte tags:\n\n", count(sc.tags), tagLen)
	for _, sys := range systems {
		if sys == cf.echo {
			continue
		}
		before, _ := rssBytes(sys.pid)
		start := time.Now()
		if err := Prefill(sys.network, sys.addr, sys.proto, sc.ns, 0, sc.tags, 4, 256); err != nil {
			return "", fmt.Errorf("prefilling %s: %w", sys.name, err)
		}
		took := time.Since(start)
		after, err := rssBytes(sys.pid)
		if sys.pid == 0 || err != nil {
			fmt.Fprintf(&note, "- %s: prefilled in %v (no -pid: memory unknown)\n", sys.name, took.Round(time.Millisecond))
			continue
		}
		fmt.Fprintf(&note, "- %s: %.1f MiB before, %.1f MiB after: %.1f bytes per tag (prefilled in %v)\n",
			sys.name, mib(before), mib(after), float64(after-before)/float64(sc.tags), took.Round(time.Millisecond))
	}
	return note.String(), nil
}

// table prints the medians as Markdown.
func (cf *compareFlags) table(scens []scenario, systems []*system, results map[string]map[string][]Result) {
	w := cf.stdout
	fmt.Fprintf(w, "Medians of %d interleaved runs of %v each:\n\n", cf.runs, cf.dur)
	fmt.Fprint(w, "| load |")
	for _, s := range systems {
		fmt.Fprintf(w, " %s |", s.name)
	}
	fmt.Fprint(w, " dthrottled / echo (target) | map+mutex / echo |")
	if cf.rs != nil {
		fmt.Fprint(w, " redis / echo | dthrottled / redis |")
	}
	fmt.Fprint(w, "\n|---|")
	for range systems {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprint(w, "---|---|")
	if cf.rs != nil {
		fmt.Fprint(w, "---|---|")
	}
	fmt.Fprintln(w)
	for _, sc := range scens {
		fmt.Fprintf(w, "| %s |", sc.name)
		med := map[string]Result{}
		for _, s := range systems {
			m := median(results[sc.name][s.name])
			med[s.name] = m
			fmt.Fprintf(w, " %s/s, p50 %v, p99 %v |", rate(m.Rate()), short(m.P50), short(m.P99))
		}
		ratio := med["dthrottled"].Rate() / med["echo"].Rate()
		verdict := "met"
		if ratio < sc.target {
			verdict = "MISSED"
		}
		fmt.Fprintf(w, " **%.2fx** (>= %.2fx: %s) | %.2fx |", ratio, sc.target, verdict, med[cf.mp.name].Rate()/med["echo"].Rate())
		if cf.rs != nil {
			r := med[cf.rs.name].Rate()
			fmt.Fprintf(w, " %.2fx | %.1fx |", r/med["echo"].Rate(), med["dthrottled"].Rate()/r)
		}
		fmt.Fprintln(w)
	}
	// The two processes share the machine's CPUs, so a server's CPU time
	// per decision, and the load tool's while it drives that server, say
	// where the throughput went.
	fmt.Fprint(w, "\nCPU time per decision, medians (server / load tool):\n\n| load |")
	for _, s := range systems {
		fmt.Fprintf(w, " %s |", s.name)
	}
	fmt.Fprint(w, "\n|---|")
	for range systems {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	for _, sc := range scens {
		fmt.Fprintf(w, "| %s |", sc.name)
		for _, s := range systems {
			m := median(results[sc.name][s.name])
			fmt.Fprintf(w, " %v / %v |", m.ServerCPU.Round(time.Nanosecond), m.LoadCPU.Round(time.Nanosecond))
		}
		fmt.Fprintln(w)
	}
}

// scalingTable measures dthrottled against echo at growing tag counts.
func (cf *compareFlags) scalingTable() error {
	systems := []*system{cf.echo, cf.dt}
	shapes := []scenario{{conns: 1, depth: 1}, {conns: 32, depth: 1}, {conns: 4, depth: 64}}
	w := cf.stdout
	fmt.Fprintf(w, "\ndthrottled decisions/s (and / echo), median of %d interleaved runs:\n\n| tags | 1 conn x 1 | 32 conns x 1 | 4 conns x 64 |\n|---|---|---|---|\n", cf.runs)
	for i, tags := range []int{1000, 100000, cf.big} {
		ns := byte('c' + i)
		if tags == cf.big {
			ns = 'b' // prefilled already
		} else if err := Prefill(cf.dt.network, cf.dt.addr, cf.dt.proto, ns, 0, tags, 4, 256); err != nil {
			return err
		}
		fmt.Fprintf(w, "| %s |", count(tags))
		for _, sh := range shapes {
			sc := scenario{name: fmt.Sprintf("%d conns x %d, %s tags", sh.conns, sh.depth, count(tags)),
				conns: sh.conns, depth: sh.depth, tags: tags, ns: ns}
			res := map[string]map[string][]Result{}
			if err := cf.rounds([]scenario{sc}, systems, res); err != nil {
				return err
			}
			d, e := median(res[sc.name]["dthrottled"]), median(res[sc.name]["echo"])
			fmt.Fprintf(w, " %s/s (%.2fx), p99 %v |", rate(d.Rate()), d.Rate()/e.Rate(), short(d.P99))
		}
		fmt.Fprintln(w)
	}
	return nil
}

// median returns, field by field, the median of rs.
func median(rs []Result) Result {
	if len(rs) == 0 {
		return Result{Elapsed: 1}
	}
	pick := func(f func(Result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return Result{
		Queries:   uint64(pick(func(r Result) float64 { return r.Rate() })),
		Elapsed:   time.Second,
		P50:       time.Duration(pick(func(r Result) float64 { return float64(r.P50) })),
		P99:       time.Duration(pick(func(r Result) float64 { return float64(r.P99) })),
		ServerCPU: time.Duration(pick(func(r Result) float64 { return float64(r.ServerCPU) })),
		LoadCPU:   time.Duration(pick(func(r Result) float64 { return float64(r.LoadCPU) })),
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// rate formats decisions per second as 5.37M, 198k.
func rate(r float64) string {
	switch {
	case r >= 1e6:
		return fmt.Sprintf("%.2fM", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.0fk", r/1e3)
	}
	return fmt.Sprintf("%.0f", r)
}

// count formats a tag count as 10k, 1M.
func count(n int) string {
	switch {
	case n >= 1e6 && n%1e6 == 0:
		return fmt.Sprintf("%dM", n/1e6)
	case n >= 1e3 && n%1e3 == 0:
		return fmt.Sprintf("%dk", n/1e3)
	}
	return fmt.Sprint(n)
}

// short rounds a round trip for display.
func short(d time.Duration) time.Duration {
	switch {
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	case d >= 10*time.Microsecond:
		return d.Round(time.Microsecond)
	}
	return d.Round(100 * time.Nanosecond)
}

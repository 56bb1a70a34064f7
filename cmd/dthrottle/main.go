// Command dthrottle is dthrottled's companion for people at a shell and for
// Apache: it asks the daemon about tags, serves as Apache's RewriteMap
// program, and reads the daemon's admin endpoint.
//
//	dthrottle query [-socket PATH | -tcp ADDR] [-timeout 50ms] TAG...
//	dthrottle rewritemap [-socket PATH | -tcp ADDR] [-timeout 5ms] [-prefix P] [-fail open|closed]
//	dthrottle peers [-admin ADDR]
//	dthrottle tag [-admin ADDR] TAG
//	dthrottle forget [-admin ADDR] TAG
//	dthrottle stats [-admin ADDR]
//	dthrottle health [-admin ADDR]
//	dthrottle top [-admin ADDR] [-by refused|served] [-scope cluster|node] [-policy P] [-n 20] [-interval 2s] [-once]
//
// query exits 0 when every tag was served, 1 when any was refused and 2 on
// an error; the others exit 0 on success, 1 when the answer is bad news
// (health not ok) and 2 on an error.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

// Exit statuses.
const (
	exitOK      = 0
	exitRefused = 1 // query: a tag was refused; health: not ok
	exitError   = 2
)

// env is what a subcommand may touch: its streams and the clock, so tests
// run it in process.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	now            func() time.Time
}

func main() {
	os.Exit(run(os.Args[1:], env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, now: time.Now}))
}

var commands = map[string]func(args []string, e env) int{
	"query":      query,
	"rewritemap": rewriteMap,
	"peers":      peers,
	"tag":        tagInfo,
	"forget":     forget,
	"stats":      stats,
	"health":     health,
	"top":        top,
}

const usage = `usage:
  dthrottle query [-socket PATH | -tcp ADDR] [-timeout 50ms] TAG...
        ask the daemon about each TAG (spending a token when served) and
        print "TAG OK" or "TAG NO"; exit 0 if all were served, 1 if any
        was refused, 2 on error
  dthrottle rewritemap [-socket PATH | -tcp ADDR] [-timeout 5ms] [-prefix P] [-fail open|closed]
        answer OK or NO for each line read on stdin, as Apache's
        RewriteMap prg: program; fails open by default
  dthrottle peers  [-admin ADDR]        the peers the daemon hears
  dthrottle tag    [-admin ADDR] TAG    one tag's bucket, without spending
  dthrottle forget [-admin ADDR] TAG    drop a tag's bucket (it is full again)
  dthrottle stats  [-admin ADDR]        the daemon's counters
  dthrottle health [-admin ADDR]        exit 0 if the daemon is healthy
  dthrottle top [-admin ADDR] [-by refused|served] [-scope cluster|node] [-policy P] [-n 20] [-interval 2s] [-once]
        the most refused (or served) tags, live like top(1); keys: q quit,
        s refused/served, c cluster/node, p next policy, / type a policy,
        r refresh; -once prints the table and exits
Run "dthrottle COMMAND -h" for a command's flags.
`

func run(args []string, e env) int {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, usage)
		return exitError
	}
	cmd, ok := commands[args[0]]
	if !ok {
		if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
			fmt.Fprint(e.stdout, usage)
			return exitOK
		}
		fmt.Fprintf(e.stderr, "dthrottle: unknown command %q\n%s", args[0], usage)
		return exitError
	}
	return cmd(args[1:], e)
}

// newFlags returns a flag set for a subcommand that prints its errors to
// e.stderr.
func newFlags(name string, e env) *flag.FlagSet {
	fs := flag.NewFlagSet("dthrottle "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	return fs
}

// parse parses args, returning false (after the flag package has said
// why) when the command should exit with exitError, or exitOK for -h.
func parse(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitError, false
	}
	return 0, true
}

// fail prints err prefixed by the command's name and returns exitError.
func fail(e env, err error) int {
	fmt.Fprintf(e.stderr, "dthrottle: %v\n", err)
	return exitError
}

// Command dthrottle-sim simulates a dthrottle cluster behind a random load
// balancer, on a fake clock, and prints what a reporting design costs each
// node and how well it holds a rate, as one line of key=value fields (see
// package internal/sim).
//
//	go run ./cmd/dthrottle-sim -nodes 100 -design today
//	go run ./cmd/dthrottle-sim -design help
package main

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/dthrottle/dthrottle/internal/sim"
)

func main() {
	cfg := sim.Default(10)
	fs := flag.NewFlagSet("dthrottle-sim", flag.ExitOnError)
	fs.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "nodes in the cluster")
	fs.StringVar(&cfg.Design, "design", cfg.Design, `reporting design; "help" lists them`)
	seconds := fs.Float64("seconds", cfg.Duration.Seconds(), "simulated seconds")
	fs.Float64Var(&cfg.Loss, "loss", cfg.Loss, "probability that a receiver misses a datagram")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "random seed")
	fs.Float64Var(&cfg.NodeRate, "node-rate", cfg.NodeRate, "ordinary requests per node per second")
	fs.IntVar(&cfg.Clients, "clients", cfg.Clients, "distinct ordinary clients (Zipf)")
	fs.Parse(os.Args[1:])
	if cfg.Design == "help" {
		for _, name := range slices.Sorted(maps.Keys(sim.Designs)) {
			fmt.Printf("%-8s %s\n", name, sim.Designs[name])
		}
		return
	}
	cfg.Duration = time.Duration(*seconds * float64(time.Second))
	res, err := sim.Run(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println(res)
}

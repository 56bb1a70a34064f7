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
	fs.IntVar(&cfg.Relays, "relays", cfg.Relays, "relays in the segment (relay designs), at least 2")
	fs.Float64Var(&cfg.Hold, "hold", cfg.Hold, "hold-back threshold as a fraction of the burst (holding designs), in (0, 1]")
	fs.IntVar(&cfg.HotAges, "hot-ages", cfg.HotAges, "hold ages a tag stays hot at a relay once it reached the threshold (relay-hold), at least 1")
	relayEvery := fs.Float64("relay-every", 0, "seconds between a relay's aggregates; 0: the interval")
	relayFail := fs.Float64("relay-fail", 0, "seconds into the run at which every relay falls silent; 0 never")
	fs.Parse(os.Args[1:])
	if cfg.Design == "help" {
		for _, name := range slices.Sorted(maps.Keys(sim.Designs)) {
			fmt.Printf("%-10s %s\n", name, sim.Designs[name])
		}
		return
	}
	cfg.Duration = time.Duration(*seconds * float64(time.Second))
	cfg.RelayFail = time.Duration(*relayFail * float64(time.Second))
	cfg.RelayEvery = time.Duration(*relayEvery * float64(time.Second))
	res, err := sim.Run(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println(res)
}

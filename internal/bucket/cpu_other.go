//go:build !amd64

package bucket

// cpuStripe is the counter stripe of the hash h: where no instruction
// tells the CPU cheaply, threads spread by tag.
func cpuStripe(h uint64) int { return int(uint32(h) >> 26) }

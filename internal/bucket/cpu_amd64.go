package bucket

// The CPU a decision runs on picks the stripe it counts in
// (docs/shared-table.md, "Counters"): Linux keeps the CPU's number in
// the low 12 bits of IA32_TSC_AUX, which RDPID reads (and RDTSCP beside
// the clock), with no system call.

func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
func rdpid() uint32
func rdtscpAux() uint32

// cpuWay is how this CPU tells its number: 2 RDPID, 1 RDTSCP, 0 neither.
var cpuWay = func() int {
	if max, _, _, _ := cpuid(0, 0); max >= 7 {
		if _, _, ecx, _ := cpuid(7, 0); ecx&(1<<22) != 0 {
			return 2
		}
	}
	if max, _, _, _ := cpuid(0x80000000, 0); max >= 0x80000001 {
		if _, _, _, edx := cpuid(0x80000001, 0); edx&(1<<27) != 0 {
			return 1
		}
	}
	return 0
}()

// cpuStripe is the counter stripe of the CPU running the caller, or of
// the hash h where the CPU cannot tell.
func cpuStripe(h uint64) int {
	switch cpuWay {
	case 2:
		return int(rdpid()&0xFFF) % counterStripes
	case 1:
		return int(rdtscpAux()&0xFFF) % counterStripes
	}
	return int(uint32(h) >> 26)
}

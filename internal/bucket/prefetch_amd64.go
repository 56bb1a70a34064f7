package bucket

import "unsafe"

// prefetch asks the CPU to bring the cache line at p closer. It never
// faults and changes nothing a program can observe but time.
//
//go:noescape
func prefetch(p unsafe.Pointer)

// prefetchw is prefetch for a line about to be written: it asks for the
// line exclusively, so that the write that follows need not wait for
// another core to give it up.
//
//go:noescape
func prefetchw(p unsafe.Pointer)

//go:build !amd64

package bucket

import "unsafe"

// prefetch does nothing where no prefetch instruction is wired up.
func prefetch(p unsafe.Pointer) {}

// prefetchw does nothing where no prefetch instruction is wired up.
func prefetchw(p unsafe.Pointer) {}

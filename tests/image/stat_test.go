package image

import (
	"os"
	"syscall"
)

// statUID is the owner of a file.
func statUID(st os.FileInfo) uint32 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Uid
	}
	return 0
}

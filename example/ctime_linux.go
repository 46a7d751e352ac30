package main

import (
	"io/fs"
	"syscall"
)

// changeTime returns the time info's file last changed, its data or its
// inode (mode, owner, links): the ctime, which no user can set back.
func changeTime(info fs.FileInfo) [2]int64 {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return [2]int64{}
	}
	return [2]int64{int64(st.Ctim.Sec), int64(st.Ctim.Nsec)}
}

//go:build !unix

package main

import "io/fs"

// openNoFollowNoBlock adds nothing: these flags are Unix's.
const openNoFollowNoBlock = 0

// idOf returns the zero fileID: without inode numbers, a file is
// recognised by its content alone (see target.ours).
func idOf(fs.FileInfo) fileID { return fileID{} }

// checkPrivate accepts everything: file ownership and Unix permission
// bits are not available here.
func checkPrivate(string, fs.FileInfo, string) error { return nil }

// ownedByUser is true: file ownership is not available here.
func ownedByUser(fs.FileInfo) bool { return true }

// othersCanRead is false: Unix permission bits are not available here.
func othersCanRead(fs.FileInfo, fs.FileInfo) bool { return false }

// privateMode0600 accepts every mode, like privateMode.
func privateMode0600(fs.FileInfo) bool { return true }

// privateMode accepts every mode: Unix permission bits are not available
// here.
func privateMode(fs.FileInfo) bool { return true }

// checkParent accepts everything: file ownership and Unix permission bits
// are not available here.
func checkParent(string, string, fs.FileInfo) error { return nil }

func checkLinks(string, string) error { return nil }

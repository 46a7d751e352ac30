package main

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
)

// drifted describes how the file on disk differs from f, or returns "" if
// it does not. info is the file's Lstat.
func drifted(root *os.Root, f *File, info fs.FileInfo) (string, error) {
	switch {
	case !info.Mode().IsRegular():
		return "not a regular file", nil
	case info.Size() != int64(len(f.Content)):
		return "size", nil
	case info.Mode().Perm() != fs.FileMode(f.Mode):
		return "mode", nil
	}
	data, err := root.ReadFile(f.Name)
	if err != nil {
		return "", err
	}
	if string(data) != f.Content {
		return "content", nil
	}
	return "", nil
}

// digest is the hex SHA-256 of data, as kept in the journal.
func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

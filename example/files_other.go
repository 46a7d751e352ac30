//go:build !linux

package main

import (
	"io/fs"
	"os"
)

// Outside Linux a file is identified by its inode number alone (see
// fileID), and renames that must not replace a file link, then unlink.

// stat returns what is at l, without following a symbolic link.
func (c *claimed) stat(l loc) (fileState, error) {
	info, err := c.root.Lstat(c.path(l))
	if err != nil {
		return fileState{}, err
	}
	return fileState{info: info, id: idOf(info)}, nil
}

// idOfFile returns the identity of the open file f, info its Stat.
func idOfFile(_ *os.File, info fs.FileInfo) fileID { return idOf(info) }

// exchange is not available: see replaceAside.
func (c *claimed) exchange(a, b loc) error { return errNoExchange }

// renameNoReplace renames a to b unless b exists: then it fails with an
// error that is fs.ErrExist, and changes nothing.
func (c *claimed) renameNoReplace(a, b loc) error {
	if err := c.root.Link(c.path(a), c.path(b)); err != nil {
		return err
	}
	return c.root.Remove(c.path(a))
}

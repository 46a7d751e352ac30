package main

import (
	"errors"
	"io"
	"io/fs"
	"os"
)

// fileReader reads a file of the target directory, for the checks that
// compare its content with what the example wrote, and returns the
// content and the identity of the file read. The default is readRegular;
// tests provide one that fails, as reading a file of mode 0000 or 0200
// fails for a user other than root, or that changes the file as it is
// read.
type fileReader func(root *os.Root, name string) ([]byte, fileID, error)

// readRegular reads the regular file at name in root. The file is opened
// without following a symbolic link and without waiting for a writer (a
// named pipe put at the name is not read, and never blocks the example),
// and checked through the descriptor opened to be a regular file; its
// identity is that descriptor's, so that the caller can tell whether it
// read the file it checked, not another put at the name meanwhile. It
// reads at most one byte more than the file's size when opened.
func readRegular(root *os.Root, name string) ([]byte, fileID, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|openNoFollowNoBlock, 0)
	if err != nil {
		return nil, fileID{}, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fileID{}, err
	}
	if !info.Mode().IsRegular() {
		return nil, fileID{}, &fs.PathError{Op: "read", Path: name, Err: errNotRegular}
	}
	data, err := io.ReadAll(io.LimitReader(f, info.Size()+1))
	if err != nil {
		return nil, fileID{}, err
	}
	return data, idOfFile(f, info), nil
}

// errNotRegular is the error of readRegular for anything but a regular
// file.
var errNotRegular = errors.New("not a regular file")

package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"runtime"
	"strings"
)

// tokenEnv is the environment variable that holds the token when
// --token-file is not given.
const tokenEnv = "CONVERGE_INSPECT_TOKEN"

// maxToken bounds the size of a token file.
const maxToken = 4 << 10

// errToken: the token file or variable cannot be used. Its messages never
// hold the token.
var errToken = errors.New("unusable token")

// loadToken returns the token in the file at path if path is not empty,
// else the value of tokenEnv (which getenv reads), else "". It refuses a
// file that is not a regular file, that others than its owner can read or
// write (on systems with Unix permissions), or that is larger than
// maxToken, and a token with characters a bearer token cannot have
// (RFC 6750: letters, digits and -._~+/ then =).
func loadToken(path string, getenv func(string) string) (string, error) {
	if path == "" {
		token := string(bytes.TrimSpace([]byte(getenv(tokenEnv))))
		if token == "" {
			return "", nil
		}
		if !isToken(token) {
			return "", fmt.Errorf("%w: %s does not hold a bearer token (letters, digits and -._~+/ then =)", errToken, tokenEnv)
		}
		return token, nil
	}
	// Open first, without waiting for the writer of a named pipe (a
	// check of the path before opening it could be answered by one file
	// and the open by another put there meanwhile), then check what was
	// opened: a regular file.
	f, err := os.OpenFile(path, os.O_RDONLY|openNoBlock, 0)
	if err != nil {
		return "", fmt.Errorf("%w: --token-file: %w", errToken, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("%w: --token-file: %w", errToken, err)
	}
	if !info.Mode().IsRegular() {
		return "", fmt.Errorf("%w: --token-file %s is not a regular file", errToken, path)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 && runtime.GOOS != "windows" {
		return "", fmt.Errorf("%w: --token-file %s has mode %#o: others can read or write it; make it readable by its owner only (chmod 600)", errToken, path, perm)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxToken+1))
	if err != nil {
		return "", fmt.Errorf("%w: --token-file: %w", errToken, err)
	}
	if len(data) > maxToken {
		return "", fmt.Errorf("%w: --token-file %s is larger than %d bytes", errToken, path, maxToken)
	}
	token := string(bytes.TrimSpace(data))
	if token == "" {
		return "", fmt.Errorf("%w: --token-file %s is empty", errToken, path)
	}
	if !isToken(token) {
		return "", fmt.Errorf("%w: --token-file %s does not hold a bearer token (one line of letters, digits and -._~+/ then =)", errToken, path)
	}
	return token, nil
}

// isToken reports whether s has the form of a bearer token (RFC 6750's
// b64token).
func isToken(s string) bool {
	i := 0
	for ; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || bytes.IndexByte([]byte("-._~+/"), c) >= 0) {
			break
		}
	}
	if i == 0 {
		return false
	}
	for ; i < len(s); i++ {
		if s[i] != '=' {
			return false
		}
	}
	return true
}

// redacted is what the token is replaced with in the agent's text.
const redacted = "[token]"

// redact returns s, text from the agent, with every occurrence of token
// replaced, so that an agent (or a proxy in front of it) that echoes the
// request back cannot have it printed. The result never holds token: the
// replacement has characters a token cannot have.
func redact(s, token string) string {
	if token == "" {
		return s
	}
	return strings.ReplaceAll(s, token, redacted)
}

// redactFields redacts token in every string field of the struct that v
// points to: a row of the reconcilers or reconciler-retries table, whose
// other fields hold no text (TestRedactFieldsCoversRows keeps it so).
func redactFields(v any, token string) {
	if token == "" {
		return
	}
	redactStruct(reflect.ValueOf(v).Elem(), token)
}

// redactStruct redacts token from the string fields of rv, a settable
// struct, and from those of the structs in its slices of structs
// (tables.RetryInfo.Errors). A slice is copied before it is changed, so
// that another value sharing it is left as it was.
func redactStruct(rv reflect.Value, token string) {
	for i := range rv.NumField() {
		switch f := rv.Field(i); {
		case !f.CanSet():
		case f.Kind() == reflect.String:
			f.SetString(redact(f.String(), token))
		case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.Struct && f.Len() > 0:
			c := reflect.MakeSlice(f.Type(), f.Len(), f.Len())
			reflect.Copy(c, f)
			for j := range c.Len() {
				redactStruct(c.Index(j), token)
			}
			f.Set(c)
		}
	}
}

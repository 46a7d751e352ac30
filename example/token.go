package main

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
)

// tokenPath is the file, inside the target directory, that holds the
// API's token: readable by the user running the example only (the state
// directory is 0700, the file 0600).
const tokenPath = stateDir + "/token"

// apiToken is the credential the API asks for: a random secret, new at
// every start, sent as "Authorization: Bearer TOKEN" (curl
// --oauth2-bearer TOKEN). It is written to tokenPath whenever the
// directory is claimed, and replaced by a new one when a directory is
// claimed anew (the one before moved away or removed, with the token file
// in it) or if other users could have read it (see ownedDir.keepPrivate).
// Its methods are safe for concurrent use.
type apiToken struct {
	mu     sync.RWMutex
	secret string
}

func newAPIToken() (*apiToken, error) {
	t := &apiToken{}
	if err := t.renew(); err != nil {
		return nil, err
	}
	return t, nil
}

// renew replaces the token with a new random one.
func (t *apiToken) renew() error {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("creating the API token: %w", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.secret = hex.EncodeToString(b[:])
	return nil
}

func (t *apiToken) get() string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.secret
}

// write writes the token to tokenPath in root, atomically, with mode 0600.
func (t *apiToken) write(root *os.Root) error {
	base, _, err := writeTemp(root, []byte(t.get()+"\n"), 0o600)
	tmp := stateDir + "/" + base
	if err != nil {
		return fmt.Errorf("writing the API token: %w", err)
	}
	if err := root.Rename(tmp, tokenPath); err != nil {
		root.Remove(tmp)
		return fmt.Errorf("writing the API token: %w", err)
	}
	return nil
}

// allows reports whether r carries the token, as "Authorization: Bearer
// TOKEN" (the scheme in any case, as RFC 6750 allows).
func (t *apiToken) allows(r *http.Request) bool {
	scheme, given, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	return ok && strings.EqualFold(scheme, "Bearer") &&
		subtle.ConstantTimeCompare([]byte(strings.TrimSpace(given)), []byte(t.get())) == 1
}

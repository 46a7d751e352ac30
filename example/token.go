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
	mu      sync.RWMutex
	secret  string
	revoked chan struct{} // closed when secret is replaced
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
	if t.revoked != nil {
		close(t.revoked) // requests under way with the old one end (see allows)
	}
	t.secret, t.revoked = hex.EncodeToString(b[:]), make(chan struct{})
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
// TOKEN" (the scheme in any case, as RFC 6750 allows), and if so returns a
// channel closed once that token is replaced: a request under way (a
// stream of changes) must end then, or whoever read the token while it
// was exposed would go on reading.
func (t *apiToken) allows(r *http.Request) (revoked <-chan struct{}, ok bool) {
	scheme, given, found := strings.Cut(r.Header.Get("Authorization"), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return nil, false
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if subtle.ConstantTimeCompare([]byte(strings.TrimSpace(given)), []byte(t.secret)) != 1 {
		return nil, false
	}
	return t.revoked, true
}

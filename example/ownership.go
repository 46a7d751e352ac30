package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cilium/hive/cell"
)

// The example keeps a record of what it owns in a directory of its own
// inside the target, the way Cilium's route reconciler records the routes
// it installed: it writes, repairs, deletes and prunes only the files listed
// there, so files someone else put in the directory are never touched.
const (
	// stateDir holds the journal, the API's token and the temporary files
	// of atomic writes. Its presence marks a directory the example created
	// or adopted. Only the user running the example may read it.
	stateDir = ".converge-example"
	// tmpPrefix starts the names of temporary files, inside stateDir.
	tmpPrefix = "tmp-"
	// asidePrefix starts the names, inside stateDir, of files moved aside
	// to be checked before they are removed. Such a file is put back if it
	// is not the example's; it stays only if its name was taken again
	// meanwhile, or the example stopped, and is then left to the user.
	asidePrefix = "aside-"
)

// refusedError is a directory or file the example will not use. At start,
// it fails the start with a usage error (exit status 2); later, the
// operation that met it.
type refusedError struct{ msg string }

func (e *refusedError) Error() string { return e.msg }

// ownedDir is the target directory, its ownership journal and the API's
// token file. The directory's parent is opened at start and held: every
// use of the directory goes through it, by the directory's own name, so
// a parent replaced by a symbolic link while the example runs redirects
// nothing. The directory itself is checked at every use (see acquire): a
// directory removed, replaced, or opened to other users is seen as it is
// now, and a symbolic link at its name is refused, not followed.
//
// Its methods are safe for concurrent use.
type ownedDir struct {
	name  string // --dir as given, for messages at start
	path  string // --dir, absolute
	base  string // its last element
	adopt bool
	token *apiToken
	read  fileReader
	log   *slog.Logger

	mu       sync.Mutex
	parent   *os.Root // the directory's parent, held from the start to the stop
	cur      *claimed // the directory as claimed last, nil if none is
	held     *dirLock // the lock on the directory claimed last, nil if none
	started  bool     // after the start, errors do not show the path
	previous map[string]bool
	lastErr  string // of keepPrivate, logged once
	lastDir  fileID // the directory claimed last, to tell one claimed anew
	// tokenFile is the token file as the example last wrote it: a change
	// of it since (see changeTime) was made by someone else.
	tokenFile fs.FileInfo

	// onNewClaim, if set, is called with a directory claimed anew after
	// the start (the one before was moved away or removed), with mu
	// held: the shell moves its socket there.
	onNewClaim func(*claimed)

	stopGuard chan struct{} // closed by stop, to end guard
	guardDone chan struct{} // closed when guard returns
}

// privacyInterval is how often the running example checks that its state
// directory and token are private (see keepPrivate): a chmod -R of the
// tree while nothing is written would otherwise open them to other users
// until the next write.
const privacyInterval = time.Second

// claimed is the target directory as the example claimed it: opened,
// with its journal loaded. It stays in use until the directory at the
// name is another, or its journal failed; it is then retired, and closed
// once no operation uses it.
type claimed struct {
	root      *os.Root
	info      fs.FileInfo // the directory's, to recognise it
	dirFile   *os.File    // the directory, for the system calls os.Root lacks
	stateFile *os.File    // its state directory, likewise
	stateInfo fs.FileInfo // the state directory's, to recognise it
	journal   *journal
	dir       groupSync // fsyncs of the directory, shared by writers

	refs    int // operations using it, guarded by ownedDir.mu
	retired bool
}

type ownedDirParams struct {
	cell.In

	Config config
	Log    *slog.Logger
	Token  *apiToken
	Read   fileReader `optional:"true"`
}

// newOwnedDir checks --dir when the hive is built, before anything starts,
// without changing anything: a directory the example would refuse fails
// the build with a usage error (exit status 2). Its start hook (see
// registerStart) claims the directory, creating it if it is missing.
func newOwnedDir(p ownedDirParams) (*ownedDir, error) {
	path, err := filepath.Abs(p.Config.Dir)
	if err != nil {
		return nil, refuse("dir", fmt.Errorf("--dir %s: %w", p.Config.Dir, err))
	}
	if filepath.Dir(path) == path {
		return nil, usageErrorf("dir", "--dir %s is the root directory; choose a directory below it", p.Config.Dir)
	}
	d := &ownedDir{name: p.Config.Dir, path: path, base: filepath.Base(path), adopt: p.Config.Adopt,
		token: p.Token, read: p.Read, log: p.Log}
	if d.read == nil {
		d.read = readRegular
	}
	if err := d.check(); err != nil {
		return nil, refuse("dir", err)
	}
	return d, nil
}

// label names the directory in errors: by its path before the start,
// plainly after, as errors then reach /health and the API.
func (d *ownedDir) label() string {
	if d.started {
		return "the target directory"
	}
	return "target directory " + d.name
}

// check refuses, without changing anything, a directory the start would
// refuse.
func (d *ownedDir) check() error {
	if err := checkLinks(d.label(), d.path); err != nil {
		return err
	}
	info, err := os.Lstat(d.path)
	if errors.Is(err, fs.ErrNotExist) {
		// It is created at start, and its parent too if it is missing.
		parent, err := os.Stat(filepath.Dir(d.path))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil
		case err != nil:
			return fmt.Errorf("target directory %s: %w", d.name, err)
		case !parent.IsDir():
			return fmt.Errorf("target directory %s: %s is not a directory; choose another --dir", d.name, filepath.Dir(d.path))
		}
		return checkParent(d.label(), filepath.Dir(d.path), parent)
	}
	if err := d.checkDir(info, err); err != nil {
		return err
	}
	parent, err := os.Stat(filepath.Dir(d.path))
	if err != nil {
		return fmt.Errorf("target directory %s: %w", d.name, err)
	}
	if err := checkParent(d.label(), filepath.Dir(d.path), parent); err != nil {
		return err
	}
	root, err := os.OpenRoot(d.path)
	if err != nil {
		return fmt.Errorf("target directory %s: %w", d.name, err)
	}
	defer root.Close()
	_, err = d.inspect(root)
	return err
}

// checkDir refuses what Lstat found at the directory's name unless it is a
// directory that only the user running the example can change.
func (d *ownedDir) checkDir(info fs.FileInfo, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("%s: %w", d.label(), err)
	case info.Mode()&fs.ModeSymlink != 0:
		return &refusedError{fmt.Sprintf("%s is a symbolic link: the example does not follow one; give the directory's own path", d.label())}
	case !info.IsDir() && d.started: // an object's error: no start-up advice
		return fmt.Errorf("%s is not a directory any more: something replaced it while the example ran", d.label())
	case !info.IsDir():
		return fmt.Errorf("%s is not a directory; choose another --dir", d.label())
	}
	fix := "choose another --dir"
	if d.started {
		fix = ""
	}
	if err := checkPrivate(d.label(), info, fix); err != nil {
		return err
	}
	return nil
}

// inspect checks the contents of the directory, which root opens, and
// reports whether it holds the example's state directory. It refuses a
// state directory that is not the example's or that another user can
// change, and a non-empty directory without one unless --adopt was given.
func (d *ownedDir) inspect(root *os.Root) (hasState bool, err error) {
	info, err := root.Lstat(stateDir)
	switch {
	case err == nil && !info.IsDir():
		return false, &refusedError{fmt.Sprintf("%s: %s is not the example's state directory; remove it or choose another --dir", d.label(), stateDir)}
	case err == nil:
		if err := checkPrivate(d.label()+": "+stateDir, info, "remove it or choose another --dir"); err != nil {
			return false, err
		}
		if err := readJournalHeader(root); err != nil {
			return false, &refusedError{fmt.Sprintf("%s: %v; remove %s or choose another --dir", d.label(), err, stateDir)}
		}
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		empty, err := isEmpty(root)
		if err != nil {
			return false, fmt.Errorf("%s: %w", d.label(), err)
		}
		if !empty && !d.adopt {
			return false, &refusedError{fmt.Sprintf("%s is not empty and the example did not create it (it has no %s/): "+
				"choose another --dir, or pass --adopt to let the example add its files there (it never changes or removes the others)", d.label(), stateDir)}
		}
		return false, nil
	default:
		return false, fmt.Errorf("%s: %w", d.label(), err)
	}
}

// start opens the directory's parent, creating it if it is missing, and
// claims the directory. Any failure is about --dir: a usage error.
func (d *ownedDir) start(cell.HookContext) error {
	parentPath := filepath.Dir(d.path)
	if err := checkLinks(d.label(), d.path); err != nil {
		return refuse("dir", err)
	}
	if err := os.MkdirAll(parentPath, 0o755); err != nil {
		return refuse("dir", fmt.Errorf("target directory %s: %w", d.name, err))
	}
	parent, err := os.OpenRoot(parentPath)
	if err != nil {
		return refuse("dir", fmt.Errorf("target directory %s: %w", d.name, err))
	}
	// The parent held is checked, not the one at its path when the
	// hive was built.
	info, err := parent.Stat(".")
	if err == nil {
		err = checkParent(d.label(), parentPath, info)
	}
	if err != nil {
		parent.Close()
		return refuse("dir", err)
	}
	d.mu.Lock()
	d.parent = parent
	d.mu.Unlock()
	c, err := d.acquire()
	if err != nil {
		return refuse("dir", err)
	}
	d.release(c)
	d.mu.Lock()
	d.started = true
	d.mu.Unlock()
	d.stopGuard, d.guardDone = make(chan struct{}), make(chan struct{})
	go d.guard()
	return nil
}

// guard calls keepPrivate every privacyInterval until stop.
func (d *ownedDir) guard() {
	defer close(d.guardDone)
	tick := time.NewTicker(privacyInterval)
	defer tick.Stop()
	for {
		select {
		case <-d.stopGuard:
			return
		case <-tick.C:
			d.keepPrivate()
		}
	}
}

// keepPrivate gives the state directory of the directory claimed last
// mode 0700, and the token a new file of mode 0600, if either was given
// another (a chmod -R a+rX of the tree). If other users could read the
// token meanwhile, it is first replaced by a new one, and the log says so
// and where it is: clients read it again. It claims nothing: a directory
// removed or replaced is claimed again by the next write, as before.
func (d *ownedDir) keepPrivate() {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.cur
	if c == nil {
		return
	}
	msg := ""
	if err := d.protect(c); err != nil {
		msg = err.Error()
	}
	if msg != "" && msg != d.lastErr { // once, not every second
		d.log.Warn("Could not make the state directory private again", "directory", filepath.Join(d.path, stateDir), "error", msg)
	}
	d.lastErr = msg
}

// protect is keepPrivate for c, the directory claimed.
func (d *ownedDir) protect(c *claimed) error {
	state, err := c.stateFile.Stat()
	if err != nil {
		return err
	}
	token, tokenErr := c.root.Lstat(tokenPath)
	exposed := tokenErr == nil && token.Mode().IsRegular() && othersCanRead(state, token)
	changed := tokenErr == nil && token.Mode().IsRegular() && d.changedByOthers(token)
	if !privateMode(state) {
		if err := c.stateFile.Chmod(0o700); err != nil {
			return err
		}
	}
	switch {
	case exposed:
		return d.renewToken(c.root, tokenExposed)
	case changed:
		return d.renewToken(c.root, tokenChanged)
	case tokenErr == nil && !privateMode0600(token):
		return d.writeToken(c.root)
	}
	return nil
}

// changedByOthers reports whether token, the token file as it is now, was
// replaced or changed (a chmod, chown, or link: its change time moved)
// since the example last wrote it. Its mode may have let other users read
// it meanwhile, even if it is private again: a chmod -R a+rX of the tree
// undone before the next check.
func (d *ownedDir) changedByOthers(token fs.FileInfo) bool {
	return d.tokenFile != nil && (!os.SameFile(token, d.tokenFile) || changeTime(token) != changeTime(d.tokenFile))
}

// Why the token is replaced, for the log.
const (
	tokenExposed = "The API token could be read by other users (its directory and file were opened to them): " +
		"it is replaced by a new one; clients must read it again"
	tokenChanged = "The API token's file was changed by someone else since the example wrote it (a chmod, chown or link): " +
		"other users may have read it meanwhile, so it is replaced by a new one; clients must read it again"
	tokenNewDir = "The target directory was claimed anew (the one before was moved away or removed): " +
		"the API has a new token, and the one left in the directory before no longer works; clients must read it again"
)

// renewToken replaces the token by a new one, and writes it to root's
// state directory, private again; the log says why.
func (d *ownedDir) renewToken(root *os.Root, why string) error {
	if err := d.token.renew(); err != nil {
		return err
	}
	if err := d.writeToken(root); err != nil {
		return err
	}
	d.log.Warn(why, "token", filepath.Join(d.path, tokenPath))
	return nil
}

// writeToken writes the token to root's state directory, and records the
// file written, to see later whether someone else changed it.
func (d *ownedDir) writeToken(root *os.Root) error {
	d.tokenFile = nil
	if err := d.token.write(root); err != nil {
		return err
	}
	if info, err := root.Lstat(tokenPath); err == nil {
		d.tokenFile = info
	}
	return nil
}

// stop closes the directory and its parent. The reconciler has stopped.
func (d *ownedDir) stop(cell.HookContext) error {
	if d.stopGuard != nil {
		close(d.stopGuard)
		<-d.guardDone
		d.stopGuard = nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cur != nil {
		d.retire(d.cur)
	}
	d.held.close()
	d.held = nil
	if d.parent != nil {
		d.parent.Close()
		d.parent = nil
	}
	return nil
}

// acquire returns the directory, claimed, for an operation, which must
// release it. The directory at the name is claimed anew if it is not the
// one claimed last: see claim.
func (d *ownedDir) acquire() (*claimed, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.parent == nil {
		return nil, errors.New("the target directory is not open: the example is not running")
	}
	if c := d.cur; c != nil {
		if d.intact(c) {
			c.refs++
			return c, nil
		}
		d.retire(c)
	}
	c, err := d.claim()
	if err != nil {
		return nil, err
	}
	d.cur = c
	c.refs++
	return c, nil
}

// release ends an operation's use of c.
func (d *ownedDir) release(c *claimed) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c.refs--
	if c.retired && c.refs == 0 {
		c.close()
	}
}

// intact reports whether c is still the directory at the name, unchanged
// in who may change it, with its state directory and a working journal.
// Checking the state directory too catches a directory that was replaced
// by a new one with a reused inode number.
func (d *ownedDir) intact(c *claimed) bool {
	if c.journal.failed() != nil {
		return false
	}
	info, err := d.parent.Lstat(d.base)
	if err != nil || !os.SameFile(info, c.info) || checkPrivate("", info, "") != nil {
		return false
	}
	state, err := c.root.Lstat(stateDir)
	return err == nil && os.SameFile(state, c.stateInfo) && checkPrivate("", state, "") == nil && privateMode(state)
}

// retire gives c up: it is closed once no operation uses it. The names
// its journal lists are remembered as written before, so that restoring
// one of them in a directory claimed later counts as drift repaired.
func (d *ownedDir) retire(c *claimed) {
	d.cur = nil
	c.retired = true
	if d.previous == nil {
		d.previous = map[string]bool{}
	}
	for _, name := range c.journal.names() {
		d.previous[name] = true
	}
	if c.refs == 0 {
		c.close()
	}
}

func (c *claimed) close() {
	c.journal.close()
	c.dirFile.Close()
	c.stateFile.Close()
	c.root.Close()
}

// writtenBefore reports whether the example wrote name into a directory it
// claimed before the current one, and has not written it since.
func (d *ownedDir) writtenBefore(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.previous[name]
}

// written notes that name was written into the current directory.
func (d *ownedDir) written(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.previous, name)
}

// claim takes the directory at the name, creating it if it is missing (it
// is part of the desired state). It refuses what checkDir and inspect
// refuse. It loads the directory's journal, or creates one if the
// directory is empty or adopted, writes the API's token, and removes
// temporary files left by an interrupted write.
func (d *ownedDir) claim() (*claimed, error) {
	info, err := d.parent.Lstat(d.base)
	if errors.Is(err, fs.ErrNotExist) {
		// Mkdir, not MkdirAll: a directory that appears meanwhile is not
		// mistaken for one the example created.
		if err = d.parent.Mkdir(d.base, 0o755); err == nil || errors.Is(err, fs.ErrExist) {
			info, err = d.parent.Lstat(d.base)
		}
	}
	if err := d.checkDir(info, err); err != nil {
		return nil, err
	}
	root, err := d.parent.OpenRoot(d.base)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.label(), err)
	}
	c, err := d.claimOpened(root, info)
	if err != nil {
		root.Close()
		return nil, err
	}
	return c, nil
}

func (d *ownedDir) claimOpened(root *os.Root, info fs.FileInfo) (*claimed, error) {
	opened, err := root.Stat(".")
	if err == nil && !os.SameFile(info, opened) {
		err = fmt.Errorf("%s changed while being opened", d.label())
	}
	if err != nil {
		return nil, err
	}
	hasState, err := d.inspect(root)
	if err != nil {
		return nil, err
	}
	var j *journal
	exposed := false // the running example's token, readable by others
	if hasState {
		if err := d.lock(root); err != nil {
			return nil, err
		}
		state, serr := root.Lstat(stateDir)
		token, terr := root.Lstat(tokenPath)
		exposed = d.started && serr == nil && terr == nil && token.Mode().IsRegular() && othersCanRead(state, token)
		if err := makePrivate(root); err != nil {
			return nil, fmt.Errorf("%s: %w", d.label(), err)
		}
		if j, err = loadJournal(root, d.read); err != nil {
			return nil, &refusedError{fmt.Sprintf("%s: %v; remove %s or choose another --dir", d.label(), err, stateDir)}
		}
		d.log.Info("Using a directory the example owns", "directory", d.path, "files", j.len())
	} else {
		empty, err := isEmpty(root)
		if err == nil {
			err = root.Mkdir(stateDir, 0o700)
		}
		if errors.Is(err, fs.ErrExist) { // since inspect: another example claims it
			return nil, &refusedError{fmt.Sprintf("%s is being set up by another converge example: stop that one, or choose another --dir", d.label())}
		}
		if err == nil {
			if err := d.lock(root); err != nil {
				return nil, err
			}
			j, err = createJournal(root)
		}
		if err == nil {
			err = syncDir(root, ".")
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.label(), err)
		}
		if !empty {
			d.log.Info("Adopted a directory; its existing files are left alone", "directory", d.path)
		}
	}
	c := &claimed{root: root, info: opened, journal: j}
	c.dir.sync = func() error { return syncDir(root, ".") }
	err = c.openDirs()
	var id fileID
	anew := false
	if err == nil {
		// By file handle where there is one: a directory claimed before
		// and then removed frees its inode number for the next one.
		id = idOfFile(c.dirFile, opened)
	}
	switch {
	case err == nil && exposed:
		err = d.renewToken(root, tokenExposed)
	case err == nil && d.started && !sameFile(d.lastDir, id):
		// The token in the directory claimed before, wherever it now
		// is, is not watched any more: it must not work.
		err = d.renewToken(root, tokenNewDir)
		anew = true
	case err == nil:
		err = d.writeToken(root)
	}
	if err == nil {
		err = removeTemporaries(root)
	}
	if err != nil {
		j.close()
		c.dirFile.Close()
		c.stateFile.Close()
		return nil, fmt.Errorf("%s: %w", d.label(), err)
	}
	if names, err := readDirNames(root, stateDir); err == nil {
		var aside []string
		for _, name := range names {
			if strings.HasPrefix(name, asidePrefix) {
				aside = append(aside, name)
			}
		}
		if len(aside) > 0 {
			slices.Sort(aside)
			d.log.Warn("Files moved aside by a removal the example did not finish are in its state directory: "+
				"move back those that are yours, and remove the others", "directory", filepath.Join(d.path, stateDir), "names", abbreviate(aside, 5))
		}
	}
	d.lastDir = id
	if anew && d.onNewClaim != nil {
		d.onNewClaim(c)
	}
	return c, nil
}

// openDirs opens the directory and its state directory for the system
// calls os.Root has no method for (see claimed.stat, exchange and
// renameNoReplace), and checks that the state directory opened is the
// one at its name, not a link.
func (c *claimed) openDirs() error {
	var err error
	if c.dirFile, err = c.root.Open("."); err != nil {
		return err
	}
	if c.stateFile, err = c.root.Open(stateDir); err != nil {
		return err
	}
	if c.stateInfo, err = c.stateFile.Stat(); err != nil {
		return err
	}
	if state, err := c.root.Lstat(stateDir); err != nil || !os.SameFile(state, c.stateInfo) {
		return fmt.Errorf("%s changed while being opened", stateDir)
	}
	return nil
}

// makePrivate gives the state directory, which inspect found to be the
// user's own, mode 0700 if it has another (a restore from a backup, a
// chmod -R a+rX of the tree): the token is written there.
func makePrivate(root *os.Root) error {
	info, err := root.Lstat(stateDir)
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return &refusedError{stateDir + " is not a directory"}
	}
	if info.Mode().Perm() == 0o700 {
		return nil
	}
	return root.Chmod(stateDir, 0o700)
}

// removeTemporaries removes temporary files left in the state directory by
// an interrupted write. Only the state directory is looked at, and only
// files the example could have made there are removed: regular files of
// the user's, named as writeTemp names them (tmpPrefix and 16 hex
// digits). A "tmp-notes" of the user's is left alone.
func removeTemporaries(root *os.Root) error {
	names, err := readDirNames(root, stateDir)
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		if !isTempName(name) {
			continue
		}
		if info, err := root.Lstat(stateDir + "/" + name); err == nil && info.Mode().IsRegular() && ownedByUser(info) {
			if err := root.Remove(stateDir + "/" + name); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// isTempName reports whether name is one randomName(tmpPrefix) makes.
func isTempName(name string) bool {
	suffix, ok := strings.CutPrefix(name, tmpPrefix)
	if !ok || len(suffix) != 16 {
		return false
	}
	for _, r := range suffix {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
			return false
		}
	}
	return true
}

func readDirNames(root *os.Root, name string) ([]string, error) {
	dir, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	return dir.Readdirnames(-1)
}

// isEmpty reports whether the directory root opens has no entries.
func isEmpty(root *os.Root) (bool, error) {
	dir, err := root.Open(".")
	if err != nil {
		return false, err
	}
	defer dir.Close()
	names, err := dir.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return len(names) == 0, err
}

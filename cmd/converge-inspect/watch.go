package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/converge-go/converge/tables"
)

// minFrame is the shortest time between two frames of --watch: changes
// that come closer together are shown together.
const minFrame = 250 * time.Millisecond

// watch shows the tables, then again after every change, until ctx ends
// or a stream of changes breaks. It returns the exit status of the last
// state shown when ctx ends. With --reconciler, it fails at the start if
// the name picks no reconciler, as the command does without --watch.
//
// It opens the streams of changes of both tables first, then reads the
// tables: every change after the read is in the streams, and a change at
// or below the highest revision the read saw of its table is already in
// it. (A row deleted between the opening and the read, newer than every
// row left in its table, may come back for a frame, until its deletion,
// next in its stream, is read.)
func watch(ctx context.Context, c *client, o options, w io.Writer) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	var (
		streams []*stream
		wg      sync.WaitGroup
	)
	defer func() {
		cancel()
		for _, s := range streams {
			s.close()
		}
		wg.Wait()
	}()
	for _, table := range []string{tables.ReconcilersTableName, tables.RetriesTableName} {
		s, err := c.changes(ctx, table)
		if err != nil {
			return exitError, err
		}
		streams = append(streams, s)
	}
	qctx, qcancel := context.WithTimeout(ctx, o.timeout)
	t, err := snapshot(qctx, c, c.token)
	qcancel()
	if err != nil {
		return exitError, err
	}
	// --reconciler picks one when the watch starts, as without --watch,
	// and fails the same way: a check that names a reconciler the agent
	// does not have fails at once rather than wait for it.
	id, err := t.pick(o.reconciler)
	if err != nil {
		return exitError, err
	}
	// end is the result when ctx ends: the exit status of the last frame,
	// as the command without --watch would have it.
	end := func(rep report) (int, error) {
		if id != "" && len(rep.Reconcilers) == 0 {
			return exitError, fmt.Errorf("no reconciler %s in the last state shown: it went away", cleanText(id))
		}
		return rep.exitStatus(), nil
	}

	type event struct {
		table string
		row   row
		err   error
	}
	events := make(chan event)
	for _, s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				r, err := s.next()
				select {
				case events <- event{s.table, r, err}:
				case <-ctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		}()
	}

	terminal := isTerminal(w)
	rep := t.report(id)
	if err := drawFrame(w, rep, o.json, terminal); err != nil {
		return exitError, err
	}
	drawn := time.Now()
	next := time.NewTimer(0)
	next.Stop()
	pending := false // a change not yet shown; next is set
	for {
		select {
		case <-ctx.Done():
			return end(rep)
		case ev := <-events:
			if ev.err != nil {
				if ctx.Err() != nil {
					return end(rep)
				}
				return exitError, ev.err
			}
			changed, err := t.apply(ev.table, ev.row)
			if err != nil {
				return exitError, err
			}
			if changed && !pending {
				pending = true
				next.Reset(max(0, minFrame-time.Since(drawn)))
			}
		case <-next.C:
			pending = false
			rep = t.report(id)
			if err := drawFrame(w, rep, o.json, terminal); err != nil {
				return exitError, err
			}
			drawn = time.Now()
		}
	}
}

// drawFrame writes a frame of --watch in one write: JSON on one line, or
// the text under a line with the time, after clearing the screen if w is
// a terminal.
func drawFrame(w io.Writer, rep report, asJSON, terminal bool) error {
	var b bytes.Buffer
	now := time.Now()
	if asJSON {
		if err := rep.writeJSON(&b, true); err != nil {
			return err
		}
	} else {
		if terminal {
			b.WriteString("\x1b[H\x1b[2J") // home, clear the screen
		}
		fmt.Fprintf(&b, "--- %s\n", now.Format(time.TimeOnly))
		if err := rep.writeText(&b, now); err != nil {
			return err
		}
		b.WriteString("\n")
	}
	_, err := w.Write(b.Bytes())
	return err
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// pollInterval is how often --watch --socket reads the tables again: the
// shell has no stream of changes for the command to follow.
const pollInterval = time.Second

// watchPolling is watch for a source without a stream of changes (the
// shell): it reads the tables every pollInterval, and draws a frame when
// what it shows changed, until ctx ends or a read fails. Each read
// replaces the rows before it: what it keeps is bounded as one snapshot
// is.
func watchPolling(ctx context.Context, src source, o options, w io.Writer) (int, error) {
	read := func() (*rowSet, error) {
		qctx, cancel := context.WithTimeout(ctx, o.timeout)
		defer cancel()
		return snapshot(qctx, src, "")
	}
	t, err := read()
	if err != nil {
		return exitError, err
	}
	id, err := t.pick(o.reconciler)
	if err != nil {
		return exitError, err
	}
	terminal := isTerminal(w)
	rep := t.report(id)
	if err := drawFrame(w, rep, o.json, terminal); err != nil {
		return exitError, err
	}
	var last bytes.Buffer
	rep.writeJSON(&last, true)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if id != "" && len(rep.Reconcilers) == 0 {
				return exitError, fmt.Errorf("no reconciler %s in the last state shown: it went away", cleanText(id))
			}
			return rep.exitStatus(), nil
		case <-tick.C:
		}
		t, err := read()
		if err != nil {
			if ctx.Err() != nil {
				continue // ended meanwhile: the last frame's status
			}
			return exitError, err
		}
		next := t.report(id)
		var now bytes.Buffer
		next.writeJSON(&now, true)
		if bytes.Equal(now.Bytes(), last.Bytes()) {
			continue
		}
		rep, last = next, now
		if err := drawFrame(w, rep, o.json, terminal); err != nil {
			return exitError, err
		}
	}
}

package reconciler

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cilium/hive/cell"
	"github.com/cilium/statedb"
)

// WithStartAfter holds back every operation until the reconciled table and
// tables (for example the tables that operations read, or dependencies)
// are initialized, or until timeout passes, whichever comes first. Changes
// made meanwhile are not lost: they are reconciled once it starts. If the
// timeout passes first, the reconciler starts anyway and its health is
// Degraded, naming the tables still waited for, until they are initialized.
// A timeout of zero waits for as long as it takes. Pruning waits for the
// reconciled table's initialization in any case.
//
// By default the reconciler starts at once: objects are reconciled as soon
// as they are written, even while the table is still being filled.
func WithStartAfter(timeout time.Duration, tables ...statedb.TableMeta) Option {
	return func(o *options) {
		o.startAfter = true
		o.startTimeout = timeout
		o.startTables = tables
	}
}

// startGate waits, before the loop's first round, for the tables of
// WithStartAfter to be initialized. It returns false if ctx ended. If it
// gave up waiting, l.gateErr says why until the tables are initialized.
func (l *loop[Obj]) startGate(ctx context.Context, health cell.Health) bool {
	r := l.r
	if !r.opts.startAfter {
		return true
	}
	var timeout <-chan time.Time
	if r.opts.startTimeout > 0 {
		t := time.NewTimer(r.opts.startTimeout)
		defer t.Stop()
		timeout = t.C
	}
	for {
		waiting, watch := l.uninitialized(r.db.ReadTxn())
		if len(waiting) == 0 {
			return true
		}
		health.OK("Waiting for tables to be initialized: " + strings.Join(waiting, ", "))
		select {
		case <-ctx.Done():
			return false
		case <-watch:
		case <-timeout:
			l.gateWatch = watch
			l.gateErr = fmt.Errorf("started after %s without waiting any longer for tables to be initialized: %s",
				r.opts.startTimeout, strings.Join(waiting, ", "))
			r.log.Warn("Reconciler started before its tables were initialized", "tables", waiting, "waited", r.opts.startTimeout)
			return true
		}
	}
}

// uninitialized returns the names of the tables of WithStartAfter not yet
// initialized in txn, and a channel closed when the first of them is.
func (l *loop[Obj]) uninitialized(txn statedb.ReadTxn) ([]string, <-chan struct{}) {
	var (
		names []string
		watch <-chan struct{}
	)
	tables := append([]statedb.TableMeta{l.r.table}, l.r.opts.startTables...)
	for _, t := range tables {
		if ok, w := t.Initialized(txn); !ok {
			names = append(names, t.Name())
			if watch == nil {
				watch = w
			}
		}
	}
	return names, watch
}

// checkGate clears l.gateErr once the tables it names are initialized;
// until then l.gateWatch wakes the loop when one of them is.
func (l *loop[Obj]) checkGate(txn statedb.ReadTxn) {
	if l.gateErr == nil {
		return
	}
	waiting, watch := l.uninitialized(txn)
	if len(waiting) == 0 {
		l.gateErr, l.gateWatch = nil, nil
		return
	}
	l.gateWatch = watch
}

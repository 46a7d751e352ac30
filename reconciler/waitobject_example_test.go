package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/status"
)

// Setting is the desired value of a kernel setting.
type Setting struct {
	Name   string
	Value  string
	Status status.Status
}

func (s *Setting) Clone() *Setting                     { c := *s; return &c }
func (s *Setting) GetStatus() status.Status            { return s.Status }
func (s *Setting) SetStatus(st status.Status) *Setting { s.Status = st; return s }
func (s *Setting) TableHeader() []string               { return []string{"Name", "Value", "Status"} }
func (s *Setting) TableRow() []string                  { return []string{s.Name, s.Value, s.Status.String()} }

var settingName = statedb.Index[*Setting, string]{
	Name:       "name",
	FromObject: func(s *Setting) index.KeySet { return index.NewKeySet(index.String(s.Name)) },
	FromKey:    index.String,
	FromString: index.FromString,
	Unique:     true,
}

// kernel is the target. It refuses values that are not numbers, an error
// that retrying cannot fix.
type kernel struct {
	mu     sync.Mutex
	values map[string]string
}

func (k *kernel) Update(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, s *Setting) error {
	if _, err := strconv.Atoi(s.Value); err != nil {
		return reconciler.TerminalError(fmt.Errorf("%s: value %q is not a number", s.Name, s.Value))
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.values[s.Name] = s.Value
	return nil
}

func (k *kernel) Delete(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, s *Setting) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.values, s.Name)
	return nil
}

func (k *kernel) Prune(context.Context, statedb.ReadTxn, iter.Seq2[*Setting, statedb.Revision]) error {
	return nil
}

// Write a setting and wait until it is applied before depending on it. With
// StopOnError the first failure is returned instead of waiting for a retry
// to succeed; the status does not say whether the error was terminal.
func ExampleWaitForObject() {
	var (
		db       *statedb.DB
		settings statedb.RWTable[*Setting]
	)
	h := hive.New(
		statedb.Cell,
		job.Cell,
		cell.Provide(cell.NewSimpleHealth),
		cell.Module("settings", "Settings reconciler",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(db_ *statedb.DB, p reconciler.Params) (err error) {
				db = db_
				settings, err = statedb.NewTable(db, "settings", settingName)
				if err != nil {
					return err
				}
				_, err = reconciler.Register(p, settings,
					(*Setting).Clone, (*Setting).SetStatus, (*Setting).GetStatus,
					&kernel{values: map[string]string{}}, nil)
				return err
			}),
		),
	)
	log := slog.New(slog.DiscardHandler)
	if err := h.Start(log, context.Background()); err != nil {
		panic(err)
	}
	defer h.Stop(log, context.Background())

	set := func(name, value string) {
		wtxn := db.WriteTxn(settings)
		settings.Insert(wtxn, &Setting{Name: name, Value: value, Status: status.Pending()})
		wtxn.Commit()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	set("net.ipv4.ip_forward", "1")
	s, err := reconciler.WaitForObject(ctx, db, settings, settingName.Query("net.ipv4.ip_forward"), (*Setting).GetStatus)
	fmt.Println(s.Name, s.Status.Kind, err)

	set("net.core.somaxconn", "lots")
	s, err = reconciler.WaitForObject(ctx, db, settings, settingName.Query("net.core.somaxconn"), (*Setting).GetStatus,
		reconciler.StopOnError())
	fmt.Println(s.Name, s.Status.Kind, errors.Is(err, reconciler.ErrObjectFailed))
	fmt.Println(err)
	// Output:
	// net.ipv4.ip_forward Done <nil>
	// net.core.somaxconn Error true
	// WaitForObject: table "settings": object failed to reconcile: net.core.somaxconn: value "lots" is not a number
}

package reconcilertest

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/cilium/hive/script"
	"github.com/cilium/statedb"
	"github.com/spf13/pflag"
)

func saveCmd(reg *Registry) script.Cmd {
	return script.Command(
		script.CmdUsage{
			Summary: "remember objects as they are, status included, for reconciler/put-back",
			Args:    "key...",
			Flags: func(fs *pflag.FlagSet) {
				nameFlag(fs)
				fs.Bool("delete", false, "also delete them from the table, in the same transaction")
			},
			Detail: []string{
				"The command remembers the objects with the given keys as they are in the table now, their status and its hidden identity included, replacing what it remembered for those keys before.",
				"It fails, and remembers nothing, if an object is not in the table.",
				"With --delete it deletes them in the same transaction, as an application taking objects out does.",
				"It needs the Subject's Table to be a statedb.RWTable.",
			},
		},
		func(s *script.State, args ...string) (script.WaitFunc, error) {
			if len(args) == 0 {
				return nil, fmt.Errorf("%w: expected keys", script.ErrUsage)
			}
			sub, err := lookup(s, reg)
			if err != nil {
				return nil, err
			}
			del, err := s.Flags.GetBool("delete")
			if err != nil {
				return nil, err
			}
			return nil, sub.save(args, del)
		},
	)
}

func putBackCmd(reg *Registry) script.Cmd {
	return script.Command(
		script.CmdUsage{
			Summary: "insert objects again exactly as reconciler/save remembered them",
			Args:    "key...",
			Flags:   nameFlag,
			Detail: []string{
				"The command inserts, in one transaction, the objects that reconciler/save remembered for the given keys, as they were then: a Done status stays Done, with its identity, as when an application puts back a copy it read earlier.",
				"Package reconciler's documentation says when such an object is applied again (\"Objects put back\").",
				"It inserts a shallow copy of each (StateDB refuses the very pointer it holds), and keeps what it remembered, so an object can be put back again.",
			},
		},
		func(s *script.State, args ...string) (script.WaitFunc, error) {
			if len(args) == 0 {
				return nil, fmt.Errorf("%w: expected keys", script.ErrUsage)
			}
			sub, err := lookup(s, reg)
			if err != nil {
				return nil, err
			}
			return nil, sub.putBack(args)
		},
	)
}

// writable returns the Subject's table as an RWTable.
func (t *typedSubject[Obj]) writable() (statedb.RWTable[Obj], error) {
	rw, ok := t.s.Table.(statedb.RWTable[Obj])
	if !ok {
		return nil, fmt.Errorf("table %q of reconciler %q is read-only: give Subject.Table as a statedb.RWTable", t.s.Table.Name(), t.s.Name)
	}
	return rw, nil
}

func (t *typedSubject[Obj]) save(keys []string, del bool) error {
	rw, err := t.writable()
	if err != nil {
		return err
	}
	wtxn := t.s.DB.WriteTxn(rw)
	defer wtxn.Abort() // after Commit, does nothing
	objs := make([]Obj, len(keys))
	var missing []string
	for i, key := range keys {
		obj, found, _, err := t.find(wtxn, key)
		if err != nil {
			return err
		}
		if !found {
			missing = append(missing, key)
			continue
		}
		objs[i] = obj
		if del {
			if _, _, err := rw.Delete(wtxn, obj); err != nil {
				return err
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("not in table %q: %s", t.s.Table.Name(), strings.Join(missing, " "))
	}
	wtxn.Commit()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.saved == nil {
		t.saved = map[string]Obj{}
	}
	for i, key := range keys {
		t.saved[key] = objs[i]
	}
	return nil
}

func (t *typedSubject[Obj]) putBack(keys []string) error {
	rw, err := t.writable()
	if err != nil {
		return err
	}
	t.mu.Lock()
	objs := make([]Obj, len(keys))
	var missing []string
	for i, key := range keys {
		obj, ok := t.saved[key]
		if !ok {
			missing = append(missing, key)
		}
		objs[i] = obj
	}
	t.mu.Unlock()
	if len(missing) > 0 {
		return fmt.Errorf("not saved with reconciler/save: %s", strings.Join(missing, " "))
	}
	wtxn := t.s.DB.WriteTxn(rw)
	defer wtxn.Abort()
	for _, obj := range objs {
		if _, _, err := rw.Insert(wtxn, shallowCopy(obj)); err != nil {
			return err
		}
	}
	wtxn.Commit()
	return nil
}

// shallowCopy returns a copy of what obj points to if it is a pointer, and
// obj otherwise.
func shallowCopy[Obj any](obj Obj) Obj {
	v := reflect.ValueOf(&obj).Elem()
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return obj
	}
	c := reflect.New(v.Type().Elem())
	c.Elem().Set(v.Elem())
	return c.Interface().(Obj)
}

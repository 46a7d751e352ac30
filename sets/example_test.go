package sets_test

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"sync"
	"time"

	"github.com/cilium/hive"
	"github.com/cilium/hive/cell"
	"github.com/cilium/hive/job"
	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"

	"github.com/converge-go/converge/reconciler"
	"github.com/converge-go/converge/sets"
	"github.com/converge-go/converge/status"
)

// Node is an object that several reconcilers serve, each through its own
// entry of Statuses.
type Node struct {
	Name     string
	Statuses status.Set
}

func (n *Node) Clone() *Node                   { c := *n; return &c }
func (n *Node) GetStatuses() status.Set        { return n.Statuses }
func (n *Node) SetStatuses(s status.Set) *Node { n.Statuses = s; return n }
func (n *Node) TableHeader() []string          { return []string{"Name", "Statuses"} }
func (n *Node) TableRow() []string             { return []string{n.Name, n.Statuses.String()} }

var nodeByName = statedb.Index[*Node, string]{
	Name:       "name",
	FromObject: func(n *Node) index.KeySet { return index.NewKeySet(index.String(n.Name)) },
	FromKey:    index.String,
	Unique:     true,
}

// A name that left: its entries are removed, the others' kept.
func ExampleTable_Retire() {
	db := statedb.New()
	nodes, _ := statedb.NewTable(db, "nodes", nodeByName)
	wtxn := db.WriteTxn(nodes)
	for _, name := range []string{"n1", "n2"} {
		nodes.Insert(wtxn, &Node{Name: name, Statuses: status.NewSet().Set("routes", status.Done()).Set("ipsec", status.Pending())})
	}
	wtxn.Commit()

	set, err := sets.Of(db, nodes, (*Node).Clone, (*Node).GetStatuses, (*Node).SetStatuses)
	if err != nil {
		panic(err)
	}
	changed, err := set.Retire(context.Background(), "ipsec")
	fmt.Println("changed:", changed, err)
	n, _, _ := nodes.Get(db.ReadTxn(), nodeByName.Query("n1"))
	for name, st := range n.Statuses.All() {
		fmt.Println(name, st.Kind)
	}
	// Output:
	// changed: 2 <nil>
	// routes Done
}

// nodeOps are the operations of one reconciler of the example: they count
// its updates, and fail those of the node named failing.
type nodeOps struct {
	mu      *sync.Mutex
	updates map[string]int
	name    string
	failing string
}

func (o *nodeOps) Update(_ context.Context, _ statedb.ReadTxn, _ statedb.Revision, n *Node) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.updates[o.name]++
	if n.Name == o.failing {
		return fmt.Errorf("no tunnel to %s", n.Name)
	}
	return nil
}
func (o *nodeOps) Delete(context.Context, statedb.ReadTxn, statedb.Revision, *Node) error { return nil }
func (o *nodeOps) Prune(context.Context, statedb.ReadTxn, iter.Seq2[*Node, statedb.Revision]) error {
	return nil
}

// Two reconcilers on one status.Set: wait until both have settled the
// table, then refresh one of them, as an IPsec key rotation would, and wait
// until it attempted each node.
func ExampleTable_Refresh() {
	updates := map[string]int{}
	var mu sync.Mutex
	var (
		db    *statedb.DB
		nodes statedb.RWTable[*Node]
		set   *sets.Table[*Node]
	)
	h := hive.New(statedb.Cell, job.Cell, cell.Provide(cell.NewSimpleHealth),
		cell.Module("nodes", "Nodes",
			cell.Provide(job.Registry.NewGroup),
			cell.Invoke(func(p reconciler.Params) (err error) {
				db = p.DB
				if nodes, err = statedb.NewTable(db, "nodes", nodeByName); err != nil {
					return err
				}
				if set, err = sets.Of(db, nodes, (*Node).Clone, (*Node).GetStatuses, (*Node).SetStatuses); err != nil {
					return err
				}
				for _, name := range []string{"routes", "ipsec"} {
					ops := &nodeOps{mu: &mu, updates: updates, name: name, failing: map[string]string{"ipsec": "n3"}[name]}
					_, err = reconciler.Register(p, nodes, (*Node).Clone, nil, nil, ops, nil, reconciler.WithName(name),
						reconciler.WithStatusSet((*Node).GetStatuses, (*Node).SetStatuses), reconciler.WithRetry(time.Hour, time.Hour))
					if err != nil {
						return err
					}
				}
				return nil
			})))
	log := slog.New(slog.DiscardHandler)
	ctx := context.Background()
	if err := h.Start(log, ctx); err != nil {
		panic(err)
	}
	defer h.Stop(log, ctx)

	wtxn := db.WriteTxn(nodes)
	for _, name := range []string{"n1", "n2", "n3"} {
		nodes.Insert(wtxn, &Node{Name: name, Statuses: status.NewSet().Pending("routes", "ipsec")})
	}
	wtxn.Commit()
	fmt.Println(set.Wait(ctx, []string{"routes", "ipsec"}, sets.DoneOrError()))

	marked, _ := set.Refresh(ctx, "ipsec")
	res, err := marked.Wait(ctx)
	fmt.Println("marked:", marked.Len(), "done:", res.Done, "failed:", res.Failed[0].Key, res.Failed[0].Status.Error, err)
	mu.Lock()
	fmt.Println("updates:", updates["routes"], "routes,", updates["ipsec"], "ipsec")
	mu.Unlock()
	// Output:
	// sets: Wait for routes, ipsec on table "nodes": 1 object(s) failed: n3 (ipsec: Error: no tunnel to n3): object failed to reconcile
	// marked: 3 done: 2 failed: n3 no tunnel to n3 <nil>
	// updates: 3 routes, 6 ipsec
}

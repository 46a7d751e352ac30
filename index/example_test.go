package index_test

import (
	"fmt"
	"strconv"

	"github.com/cilium/statedb"
	statedbindex "github.com/cilium/statedb/index"

	"github.com/converge-go/converge/index"
	"github.com/converge-go/converge/status"
)

type route struct {
	ID     uint64
	Status status.Status
}

func (route) TableHeader() []string { return []string{"ID", "Status"} }
func (r route) TableRow() []string {
	return []string{strconv.FormatUint(r.ID, 10), r.Status.String()}
}

func ExampleNewStatusIndex() {
	routeID := statedb.Index[route, uint64]{
		Name: "id",
		FromObject: func(r route) statedbindex.KeySet {
			return statedbindex.NewKeySet(statedbindex.Uint64(r.ID))
		},
		FromKey: statedbindex.Uint64,
		Unique:  true,
	}
	routeStatus := index.NewStatusIndex(func(r route) status.Status { return r.Status })

	db := statedb.New()
	routes, err := statedb.NewTable(db, "routes", routeID, routeStatus)
	if err != nil {
		panic(err)
	}

	wtxn := db.WriteTxn(routes)
	routes.Insert(wtxn, route{ID: 1, Status: status.Pending()})
	routes.Insert(wtxn, route{ID: 2, Status: status.Done()})
	routes.Insert(wtxn, route{ID: 3, Status: status.Pending()})
	wtxn.Commit()

	// Which routes still wait for the reconciler?
	for r := range routes.List(db.ReadTxn(), routeStatus.Query(status.KindPending)) {
		fmt.Println("pending:", r.ID)
	}
	n := 0
	for range routes.List(db.ReadTxn(), routeStatus.Query(status.KindError)) {
		n++
	}
	fmt.Println("failing:", n)
	// Output:
	// pending: 1
	// pending: 3
	// failing: 0
}

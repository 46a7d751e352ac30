package status_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/converge-go/converge/status"
)

// An object embeds a Status. Writers of desired state mark it Pending; the
// reconciler replaces it with Done or Error.
func ExamplePending() {
	type route struct {
		Prefix string
		Status status.Status
	}

	r := route{Prefix: "10.0.0.0/8", Status: status.Pending()}
	fmt.Println(r.Status.Kind, r.Status.IsPendingOrRefreshing())

	// What the reconciler writes back after a successful Update.
	r.Status = status.Done()
	fmt.Println(r.Status.Kind, r.Status.IsPendingOrRefreshing())
	// Output:
	// Pending true
	// Done false
}

func ExampleError() {
	st := status.Error(errors.New("no route to host"))
	fmt.Println(st.Kind)
	fmt.Println(st.Error)
	fmt.Println(status.Error(nil).Error)
	// Output:
	// Error
	// no route to host
	// <nil>
}

// Every call to a constructor is a new write with its own identity; the
// identity is never encoded, and a status decoded outside a Set has none.
func ExampleStatus_ID() {
	a, b := status.Pending(), status.Pending()
	fmt.Println(a.ID() != 0, a.ID() != b.ID())

	at := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	data, _ := json.Marshal(status.Status{Kind: status.KindDone, UpdatedAt: at})
	fmt.Println(string(data))

	var decoded status.Status
	_ = json.Unmarshal(data, &decoded)
	fmt.Println(decoded.Kind, decoded.ID() != 0)
	// Output:
	// true true
	// {"kind":"Done","updated-at":"2024-01-02T03:04:05Z"}
	// Done false
}

func ExampleParseKind() {
	k, err := status.ParseKind("Refreshing")
	fmt.Println(k, err)
	_, err = status.ParseKind("refreshing")
	fmt.Println(errors.Is(err, status.ErrMalformed))
	// Output:
	// Refreshing <nil>
	// true
}

// A Set holds one status per reconciler for objects reconciled by several.
func ExampleSet() {
	s := status.NewSet()
	// A reconciler without an entry reads Pending.
	fmt.Println(s.Get("routes").Kind)

	// Each reconciler writes its own entry; Set returns a new Set.
	s = s.Set("routes", status.Done())
	s = s.Set("files", status.Error(errors.New("disk full")))
	fmt.Println(s.Get("routes").Kind, s.Get("files").Kind, s.Get("files").Error)

	// When the object changes, every reconciler must act again.
	s = s.Pending()
	fmt.Println(s.Get("routes").Kind, s.Get("files").Kind)
	// Output:
	// Pending
	// Done Error disk full
	// Pending Pending
}

func ExampleSet_String() {
	at := time.Now().Add(-90 * time.Second)
	s := status.NewSet().
		Set("routes", status.Status{Kind: status.KindDone, UpdatedAt: at}).
		Set("files", status.Status{Kind: status.KindError, Error: "disk full", UpdatedAt: at}).
		Set("maps", status.Status{Kind: status.KindPending, UpdatedAt: at})
	fmt.Println(s)
	// Output:
	// Errored: files (disk full), Pending: maps, Done: routes (1m ago)
}

func ExampleSet_MarshalJSON() {
	at := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	s := status.NewSet().
		Set("routes", status.Status{Kind: status.KindDone, UpdatedAt: at}).
		Set("files", status.Status{Kind: status.KindError, Error: "disk full", UpdatedAt: at})
	data, _ := json.MarshalIndent(s, "", "  ")
	fmt.Println(string(data))
	// Output:
	// {
	//   "files": {
	//     "kind": "Error",
	//     "updated-at": "2024-01-02T03:04:05Z",
	//     "error": "disk full"
	//   },
	//   "routes": {
	//     "kind": "Done",
	//     "updated-at": "2024-01-02T03:04:05Z"
	//   }
	// }
}
